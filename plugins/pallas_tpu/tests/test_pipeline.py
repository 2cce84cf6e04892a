"""emit_pipeline inside a kernel over HBM operands: AOT for v5e and TPU interpret."""

import jax
import jax.numpy as jnp
import numpy as np

import pallas_frontend as pl
import pallas_tpu as pltpu


def pipelined_kernel(x_hbm, y_hbm, o_hbm, scale_ref):
    scale = scale_ref[0, 0]

    def inner(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] * scale + y_ref[...]

    pltpu.emit_pipeline(
        inner, grid=(x_hbm.shape[0] // 128, x_hbm.shape[1] // 128),
        in_specs=[pl.BlockSpec((128, 128), lambda i, j: (i, j))] * 2,
        out_specs=pl.BlockSpec((128, 128), lambda i, j: (i, j)))(x_hbm, y_hbm, o_hbm)


def scaled_add(x, y, scale, interpret=False):
    def kernel(x_hbm, y_hbm, scale_ref, o_hbm):
        pipelined_kernel(x_hbm, y_hbm, o_hbm, scale_ref)
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pltpu.ANY)] * 2
        + [pl.BlockSpec(memory_space=pltpu.SMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.ANY),
        compiler_params=pltpu.CompilerParams(),
        interpret=interpret)(x, y, scale)


def test_emit_pipeline_aot(aot_compile):
    z = jnp.zeros((256, 384), jnp.float32)
    compiled, text = aot_compile(scaled_add, z, z, jnp.zeros((1, 1), jnp.float32))
    assert "tpu_custom_call" in text


def test_emit_pipeline_interpret():
    rng = np.random.default_rng()
    x, y = (rng.standard_normal((256, 384)).astype(np.float32) for _ in range(2))
    s = np.float32(rng.uniform(0.5, 2.0))
    out = scaled_add(jnp.asarray(x), jnp.asarray(y), jnp.full((1, 1), s),
                     interpret=pltpu.InterpretParams())
    want = x.astype(np.float64) * float(s) + y.astype(np.float64)
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-6, atol=1e-6)
