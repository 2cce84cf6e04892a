"""Fuzzing grids, block shapes and index maps (hypothesis, a fixed budget).

Each example draws a grid (axes of size 0 included), an array shape, block
dims (blocked or squeezed, dividing the array or not) and an affine index map
per operand, then runs ``o = x * 2 + marker(grid point)`` through the
interpreter and compares with a NumPy model that walks the grid in row-major
order: edge blocks read NaN padding and write back only their in-bounds part;
later points overwrite earlier ones; elements no point writes stay NaN; an
index map that leaves the array is a ``pl.BlockIndexError``. Where JAX's own
interpreter is right (every block inside the array, so nothing is clamped or
padded) it is compared too, on the elements some point writes.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import pallas_frontend as pl

FUZZ = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def kernels(draw, whole_blocks=False):
    """(grid, array shape, block dims, [input map, output map]). With
    ``whole_blocks`` every block dim divides its array dim and every map wraps
    into range (the kernels on which JAX's interpreter is right)."""
    grid = tuple(draw(st.lists(st.sampled_from([1, 2, 3, 2, 3, 1, 0] if not whole_blocks
                                               else [1, 2, 3]), min_size=1, max_size=2),
                      label="grid"))
    ndim = draw(st.integers(1, 2), label="ndim")
    shape = tuple(draw(st.lists(st.integers(1, 12), min_size=ndim, max_size=ndim)))
    dims = []
    for n in shape:
        if ndim == 2 and draw(st.integers(0, 4)) == 0:
            dims.append(None)                                   # squeezed
        elif whole_blocks:
            dims.append(draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0])))
        else:
            dims.append(draw(st.integers(1, n + 2)))            # may overhang the array
    maps = [draw(index_maps(grid, shape, dims, always_wrap=whole_blocks)) for _ in ("in", "out")]
    return grid, shape, tuple(dims), maps


@st.composite
def index_maps(draw, grid, shape, dims, always_wrap=False):
    """Per array dim: (coefficients per grid axis, constant, modulus or None).
    Most maps wrap into range; the rest may leave the array (and be refused)."""
    out = []
    for n, b in zip(shape, dims):
        count = n if b is None else -(-n // b)                  # valid indices 0..count-1
        coeffs = tuple(draw(st.integers(-2, 2)) for _ in grid)
        wrap = always_wrap or draw(st.sampled_from([True, True, True, False]))
        const = draw(st.integers(-3, count + 3) if wrap else st.integers(-1, count))
        out.append((coeffs, const, count if wrap else None))
    return out


def evaluate(dim_map, point):
    coeffs, const, mod = dim_map
    v = sum(c * g for c, g in zip(coeffs, point)) + const
    return v % mod if mod else v


def traced_map(maps):
    def index_map(*idx):
        res = []
        for coeffs, const, mod in maps:
            v = jnp.int32(const)
            for c, g in zip(coeffs, idx):
                v = v + c * g
            res.append(v % mod if mod else v)
        return tuple(res)
    return index_map


def marker(point):
    return float(sum(10 ** k * (g + 1) for k, g in enumerate(reversed(point))))


def block_window(shape, dims, dim_maps, point):
    """(start, size, kernel-visible size or None if squeezed) per dim; None if
    some block lies wholly outside the array."""
    window = []
    for n, b, m in zip(shape, dims, dim_maps):
        v = evaluate(m, point)
        start, size = (v, 1) if b is None else (v * b, b)
        if not 0 <= start < n:
            return None
        window.append((start, size, b))
    return window


def numpy_model(x, grid, shape, dims, maps):
    """Expected output (float64, NaN where nothing is written), or None if
    some index map leaves the array."""
    out = np.full(shape, np.nan)
    padded = np.full([n + (b or 1) * 4 for n, b in zip(shape, dims)], np.nan)
    padded[tuple(slice(0, n) for n in shape)] = x
    for point in itertools.product(*[range(g) for g in grid]):
        win_in = block_window(shape, dims, maps[0], point)
        win_out = block_window(shape, dims, maps[1], point)
        if win_in is None or win_out is None:
            return None
        blk = padded[tuple(slice(s, s + z) for s, z, _ in win_in)] * 2 + marker(point)
        dst, src = [], []
        for (s, z, _), n in zip(win_out, shape):
            keep = min(z, n - s)
            dst.append(slice(s, s + keep))
            src.append(slice(0, keep))
        out[tuple(dst)] = blk[tuple(src)]
    # an empty grid never evaluates an index map: nothing to refuse
    return out


def make_call(grid, shape, dims, maps, *, jax_pallas=False, allow_unwritten=True):
    def kernel(x_ref, o_ref):
        ids = [jax_pl.program_id(a) if jax_pallas else pl.program_id(a) for a in range(len(grid))]
        mark = sum((10 ** k) * (g + 1) for k, g in enumerate(reversed(ids)))
        o_ref[...] = x_ref[...] * 2.0 + jnp.asarray(mark, jnp.float32)

    if jax_pallas:
        from jax.experimental import pallas as jax_pl
        spec_in = jax_pl.BlockSpec(dims, traced_map(maps[0]))
        spec_out = jax_pl.BlockSpec(dims, traced_map(maps[1]))
        return jax_pl.pallas_call(kernel, jax.ShapeDtypeStruct(shape, jnp.float32), grid=grid,
                                  in_specs=[spec_in], out_specs=spec_out, interpret=True)
    return pl.pallas_call(kernel, jax.ShapeDtypeStruct(shape, jnp.float32), grid=grid,
                          in_specs=[pl.BlockSpec(dims, traced_map(maps[0]))],
                          out_specs=pl.BlockSpec(dims, traced_map(maps[1])),
                          # the model says what stays unwritten (test_output_coverage fuzzes the warning)
                          allow_unwritten_outputs=allow_unwritten)


@FUZZ
@given(case=kernels(), seed=st.integers(0, 2**16))
def test_interpreter_matches_numpy_model(case, seed):
    grid, shape, dims, maps = case
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    expect = numpy_model(x.astype(np.float64), grid, shape, dims, maps)
    call = make_call(grid, shape, dims, maps)
    event("refused: a block outside the array" if expect is None else
          "empty grid" if not all(grid) else "ran")
    if expect is None:
        with pytest.raises(pl.BlockIndexError):
            call(x)
        return
    got = np.asarray(call(x), np.float64)
    np.testing.assert_allclose(got, expect, rtol=1e-6, atol=1e-5, equal_nan=True)


@settings(FUZZ, max_examples=12)
@given(case=kernels(whole_blocks=True), seed=st.integers(0, 2**16))
def test_interpreter_matches_jax_where_jax_is_right(case, seed):
    grid, shape, dims, maps = case
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    expect = numpy_model(x.astype(np.float64), grid, shape, dims, maps)
    assert expect is not None    # whole blocks, maps wrapped into range
    written = ~np.isnan(expect)
    ours = np.asarray(make_call(grid, shape, dims, maps)(x))
    theirs = np.asarray(make_call(grid, shape, dims, maps, jax_pallas=True)(x))
    np.testing.assert_allclose(ours[written], theirs[written], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ours[written], expect[written], rtol=1e-6, atol=1e-5)
