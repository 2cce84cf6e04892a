"""A masked load/store through a window that runs past the Ref reads and writes
the right lanes, as JAX's interpreter does (issue 24, defect 3; JAX #21143):
lax.dynamic_slice clamps the window into the Ref, shifting every lane."""

import jax
import jax.experimental.pallas as jpl
import jax.experimental.pallas.triton as jpt
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
from conftest import rand

pt = pytest.importorskip("pallas_triton")


def _load_kernel(tl):
    def kern(s_ref, x, o):
        s = s_ref[0]
        mask = jnp.arange(8) + s < x.shape[0]
        o[...] = tl.load(x.at[pl.ds(s, 8)], mask=mask, other=-1.0)
    return kern


def _store_kernel(tl):
    def kern(s_ref, x, o):
        s = s_ref[0]
        o[...] = x[...] * 0 - 7.0
        mask = jnp.arange(8) + s < o.shape[0]
        tl.store(o.at[pl.ds(s, 8)], x[...] * 2, mask=mask)
    return kern


def _call(mod, kern, s, x):
    return mod.pallas_call(kern, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                           interpret=True)(jnp.array([s], jnp.int32), x)


@pytest.mark.parametrize("start", [0, 3, 7, 8])
def test_masked_load_past_the_end(rng, start):
    x = rand(rng, 8)
    want = _call(jpl, _load_kernel(jpt), start, x)
    np.testing.assert_array_equal(want, np.r_[x[start:], [-1.0] * start])   # JAX's own answer
    np.testing.assert_array_equal(_call(pl, _load_kernel(pt), start, x), want)


@pytest.mark.parametrize("start", [0, 5, 8])
def test_masked_store_past_the_end(rng, start):
    x = rand(rng, 8)
    want = _call(jpl, _store_kernel(jpt), start, x)
    np.testing.assert_array_equal(want, np.r_[[-7.0] * start, 2 * x[:8 - start]])
    np.testing.assert_array_equal(_call(pl, _store_kernel(pt), start, x), want)


def test_masked_load_past_the_end_in_a_grid(rng):
    """Batched over a grid axis (the vectorized interpreter vmaps the rule)."""
    x = rand(rng, 4, 8)

    def run(mod, tl):
        def kern(x, o):
            s = mod.program_id(0) * 2 + 1
            mask = (jnp.arange(8) + s < 8)[None]
            o[...] = tl.load(x.at[:, mod.ds(s, 8)], mask=mask, other=0.5)
        return mod.pallas_call(
            kern, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
            in_specs=[mod.BlockSpec((1, 8), lambda i: (i, 0))],
            out_specs=mod.BlockSpec((1, 8), lambda i: (i, 0)), interpret=True)(x)

    np.testing.assert_array_equal(run(pl, pt), run(jpl, jpt))
