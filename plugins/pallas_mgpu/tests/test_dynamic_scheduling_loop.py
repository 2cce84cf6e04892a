"""``plgpu.dynamic_scheduling_loop`` (JAX's work-stealing loop over the launch
grid through cluster launch control), with JAX's API and with ours, in GPU
interpret mode, against NumPy: every grid point is visited once, and the carry
counts the points each CTA ran."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax_window import jplgpu as jax_plgpu  # JAX's plgpu (with 0.10's GPU interpret API)
from jax_window import JAX_INTERPRETS_CLUSTER_CANCEL

import pallas_mgpu as plgpu

APIS = {"jax": jax_plgpu, "ours": plgpu}
# (JAX's loop claims grid points with try_cluster_cancel; its interpret mode here
# ignores the loop's PTX fences with InterpretGPUParams(inline_mgpu=), JAX 0.11 too)
pytestmark = JAX_INTERPRETS_CLUSTER_CANCEL
GRID = (3, 4)


def _visit_all(gpu):
    @functools.partial(
        gpu.kernel, out_type=(jax.ShapeDtypeStruct(GRID, jnp.float32),
                              jax.ShapeDtypeStruct(GRID, jnp.int32)),
        grid=GRID, grid_names=("i", "j"), num_threads=1, thread_name="wg",
        interpret=gpu.InterpretGPUParams(inline_mgpu="ignore"))   # (its PTX fences)
    def k(x_ref, o_ref, count_ref):
        first = (jax.lax.axis_index("i"), jax.lax.axis_index("j"))

        # (JAX's interpreter wants the thread axis named, even for one thread)
        @gpu.dynamic_scheduling_loop(("i", "j"), thread_axis="wg", init_carry=jnp.int32(0))
        def steps(info, carry):
            i, j = info.index
            o_ref[i, j] = x_ref[i, j] * 2 + 1
            return carry + 1
        count_ref[first] = steps
    return k


@pytest.mark.parametrize("api", APIS)
def test_every_grid_point_runs_once(api, rng):
    x = rng.standard_normal(GRID).astype(np.float32)
    out, counts = jax.jit(_visit_all(APIS[api]))(x)
    np.testing.assert_allclose(out, 2 * x.astype(np.float64) + 1, rtol=1e-6)
    # the CTAs that started ran every point between them (the cancelled ones ran none)
    assert int(np.asarray(counts).sum()) == np.prod(GRID)
    assert np.asarray(counts).min() >= 0
