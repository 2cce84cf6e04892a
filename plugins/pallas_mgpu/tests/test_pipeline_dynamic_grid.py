"""``emit_pipeline`` over a grid whose size is only known at run time (read
from GMEM inside the kernel, as JAX's transposed ragged dot does per group),
with JAX's API and with ours, in GPU interpret mode, against NumPy."""

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
BLOCK, MAX_BLOCKS = 128, 5


def _prefix_copy(api):
    """o[:count * BLOCK] = 3 * x[:count * BLOCK]; the rest of o keeps its zeros."""
    P, gpu = APIS[api]

    @functools.partial(
        gpu.kernel, out_type=jax.ShapeDtypeStruct((MAX_BLOCKS * BLOCK,), jnp.float32),
        interpret=gpu.InterpretGPUParams())
    def k(count_ref, x_ref, o_ref):
        o_ref[...] = jnp.zeros_like(o_ref)

        def body(idx, x_smem):
            o_ref[P.ds(idx[0] * BLOCK, BLOCK)] = x_smem[...] * 3

        # (JAX's interpreter has no predicated TMA write-back, which pipelined
        # outputs of a dynamic grid need: the body stores to GMEM itself)
        gpu.emit_pipeline(body, grid=(count_ref[0],),
                          in_specs=[gpu.BlockSpec((BLOCK,), lambda i: (i,))],
                          max_concurrent_steps=2)(x_ref)
    return k


@pytest.mark.parametrize("api", APIS)
def test_pipeline_grid_size_read_in_the_kernel(api, rng):
    count = int(rng.integers(1, MAX_BLOCKS))
    x = rng.standard_normal(MAX_BLOCKS * BLOCK).astype(np.float32)
    got = np.asarray(jax.jit(_prefix_copy(api))(np.array([count], np.int32), x))
    want = np.zeros(MAX_BLOCKS * BLOCK)
    want[:count * BLOCK] = 3 * x[:count * BLOCK].astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-6)
