"""``pl.run_scoped`` with a pytree of Mosaic GPU scratch types (as JAX's
Mosaic GPU pipelines pass a dict: SMEM buffers, a barrier, a None), once with
JAX's API and once with ours, in GPU interpret mode, against NumPy."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as jax_pl
from jax_window import jplgpu as jax_plgpu  # JAX's plgpu (with 0.10's GPU interpret API)

import pallas_frontend as pl
import pallas_mgpu as plgpu

APIS = {"jax": (jax_pl, jax_plgpu), "ours": (pl, plgpu)}
N = 256


def _kernel(api):
    P, gpu = APIS[api]

    @functools.partial(gpu.kernel, out_type=jax.ShapeDtypeStruct((N,), jnp.float32),
                       interpret=gpu.InterpretGPUParams())
    def k(x_ref, o_ref):
        def body(bufs, *, spare):
            assert spare is None and bufs["none"] is None
            smem, (twice,) = bufs["in"], bufs["tmp"]
            gpu.copy_gmem_to_smem(x_ref, smem, bufs["barrier"])
            gpu.barrier_wait(bufs["barrier"])
            twice[...] = smem[...] * 2
            o_ref[...] = twice[...] - smem[...] * smem[...]
        P.run_scoped(body, {"in": gpu.SMEM((N,), jnp.float32), "none": None,
                            "tmp": (gpu.SMEM((N,), jnp.float32),),
                            "barrier": gpu.Barrier(num_arrivals=1)}, spare=None)
    return k


@pytest.mark.parametrize("api", APIS)
def test_run_scoped_dict_of_mosaic_gpu_scratch(api, rng):
    x = rng.standard_normal(N).astype(np.float32)
    got = np.asarray(jax.jit(_kernel(api))(x))
    xd = x.astype(np.float64)
    np.testing.assert_allclose(got, 2 * xd - xd * xd, rtol=1e-6, atol=1e-6)
