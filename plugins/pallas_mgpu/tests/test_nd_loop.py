"""``plgpu.nd_loop`` in a persistent ``pallas_mgpu.kernel``: every grid point is
visited exactly once, by the CTA JAX's helper gives it, with and without
tiling and a carry; run in GPU interpret mode with JAX's API and with ours,
against NumPy."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax_window import jplgpu as jax_plgpu  # JAX's plgpu (with 0.10's GPU interpret API)

import pallas_mgpu as plgpu

APIS = {"jax": jax_plgpu, "ours": plgpu}


def _owner_map(gpu, grid, num_ctas, tiling):
    """out[i, j] = x[i, j] + 1000 * (cta + 1) + local step, for the point (i, j)."""

    @functools.partial(
        gpu.kernel, out_type=jax.ShapeDtypeStruct(grid, jnp.float32),
        grid=(num_ctas,), grid_names=("sm",), interpret=gpu.InterpretGPUParams())
    def k(x_ref, o_ref):
        cta = jax.lax.axis_index("sm")

        @gpu.nd_loop(grid, collective_axes="sm", tiling=tiling)
        def _(info):
            i, j = info.index
            o_ref[i, j] = (x_ref[i, j] + (1000 * (cta + 1)).astype(jnp.float32)
                           + info.local_index.astype(jnp.float32))
    return k


def _expected_owner_map(x, grid, num_ctas, tiling):
    dims = list(grid) if not tiling else [*(g // t for g, t in zip(grid, tiling)), *tiling]
    out = np.empty(grid, np.float64)
    for flat in range(int(np.prod(dims))):
        coords = np.unravel_index(flat, dims)
        if tiling:
            coords = [c_in + c_out * t for c_out, c_in, t in zip(coords[:2], coords[2:], tiling)]
        out[tuple(coords)] = x[tuple(coords)] + 1000 * (flat % num_ctas + 1) + flat // num_ctas
    return out


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("grid,num_ctas,tiling", [((3, 5), 4, None), ((4, 6), 5, (2, 3))])
def test_nd_loop_deals_points_round_robin(api, grid, num_ctas, tiling, rng):
    x = rng.standard_normal(grid).astype(np.float32)
    got = jax.jit(_owner_map(APIS[api], grid, num_ctas, tiling))(x)
    np.testing.assert_allclose(got, _expected_owner_map(x.astype(np.float64), grid, num_ctas,
                                                            tiling), rtol=1e-6)


@pytest.mark.parametrize("api", APIS)
def test_nd_loop_carry_and_step_count(api, rng):
    """Each CTA sums x over the points it owns (a carry) and records its step count."""
    gpu, grid, num_ctas = APIS[api], (7,), 3
    x = rng.standard_normal(grid).astype(np.float32)

    @functools.partial(
        gpu.kernel, out_type=(jax.ShapeDtypeStruct((num_ctas,), jnp.float32),
                              jax.ShapeDtypeStruct((num_ctas,), jnp.int32)),
        grid=(num_ctas,), grid_names=("sm",), interpret=gpu.InterpretGPUParams())
    def k(x_ref, sum_ref, steps_ref):
        cta = jax.lax.axis_index("sm")
        seen = {}

        @gpu.nd_loop(grid, collective_axes="sm", init_carry=jnp.float32(0))
        def total(info, carry):
            seen["steps"] = info.num_local_steps
            return carry + x_ref[info.index[0]]
        sum_ref[cta] = total
        steps_ref[cta] = jnp.asarray(seen["steps"], jnp.int32)

    sums, steps = jax.jit(k)(x)
    owner = np.arange(grid[0]) % num_ctas
    want = [x.astype(np.float64)[owner == c].sum() for c in range(num_ctas)]
    np.testing.assert_allclose(sums, want, rtol=1e-5)
    np.testing.assert_array_equal(steps, [np.sum(owner == c) for c in range(num_ctas)])


def test_nd_loop_refuses_a_tiling_that_does_not_divide_the_grid():
    @functools.partial(plgpu.kernel, out_type=jax.ShapeDtypeStruct((4,), jnp.float32),
                       grid=(2,), grid_names=("sm",), interpret=plgpu.InterpretGPUParams())
    def k(x_ref, o_ref):
        @plgpu.nd_loop((5, 4), collective_axes="sm", tiling=(2, 2))
        def _(info):
            pass
    with pytest.raises(ValueError, match="does not divide the grid"):
        k(np.ones(4, np.float32))
