"""emit_pipeline and emit_pipeline_warp_specialized inside pallas_mgpu.kernel:
interpret mode against NumPy, and lowering for cuda (WGMMA + TMA)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import pallas_frontend as pl
import pallas_mgpu as plgpu
from pallas_mgpu import _jax_private, aot

M = N = K = 256
BM, BN, BK = 64, 128, 64
T = (plgpu.TilingTransform((8, 64)), plgpu.SwizzleTransform(128))


def _matmul(warp_specialized: bool, interpret):
    def body(a, b, o):
        mi, ni = lax.axis_index("m"), lax.axis_index("n")
        specs = [plgpu.BlockSpec((BM, BK), lambda k: (mi, k), transforms=T),
                 plgpu.BlockSpec((BK, BN), lambda k: (k, ni), transforms=T)]

        def scope(out_smem):
            def with_acc(acc):
                def step(idx, a_s, b_s):
                    plgpu.wgmma(acc, a_s, b_s)
                    plgpu.wgmma_wait(0)
                if warp_specialized:
                    plgpu.emit_pipeline_warp_specialized(
                        step, grid=(K // BK,), memory_registers=40, wg_axis="wg",
                        num_compute_wgs=1, in_specs=specs, max_concurrent_steps=2)(a, b)
                else:
                    plgpu.emit_pipeline(step, grid=(K // BK,), in_specs=specs,
                                        max_concurrent_steps=2)(a, b)

                @pl.when(lax.axis_index("wg") == 0 if warp_specialized else True)
                def _():
                    out_smem[...] = acc[...]
                    plgpu.commit_smem()
                    plgpu.copy_smem_to_gmem(out_smem, o.at[pl.ds(mi * BM, BM), pl.ds(ni * BN, BN)])
                    plgpu.wait_smem_to_gmem(0)
            pl.run_scoped(with_acc, plgpu.ACC((BM, BN)))
        pl.run_scoped(scope, plgpu.SMEM((BM, BN), jnp.float32),
                      collective_axes="wg" if warp_specialized else ())
    threads = dict(num_threads=2, thread_name="wg") if warp_specialized else {}
    return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((M, N), jnp.float32),
                        grid=(M // BM, N // BN), grid_names=("m", "n"), interpret=interpret,
                        **threads)


@pytest.mark.parametrize("warp_specialized", [False, True])
def test_pipelined_matmul_matches_numpy(rng, warp_specialized):
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    got = _matmul(warp_specialized, plgpu.InterpretParams())(a, b)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-3, atol=1e-2)


def test_pipelined_matmul_lowers_with_wgmma():
    s = jax.ShapeDtypeStruct((M, K), jnp.float16)
    (module,) = _jax_private.mosaic_gpu_modules(aot.lower_for_cuda(_matmul(False, None), s, s))
    assert "wgmma.mma_async" in module and "cp.async.bulk" in module


def test_warp_specialized_pipeline_lowers():
    """A scaling pipeline (in and out blocks): the memory warpgroup issues the
    TMA copies and gives registers back. (An ACC around a warp-specialized
    pipeline needs JAX's compute_context, which pallas_mgpu does not offer.)"""
    def body(x, o):
        spec = plgpu.BlockSpec((64, 128), lambda i: (i, 0), transforms=T)

        def step(idx, x_s, o_s):
            o_s[...] = x_s[...] * 2
        plgpu.emit_pipeline_warp_specialized(
            step, grid=(4,), memory_registers=40, wg_axis="wg", num_compute_wgs=1,
            in_specs=[spec], out_specs=[spec], max_concurrent_steps=2)(x, o)
    f = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((256, 128), jnp.float16),
                     num_threads=2, thread_name="wg")
    (module,) = _jax_private.mosaic_gpu_modules(
        aot.lower_for_cuda(f, jax.ShapeDtypeStruct((256, 128), jnp.float16)))
    assert "setmaxnreg" in module and "cp.async.bulk" in module
