"""An interpreter runs at most 2**31 - 1 grid points (its point counter is an
int32); a larger grid is refused before anything runs, naming the grid, the
limit and the fix (issue 39: the built-in interpreter failed with an
OverflowError about an argument "y", JAX's TPU interpret mode returned the
output unwritten). The plugins' interpreters (each where its plugin is installed:
tox env all-plugins) are held to the same limit by the same tests."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
from pallas_frontend import grid_limits

LIMIT = 2**31 - 1


def _add_one(grid, **kw):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1
    spec = pl.BlockSpec((8, 128), lambda *ids: (0, 0))
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                          grid=grid, in_specs=[spec], out_specs=spec, **kw)


def _words(grid, points):
    return (rf"Kernel kernel at .*test_interpreted_grid_limit.py:\d+: the grid "
            rf"{re.escape(str(tuple(grid)))} has {points:,} points, more than the built-in interpreter runs.*"
            rf"2\*\*31 - 1 = 2,147,483,647 grid points.*fewer, larger blocks")


def test_the_limit_is_int32():
    assert grid_limits.MAX_INTERPRETED_POINTS == np.iinfo(np.int32).max


@pytest.mark.parametrize("grid", [(2**16, 2**15), (3, 2**30), (2**11, 2**10, 2**10)], ids=str)
@pytest.mark.parametrize("interpret", [True, None], ids=["interpret=True", "cpu default"])
def test_more_points_than_int32_are_refused_before_running(rng, grid, interpret):
    x = rng.standard_normal((8, 128)).astype(np.float32)
    points = int(np.prod(grid, dtype=np.int64))
    assert points > LIMIT
    with pytest.raises(ValueError, match=_words(grid, points)):
        _add_one(grid, interpret=interpret)(x)


def test_the_limit_itself_is_accepted(rng):
    # 2**16 * (2**15 - 1) < 2**31 - 1: lowered (not run: it would take hours)
    x = rng.standard_normal((8, 128)).astype(np.float32)
    jax.jit(_add_one((2**16, 2**15 - 1), interpret=True)).lower(x)
    grid_limits.check_interpreted_grid((LIMIT,), "interpret")
    with pytest.raises(ValueError, match="2,147,483,648 points"):
        grid_limits.check_interpreted_grid((LIMIT + 1,), "interpret")
    grid_limits.check_interpreted_grid((None, LIMIT), "interpret")   # a run-time size: not counted


def _plugin_interpret(plugin: str):
    """``plugin``'s interpret params, or a skip where the plugin is not installed."""
    return pytest.importorskip(plugin).InterpretParams()


PLUGINS = {"pallas_tpu": "tpu", "pallas_triton": "triton", "pallas_mgpu": "mgpu"}


@pytest.mark.parametrize("plugin", sorted(PLUGINS))
@pytest.mark.parametrize("grid", [(2**16, 2**15), (5, 2**29, 1)], ids=str)
def test_each_plugins_interpreter_refuses_the_same_grids(plugin, grid):
    f = _add_one(grid, interpret=_plugin_interpret(plugin))
    points = int(np.prod(grid, dtype=np.int64))
    words = (rf"Kernel kernel at .*test_interpreted_grid_limit.py:\d+: the grid "
             rf"{re.escape(str(grid))} has {points:,} points, more than backend "
             rf"'{PLUGINS[plugin]}' in interpret mode runs.*2\*\*31 - 1 = 2,147,483,647 grid "
             rf"points.*fewer, larger blocks")
    with pytest.raises(ValueError, match=words):
        jax.jit(f).lower(jax.ShapeDtypeStruct((8, 128), jnp.float32))


@pytest.mark.parametrize("plugin", sorted(PLUGINS))
def test_each_plugins_interpreter_runs_a_grid_under_the_limit(plugin, rng):
    x = rng.standard_normal((8, 128)).astype(np.float32)
    out = _add_one((2, 3), interpret=_plugin_interpret(plugin))(x)
    np.testing.assert_allclose(np.asarray(out), x.astype(np.float64) + 1, rtol=1e-6)


def test_vmap_adds_its_axis_to_the_count(rng):
    x = rng.standard_normal((2, 8, 128)).astype(np.float32)
    f = _add_one((2**15, 2**15), interpret=True)             # 2**30 points per call
    with pytest.raises(ValueError, match=r"has 2,147,483,648 points"):
        jax.vmap(f)(x)
