"""tcgen05 (Blackwell) MMA into TMEM, its commit barrier and TMEM loads, in
GPU interpret mode against NumPy. Compiling it is untested: off-GPU JAX 0.12
always targets sm_90a, which has no tcgen05 (see the README)."""

import jax
import jax.numpy as jnp
import numpy as np

import pallas_frontend as pl
import pallas_mgpu as plgpu

T = (plgpu.TilingTransform((8, 64)), plgpu.SwizzleTransform(128))


def test_tcgen05_mma_into_tmem_matches_numpy(rng):
    def body(a, b, o):
        def scope(a_s, b_s, acc, out_s, bars, mma_bar):
            plgpu.copy_gmem_to_smem(a, a_s, bars.at[0])
            plgpu.copy_gmem_to_smem(b, b_s, bars.at[1])
            plgpu.barrier_wait(bars.at[0])
            plgpu.barrier_wait(bars.at[1])
            plgpu.tcgen05_mma(acc, a_s, b_s, mma_bar, accumulate=False)
            plgpu.barrier_wait(mma_bar)
            out_s[...] = plgpu.async_load_tmem(acc)
            plgpu.wait_load_tmem()
            plgpu.commit_smem()
            plgpu.copy_smem_to_gmem(out_s, o)
            plgpu.wait_smem_to_gmem(0)
        pl.run_scoped(scope, plgpu.SMEM((128, 64), jnp.float16, transforms=T),
                      plgpu.SMEM((64, 128), jnp.float16, transforms=T),
                      plgpu.TMEM((128, 128), jnp.float32), plgpu.SMEM((128, 128), jnp.float32),
                      plgpu.Barrier(num_barriers=2), plgpu.Barrier(orders_tensor_core=True))
    f = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct((128, 128), jnp.float32),
                     interpret=plgpu.InterpretParams())
    a = rng.standard_normal((128, 64)).astype(np.float16)
    b = rng.standard_normal((64, 128)).astype(np.float16)
    np.testing.assert_allclose(f(a, b), a.astype(np.float64) @ b, rtol=1e-3, atol=1e-2)
