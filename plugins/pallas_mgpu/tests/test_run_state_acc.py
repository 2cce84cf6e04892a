"""``pl.run_state(f)(plgpu.ACC.init(acc))`` in a Mosaic GPU kernel (JAX's
FlashAttention kernels accumulate this way): the accumulator starts as
``acc``, ``f`` adds WGMMAs into it, ``run_state`` returns its final value.
Lowered for cuda with JAX's API and with ours. (JAX's GPU interpret mode
cannot run a ``run_state`` whose body closes over SMEM Refs, with either
API: "Cannot lower jaxpr with effects"; the numbers need a GPU.)"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as jax_pl
from jax.experimental.pallas import mosaic_gpu as jax_plgpu

import pallas_frontend as pl
import pallas_mgpu as plgpu
from pallas_mgpu import _jax_private, aot

APIS = {"jax": (jax_pl, jax_plgpu), "ours": (pl, plgpu)}
M = N = K = 64


def _acc_matmul(api):
    """o = c * 2 + a @ b: ``c * 2`` starts the accumulator, run_state adds a @ b."""
    P, gpu = APIS[api]
    t = (gpu.TilingTransform((8, 64)), gpu.SwizzleTransform(128))

    @functools.partial(
        gpu.kernel, out_type=jax.ShapeDtypeStruct((M, N), jnp.float32),
        scratch_types=[gpu.SMEM((M, K), jnp.float16, transforms=t),
                       gpu.SMEM((K, N), jnp.float16, transforms=t), gpu.Barrier(num_arrivals=2)],
        )
    def k(a_ref, b_ref, c_ref, o_ref, a_smem, b_smem, bar):
        gpu.copy_gmem_to_smem(a_ref, a_smem, bar)
        gpu.copy_gmem_to_smem(b_ref, b_smem, bar)
        start = gpu.layout_cast(c_ref[...] * 2, gpu.Layout.WGMMA)

        def add_product(acc_ref):     # closes over SMEM buffers and a barrier
            gpu.barrier_wait(bar)
            gpu.wgmma(acc_ref, a_smem, b_smem)
        o_ref[...] = P.run_state(add_product)(gpu.ACC.init(start))
    return k


def test_run_state_accumulator_lowers_for_cuda_as_jax():
    S = jax.ShapeDtypeStruct
    args = S((M, K), jnp.float16), S((K, N), jnp.float16), S((M, N), jnp.float32)
    modules = {api: _jax_private.mosaic_gpu_modules(aot.lower_for_cuda(_acc_matmul(api), *args))
               for api in APIS}
    (ours,), (theirs,) = modules["ours"], modules["jax"]
    # one WGMMA started from the loaded accumulator, as in JAX's kernel
    assert ours.count("wgmma") == theirs.count("wgmma") > 0
