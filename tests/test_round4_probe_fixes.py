"""Defects the issue-39 round-4 probe (tests/probes/probe_round4_*.py) found in
the frontend, each against NumPy or JAX's own Pallas on fresh random data.

- ``pl.ds(start, size, stride=0)`` on a Ref crashed with a ZeroDivisionError
  from inside JAX's discharge (TPU interpret mode: JAX's callback error); now
  a RefIndexError naming the kernel line, on every interpreter.
- ``name=123`` (or bytes) ran; JAX fails in a regex on it. Now a TypeError
  naming ``name=`` and the kernel.
- a block dim given as a concrete ``jnp.int32(8)`` was refused; JAX takes it.
"""

import jax
import jax.experimental.pallas as jpl
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
from conftest import rand


def _tpu_interpret():
    pallas_tpu = pytest.importorskip("pallas_tpu")
    return pallas_tpu.InterpretParams()


# TPU interpret mode checks Ref bounds itself when it runs; a zero stride must still
# be refused at trace time (it was JAX's callback error there, naming no kernel)
@pytest.mark.parametrize("interpret", [True, "tpu"])
def test_zero_stride_ds_is_refused_naming_the_line(rng, interpret):
    x = rand(rng, 16, 128)
    interpret = _tpu_interpret() if interpret == "tpu" else interpret

    def k_zero_stride(x_ref, o_ref):
        o_ref[...] = x_ref[pl.ds(0, 16, 0), :]
    with pytest.raises(pl.RefIndexError, match=r"stride=0.*stride below 1") as info:
        pl.pallas_call(k_zero_stride, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
                       interpret=interpret)(x)
    assert "k_zero_stride" in str(info.value) and "test_round4_probe_fixes.py" in str(info.value)


def test_positive_strides_still_read_the_strided_rows(rng):
    x = rand(rng, 16, 128)

    def k_stride3(x_ref, o_ref):
        o_ref[...] = x_ref[pl.ds(1, 5, 3), :] * 2
    got = pl.pallas_call(k_stride3, out_shape=jax.ShapeDtypeStruct((5, 128), jnp.float32),
                         interpret=True)(x)
    np.testing.assert_allclose(np.asarray(got), x.astype(np.float64)[1:16:3] * 2, rtol=1e-6)


@pytest.mark.parametrize("name", [123, b"k", 1.5])
def test_name_must_be_a_str(rng, name):
    def k_named(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    with pytest.raises(TypeError, match=r"name= must be a str") as info:
        pl.pallas_call(k_named, out_shape=jax.ShapeDtypeStruct((8,), jnp.float32), name=name,
                       interpret=True)(rand(rng, 8))
    assert "k_named" in str(info.value)


def test_concrete_jnp_int_block_dim_as_jax(rng):
    x = rand(rng, 32, 128)

    def call(m):
        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...] + m.program_id(0).astype(jnp.float32)
        return m.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((32, 128), jnp.float32),
                             grid=(4,), in_specs=[m.BlockSpec((jnp.int32(8), 128),
                                                              lambda i: (i, 0))],
                             out_specs=m.BlockSpec((np.int64(8), 128), lambda i: (i, 0)),
                             interpret=True)(x)
    want = x.astype(np.float64) + np.repeat(np.arange(4), 8)[:, None]
    np.testing.assert_allclose(np.asarray(call(pl)), want, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(call(jpl)), want, rtol=1e-6)
