"""Blocked matmul: an "arbitrary" k axis accumulating in a VMEM scratch buffer."""

import jax
import jax.numpy as jnp
import numpy as np

import pallas_frontend as pl
import pallas_tpu as pltpu


def matmul_kernel(x_ref, y_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def matmul(x, y, *, bm=128, bn=128, bk=128, interpret=False, vmem_limit_bytes=None):
    m, k = x.shape
    _, n = y.shape
    return pl.pallas_call(
        matmul_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
        grid=(m // bm, n // bn, k // bk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
                  pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary"),
            vmem_limit_bytes=vmem_limit_bytes),
        interpret=interpret)(x, y)


def test_matmul_aot_v5e(aot_compile):
    x = jnp.zeros((256, 384), jnp.bfloat16)
    y = jnp.zeros((384, 256), jnp.bfloat16)
    compiled, text = aot_compile(matmul, x, y)
    assert "tpu_custom_call" in text
    assert compiled is not None


def test_matmul_tpu_interpret_matches_numpy():
    rng = np.random.default_rng()
    x = rng.standard_normal((256, 384)).astype(np.float32)
    y = rng.standard_normal((384, 256)).astype(np.float32)
    out = matmul(jnp.asarray(x), jnp.asarray(y), interpret=pltpu.InterpretParams())
    want = x.astype(np.float64) @ y.astype(np.float64)
    # f32 inputs, f32 accumulation over k=384: relative error ~1e-6, atol for cancellations.
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-4, atol=1e-3)
