"""``pl.run_scoped`` takes pytrees of scratch types (dicts, lists, tuples,
nested; ``None`` leaves) and hands the body the Refs in the same structure, as
JAX does (JAX's Mosaic GPU pipelines pass a dict). Compared with JAX's
``pallas_call(interpret=True)`` running the same kernel on fresh random data."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as jpl

import pallas_frontend as pl

N, BLOCK = 512, 128


def _call(P):
    def scratch():
        return P.ANY((BLOCK,), jnp.float32)

    def kernel(x_ref, o_ref):
        def body(bufs, extra, *, acc, skip):
            assert skip is None and bufs["pair"][0] is None
            a, b = bufs["a"], bufs["pair"][1]["b"]
            a[...] = x_ref[...] * 2
            b[...] = a[...] + 1
            acc[...] = b[...] * x_ref[...]
            extra[0][...] = acc[...] - a[...]
            return extra[0][...].sum()
        total = P.run_scoped(body, {"a": scratch(), "pair": (None, {"b": scratch()})},
                             [scratch()], acc=scratch(), skip=None)
        o_ref[...] = x_ref[...] + total
    spec = P.BlockSpec((BLOCK,), lambda i: (i,))
    return P.pallas_call(kernel, jax.ShapeDtypeStruct((N,), jnp.float32), grid=(N // BLOCK,),
                         in_specs=[spec], out_specs=spec, interpret=True)


def test_pytrees_of_scratch_types_match_jax(rng):
    x = rng.standard_normal(N).astype(np.float32)
    want = np.asarray(_call(jpl)(x))
    got = np.asarray(_call(pl)(x))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # and against NumPy: per block, x + sum((2x + 1) x - 2x)
    xb = x.astype(np.float64).reshape(-1, BLOCK)
    ref = xb + ((2 * xb + 1) * xb - 2 * xb).sum(1, keepdims=True)
    np.testing.assert_allclose(got, ref.reshape(-1), rtol=1e-4, atol=1e-4)


def test_a_bad_leaf_is_named_by_its_position():
    def kernel(x_ref, o_ref):
        pl.run_scoped(lambda bufs: None, {"ok": pl.ANY((8,), jnp.float32), "bad": 3})
    f = pl.pallas_call(kernel, jax.ShapeDtypeStruct((8,), jnp.float32), interpret=True)
    with pytest.raises(TypeError, match=r"run_scoped types\[0\]\['bad'\]: 3 is not a scratch type"):
        f(np.ones(8, np.float32))
