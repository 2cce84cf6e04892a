"""Issue 39: a TPU interpret-mode grid of many points ran for minutes with no
word. Lowering such a kernel for TPU interpret mode warns first (the kernel's
line, its grid and point count, the quicker ways); smaller grids, compiled
kernels and the built-in interpreter say nothing. Only lowered here: running
4096 points in JAX's TPU interpreter takes minutes on a CPU."""

import inspect
import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu
from pallas_tpu.slow_interpret import SLOW_POINTS, SlowInterpretWarning


def add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def _lowered(grid, interpret):
    rows = int(np.prod(grid)) * 8
    x = jnp.zeros((rows, 128), jnp.float32)
    flat = lambda *idx: (_row(idx, grid), 0)  # noqa: E731
    f = pl.pallas_call(add_one, grid=grid,
                       in_specs=[pl.BlockSpec((8, 128), flat)],
                       out_specs=pl.BlockSpec((8, 128), flat),
                       out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=interpret)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        jax.jit(f).lower(x)
    return [w for w in seen if issubclass(w.category, SlowInterpretWarning)]


def _row(idx, grid):
    row = idx[0]
    for i, n in zip(idx[1:], grid[1:]):
        row = row * n + i
    return row


@pytest.mark.parametrize("grid", [(SLOW_POINTS,), (64, SLOW_POINTS // 64), (SLOW_POINTS * 2,)])
def test_a_grid_of_many_points_warns_before_running(grid):
    got = _lowered(grid, pallas_tpu.InterpretParams())
    assert len(got) == 1, [str(w.message) for w in got]
    w = got[0]
    msg = str(w.message)
    points = int(np.prod(grid))
    assert f"{points:,} points" in msg and str(tuple(grid)) in msg, msg
    assert "Kernel add_one" in msg and "larger blocks" in msg and "interpret=True" in msg
    lines, first = inspect.getsourcelines(add_one)
    assert (os.path.abspath(w.filename), w.lineno) == (os.path.abspath(__file__), first)


@pytest.mark.parametrize("grid", [(SLOW_POINTS - 1,), (63, 64), (1,)])
def test_a_smaller_grid_says_nothing(grid):
    assert _lowered(grid, pallas_tpu.InterpretParams()) == []


def test_the_builtin_interpreter_says_nothing_of_it():
    assert _lowered((SLOW_POINTS,), True) == []
