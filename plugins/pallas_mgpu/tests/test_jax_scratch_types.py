"""JAX's own Mosaic GPU scratch types (``jax...mosaic_gpu.SMEM``, ``Barrier``,
``ClusterBarrier``) handed to our ``pl.run_scoped`` and ``pallas_mgpu.kernel``
(user code that mixes JAX's and ours), in GPU interpret mode, against NumPy."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental.pallas import mosaic_gpu as jax_plgpu

import pallas_frontend as pl
import pallas_mgpu as plgpu

N = 256


def test_run_scoped_takes_jax_smem_and_barrier(rng):
    @functools.partial(plgpu.kernel, out_type=jax.ShapeDtypeStruct((N,), jnp.float32),
                       scratch_types=[jax_plgpu.SMEM((N,), jnp.float32)],
                       interpret=plgpu.InterpretParams())
    def k(x_ref, o_ref, tmp):
        def body(buf, bar):
            plgpu.copy_gmem_to_smem(x_ref, buf, bar)
            plgpu.barrier_wait(bar)
            tmp[...] = buf[...] * buf[...]
            o_ref[...] = tmp[...] - buf[...]
        pl.run_scoped(body, jax_plgpu.SMEM((N,), jnp.float32),
                      jax_plgpu.Barrier(num_arrivals=1))
    x = rng.standard_normal(N).astype(np.float32)
    xd = x.astype(np.float64)
    np.testing.assert_allclose(jax.jit(k)(x), xd * xd - xd, rtol=1e-6, atol=1e-6)
