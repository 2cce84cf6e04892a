"""A grid with an axis of size 0 runs nothing (docs/user-guide.md, "Empty grids"),
as in the built-in, TPU and Triton interpreters: the Mosaic GPU interpreter ran
the kernel body once (issue 39). References: the inputs themselves and NumPy's
fill of an unwritten buffer."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_mgpu as plgpu
from pallas_mgpu import aot

GRIDS = [(0,), (2, 0), (0, 3), (1, 0, 2)]


def _call(grid, interpret, *, aliased, **params):
    def kernel(x_ref, n_ref, o_ref, m_ref):
        o_ref[...] = x_ref[...] + 1          # would show if any grid point ran
        m_ref[...] = n_ref[...] * 3
    spec = pl.BlockSpec((8, 128), lambda *ids: (0, 0))
    return pl.pallas_call(
        kernel, grid=grid, in_specs=[spec, spec], out_specs=[spec, spec],
        out_shape=[jax.ShapeDtypeStruct((8, 128), jnp.float32),
                   jax.ShapeDtypeStruct((8, 128), jnp.int32)],
        input_output_aliases={0: 0} if aliased else {}, interpret=interpret, **params)


@pytest.mark.parametrize("grid", GRIDS, ids=str)
def test_an_empty_grid_runs_no_point(rng, grid):
    x = rng.standard_normal((8, 128)).astype(np.float32)
    n = rng.integers(-100, 100, (8, 128)).astype(np.int32)
    out, m = _call(grid, plgpu.InterpretParams(), aliased=False)(x, n)
    # nothing wrote them: uninitialized memory as JAX's interpreters fill it
    np.testing.assert_array_equal(np.asarray(out), np.full((8, 128), np.nan, np.float32))
    np.testing.assert_array_equal(np.asarray(m), np.full((8, 128), np.iinfo(np.int32).max))


@pytest.mark.parametrize("grid", GRIDS[:2], ids=str)
def test_an_empty_grid_keeps_aliased_outputs_and_obeys_zero_fill(rng, grid):
    x = rng.standard_normal((8, 128)).astype(np.float32)
    n = rng.integers(-100, 100, (8, 128)).astype(np.int32)
    out, m = jax.jit(_call(grid, plgpu.InterpretParams(uninitialized_memory="zero"),
                           aliased=True))(x, n)
    np.testing.assert_array_equal(np.asarray(out), x)            # the input, untouched
    np.testing.assert_array_equal(np.asarray(m), np.zeros((8, 128), np.int32))


def test_an_empty_grid_agrees_with_the_builtin_interpreter(rng):
    x = rng.standard_normal((8, 128)).astype(np.float32)
    n = rng.integers(-100, 100, (8, 128)).astype(np.int32)
    ours = _call((3, 0), plgpu.InterpretParams(), aliased=True)(x, n)
    builtin = _call((3, 0), True, aliased=True)(x, n)
    np.testing.assert_array_equal(np.asarray(ours[0]), np.asarray(builtin[0]))
    np.testing.assert_array_equal(np.asarray(ours[0]), x)


def test_an_empty_grid_launches_no_kernel_on_cuda():
    avals = [jax.ShapeDtypeStruct((8, 128), jnp.float32), jax.ShapeDtypeStruct((8, 128), jnp.int32)]
    for grid, launches in [((0, 2), False), ((1, 2), True)]:
        f = _call(grid, None, aliased=False, compiler_params=plgpu.CompilerParams())
        text = jax.jit(f).trace(*avals).lower(lowering_platforms=("cuda",)).as_text()
        assert (aot.CUSTOM_CALL in text) == launches, grid
