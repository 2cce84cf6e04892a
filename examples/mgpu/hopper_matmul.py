"""A Hopper matmul written against pallas_mgpu, in the style of JAX's Mosaic
GPU kernels: a cluster grid over output tiles (clusters of ``cluster_n``
CTAs along n), two warpgroup threads per CTA (each owns half of the tile's
rows), SMEM buffers shared by the CTA from ``pl.run_scoped(...,
collective_axes="wg")``, a two-slot TMA pipeline over k with a barrier per
slot and operand, WGMMA into a register accumulator, and a TMA write-back. With JAX's module, only the two import lines differ:

    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax

import pallas_frontend as pl
import pallas_mgpu as plgpu


def matmul(a, b, *, tile_m=128, tile_n=128, tile_k=64, cluster_n=2, interpret=None):
    m, k = a.shape
    _, n = b.shape
    wg_m = tile_m // 2                       # rows per warpgroup
    k_steps = k // tile_k
    swizzle = plgpu.find_swizzle(tile_k * jnp.dtype(a.dtype).itemsize * 8)
    elems = swizzle // jnp.dtype(a.dtype).itemsize
    transforms = (plgpu.TilingTransform((8, elems)), plgpu.SwizzleTransform(swizzle))
    b_swizzle = plgpu.find_swizzle(tile_n * jnp.dtype(b.dtype).itemsize * 8)
    b_transforms = (plgpu.TilingTransform((8, b_swizzle // jnp.dtype(b.dtype).itemsize)),
                    plgpu.SwizzleTransform(b_swizzle))

    def kernel(a_gmem, b_gmem, out_gmem):
        mi, wg = lax.axis_index("m"), lax.axis_index("wg")
        ni = lax.axis_index("n") * cluster_n + lax.axis_index("cluster")   # CTA in the cluster
        rows = pl.ds(mi * tile_m + wg * wg_m, wg_m)
        cols = pl.ds(ni * tile_n, tile_n)

        @functools.partial(
            pl.run_scoped,
            a_smem=plgpu.SMEM((2, 2, wg_m, tile_k), a.dtype, transforms=transforms),
            b_smem=plgpu.SMEM((2, 2, tile_k, tile_n), b.dtype, transforms=b_transforms),
            out_smem=plgpu.SMEM((2, wg_m, tile_n), jnp.float32),
            barriers=plgpu.Barrier(num_barriers=8),   # (wg, slot, operand)
            collective_axes="wg",
        )
        def scope(a_smem, b_smem, out_smem, barriers):
            def fetch(step, slot):
                ks = pl.ds(step * tile_k, tile_k)
                bar = wg * 4 + slot * 2
                plgpu.copy_gmem_to_smem(a_gmem.at[rows, ks], a_smem.at[wg, slot], barriers.at[bar])
                plgpu.copy_gmem_to_smem(b_gmem.at[ks, cols], b_smem.at[wg, slot],
                                        barriers.at[bar + 1])

            def acc_scope(acc):
                fetch(0, 0)

                def step(s, _):
                    slot = s % 2

                    @pl.when(s + 1 < k_steps)
                    def _():
                        fetch(s + 1, 1 - slot)
                    plgpu.barrier_wait(barriers.at[wg * 4 + slot * 2])
                    plgpu.barrier_wait(barriers.at[wg * 4 + slot * 2 + 1])
                    plgpu.wgmma(acc, a_smem.at[wg, slot], b_smem.at[wg, slot])
                    plgpu.wgmma_wait(0)
                    return ()
                lax.fori_loop(0, k_steps, step, ())
                return acc[...]
            out = pl.run_scoped(acc_scope, plgpu.ACC((wg_m, tile_n), jnp.float32))
            out_smem[wg] = out
            plgpu.commit_smem()
            plgpu.copy_smem_to_gmem(out_smem.at[wg], out_gmem.at[rows, cols])
            plgpu.wait_smem_to_gmem(0)

    f = plgpu.kernel(
        kernel, out_type=jax.ShapeDtypeStruct((m, n), jnp.float32),
        grid=(m // tile_m, n // (tile_n * cluster_n)), grid_names=("m", "n"),
        cluster=(cluster_n,), cluster_names=("cluster",),
        num_threads=2, thread_name="wg", interpret=interpret)
    return f(a, b)


if __name__ == "__main__":
    import numpy as np
    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 256)).astype(np.float16)
    b = rng.standard_normal((256, 256)).astype(np.float16)
    out = matmul(a, b, interpret=plgpu.InterpretParams())
    ref = a.astype(np.float64) @ b.astype(np.float64)
    print("max abs error vs NumPy:", float(np.abs(np.asarray(out) - ref).max()))
