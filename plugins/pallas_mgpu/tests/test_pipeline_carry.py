"""``emit_pipeline(..., init_carry=...)``: the body takes the carry and returns
the next one, the pipeline returns the last; with JAX's API and with ours, in
GPU interpret mode, against NumPy."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax_window import jplgpu as jax_plgpu  # JAX's plgpu (with 0.10's GPU interpret API)

import pallas_mgpu as plgpu

APIS = {"jax": jax_plgpu, "ours": plgpu}
BLOCK, BLOCKS = 128, 4


def _running_sum(gpu, scale):
    """o = (sum of the BLOCKS blocks of x, elementwise max of them) * scale."""

    @functools.partial(
        gpu.kernel, out_type=jax.ShapeDtypeStruct((2, BLOCK), jnp.float32),
        interpret=gpu.InterpretGPUParams())
    def k(x_ref, o_ref):
        def body(idx, x_smem, carry):
            total, top = carry
            return total + x_smem[...], jnp.maximum(top, x_smem[...])

        start = (jnp.zeros((BLOCK,), jnp.float32), jnp.full((BLOCK,), -jnp.inf, jnp.float32))
        total, top = gpu.emit_pipeline(
            body, grid=(BLOCKS,), in_specs=[gpu.BlockSpec((BLOCK,), lambda i: (i,))],
            max_concurrent_steps=2, init_carry=start)(x_ref)
        o_ref[0, :] = total * scale
        o_ref[1, :] = top * scale
    return k


@pytest.mark.parametrize("api", APIS)
def test_pipeline_carry(api, rng):
    x = rng.standard_normal(BLOCKS * BLOCK).astype(np.float32)
    scale = float(rng.uniform(0.5, 2.0))
    got = np.asarray(jax.jit(_running_sum(APIS[api], scale))(x))
    blocks = x.astype(np.float64).reshape(BLOCKS, BLOCK)
    np.testing.assert_allclose(got, scale * np.stack([blocks.sum(0), blocks.max(0)]),
                               rtol=1e-5, atol=1e-6)
