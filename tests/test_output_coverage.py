"""Output coverage (issue 39, item 3): an output element that no grid point
writes is a warning naming the output, the first unwritten index and the grid,
an error under ``pl.enable_debug_checks``; aliased and manual (pl.ANY) outputs
and ``allow_unwritten_outputs`` opt out. Values against NumPy float64 on fresh
random data."""

from __future__ import annotations

import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
from pallas_frontend import output_coverage
from pallas_frontend.block_indices import block_tables
from fast_interp_helpers import kernel_ir


@pytest.fixture
def rng():
    return np.random.default_rng(np.random.SeedSequence().entropy)


def _copy2(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def _call(shape, block, grid, index_map, **kw):
    return pl.pallas_call(_copy2, jax.ShapeDtypeStruct(shape, jnp.float32), grid=grid,
                          in_specs=[pl.BlockSpec(block, index_map)],
                          out_specs=pl.BlockSpec(block, index_map), **kw)


def _no_warning(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("error", pl.UnwrittenOutputWarning)
        return fn(*args)


def _gap(call, *args):
    """find_gap of the kernel's first output."""
    ir = kernel_ir(call, *args)
    return output_coverage.find_gap(block_tables(ir)[len(ir.in_mappings)])


def test_beginner_grid_warns_with_output_index_grid_and_fix(rng):
    x = rng.standard_normal(1000).astype(np.float32)
    f = _call((1000,), (128,), (1000 // 128,), lambda i: (i,))
    with pytest.warns(pl.UnwrittenOutputWarning) as record:
        got = np.asarray(f(x))
    msg = str(record[0].message)
    assert msg.startswith("Kernel _copy2 at ") and "test_output_coverage.py" in msg
    assert "outputs (output 0, shape (1000,)) has 104 of its 1000 elements written by no grid " \
           "point, the first at index (896,): grid (7,) with block shape (128,)" in msg
    assert "reaches 7 of its 8 blocks of 128" in msg
    assert "pl.cdiv(1000, 128) = 8, not 1000 // 128 = 7" in msg
    assert "allow_unwritten_outputs=True" in msg
    # the warning points at the kernel function's line
    assert record[0].filename == __file__
    assert record[0].lineno == _copy2.__code__.co_firstlineno
    np.testing.assert_allclose(got[:896], x[:896].astype(np.float64) * 2.0, rtol=1e-6)


def test_debug_checks_make_it_an_error_before_running(rng):
    x = rng.standard_normal(1000).astype(np.float32)
    f = _call((1000,), (128,), (7,), lambda i: (i,))
    with pl.enable_debug_checks(True):
        with pytest.raises(pl.UnwrittenOutputError, match=re.escape(
                "has 104 of its 1000 elements written by no grid point, the first at index "
                "(896,): grid (7,)")):
            jax.jit(f).lower(x)
    assert issubclass(pl.UnwrittenOutputError, ValueError)


def test_covering_grids_say_nothing(rng):
    x = rng.standard_normal((1000,)).astype(np.float32)
    got = _no_warning(_call((1000,), (128,), (pl.cdiv(1000, 128),), lambda i: (i,)), x)
    np.testing.assert_allclose(np.asarray(got), x.astype(np.float64) * 2.0, rtol=1e-6)
    y = rng.standard_normal((48, 40)).astype(np.float32)
    # a revisited block (reduction axis), a reversed axis, a swapped grid
    for grid, imap in [((3, 5, 2), lambda i, j, k: (i, j)),
                       ((3, 5), lambda i, j: (2 - i, 4 - j)),
                       ((5, 3), lambda j, i: (i, j))]:
        got = _no_warning(_call((48, 40), (16, 8), grid, imap), y)
        np.testing.assert_allclose(np.asarray(got), y.astype(np.float64) * 2.0, rtol=1e-6)
    with pl.enable_debug_checks(True):
        _no_warning(_call((48, 40), (16, 8), (3, 5), lambda i, j: (i, j)), y)


def test_two_dim_gap_names_the_short_dim(rng):
    y = rng.standard_normal((48, 40)).astype(np.float32)
    f = _call((48, 40), (16, 8), (3, 4), lambda i, j: (i, j))
    with pytest.warns(pl.UnwrittenOutputWarning, match=re.escape(
            "has 384 of its 1920 elements written by no grid point, the first at index (0, 32)")
            + ".*Along dim 1 the grid reaches 4 of its 5 blocks of 8."):
        got = np.asarray(f(y))
    np.testing.assert_allclose(got[:, :32], y[:, :32].astype(np.float64) * 2.0, rtol=1e-6)


def test_diagonal_blocks_are_decided_without_closed_form(rng):
    """Both dims move with one axis: not a product of per-dim sets."""
    y = rng.standard_normal((32, 32)).astype(np.float32)
    f = _call((32, 32), (8, 8), (4,), lambda i: (i, i))
    with pytest.warns(pl.UnwrittenOutputWarning, match=r"first at index \(0, 8\)"):
        got = np.asarray(f(y))
    gap = _gap(f, y)
    assert (gap.count, gap.first, gap.short_dim) == (32 * 32 - 4 * 64, (0, 8), None)
    for i in range(4):
        blk = np.s_[8 * i:8 * i + 8, 8 * i:8 * i + 8]
        np.testing.assert_allclose(got[blk], y[blk].astype(np.float64) * 2.0, rtol=1e-6)


def test_non_affine_index_map(rng):
    """i // 2 visits every block twice: covered; i % 3 over 4 blocks misses block 3."""
    x = rng.standard_normal(64).astype(np.float32)
    got = _no_warning(_call((64,), (8,), (16,), lambda i: (i // 2,)), x)
    np.testing.assert_allclose(np.asarray(got), x.astype(np.float64) * 2.0, rtol=1e-6)
    gap = _gap(_call((32,), (8,), (6,), lambda i: (i % 3,)), x[:32])
    assert (gap.count, gap.first, gap.short_dim) == (8, (24,), 0)


def test_element_offsets_with_holes(rng):
    x = rng.standard_normal(20).astype(np.float32)
    f = _call((20,), (pl.Element(4),), (3,), lambda i: (i * 5,))
    with pytest.warns(pl.UnwrittenOutputWarning, match=r"8 of its 20 elements.*\(4,\)"):
        got = np.asarray(f(x))
    # written: 0..3, 5..8, 10..13; unwritten: 4, 9, 14..19
    gap = _gap(f, x)
    assert (gap.count, gap.first) == (8, (4,))
    for s in (0, 5, 10):
        np.testing.assert_allclose(got[s:s + 4], x[s:s + 4].astype(np.float64) * 2, rtol=1e-6)
    # overlapping windows (a halo) cover everything
    _no_warning(_call((20,), (pl.Element(6),), (4,), lambda i: (i * 5,)), x)


def test_empty_grid_writes_nothing(rng):
    x = rng.standard_normal(16).astype(np.float32)
    f = _call((16,), (8,), (0,), lambda i: (i,))
    with pl.enable_debug_checks(True), pytest.raises(
            pl.UnwrittenOutputError, match=r"16 of its 16 elements.*index \(0,\).*grid is empty"):
        jax.jit(f).lower(x)


def test_allow_unwritten_outputs_opts_out_all_or_some(rng):
    x = rng.standard_normal(1000).astype(np.float32)
    with pl.enable_debug_checks(True):
        got = _no_warning(_call((1000,), (128,), (7,), lambda i: (i,),
                                allow_unwritten_outputs=True), x)
    np.testing.assert_allclose(np.asarray(got)[:896], x[:896].astype(np.float64) * 2, rtol=1e-6)

    def two(x_ref, a_ref, b_ref):
        a_ref[...] = x_ref[...] + 1.0
        b_ref[...] = x_ref[...] - 1.0
    spec = pl.BlockSpec((128,), lambda i: (i,))
    out = (jax.ShapeDtypeStruct((1000,), jnp.float32),) * 2

    def build(allow):
        return pl.pallas_call(two, out, grid=(7,), in_specs=[spec], out_specs=[spec, spec],
                              allow_unwritten_outputs=allow)
    a, b = _no_warning(build((0, 1)), x)
    np.testing.assert_allclose(np.asarray(a)[:896], x[:896].astype(np.float64) + 1, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(b)[:896], x[:896].astype(np.float64) - 1, rtol=1e-6)
    with pytest.warns(pl.UnwrittenOutputWarning) as record:
        build([0])(x)
    assert [re.search(r"outputs\[\d\] \(output \d", str(w.message))[0] for w in record] == \
        ["outputs[1] (output 1"]
    with pytest.raises(TypeError, match="allow_unwritten_outputs must be a bool or a sequence"):
        build("yes")


def test_aliased_output_keeps_the_input_and_is_not_checked(rng):
    """An in-place update of the first block: the rest keeps the input's values."""
    x = rng.standard_normal(1000).astype(np.float32)

    def bump(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0
    f = pl.pallas_call(bump, jax.ShapeDtypeStruct((1000,), jnp.float32), grid=(1,),
                       in_specs=[pl.BlockSpec((128,), lambda i: (i,))],
                       out_specs=pl.BlockSpec((128,), lambda i: (i,)),
                       input_output_aliases={0: 0})
    with pl.enable_debug_checks(True):
        got = np.asarray(_no_warning(jax.jit(f), x))
    want = x.astype(np.float64)
    want[:128] *= 2.0
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_manual_memory_space_outputs_are_not_checked(rng):
    """An output the kernel writes by hand (pl.ANY, a backend's HBM/GMEM) says
    nothing about its blocks; the whole-array Ref is the kernel's to fill."""
    x = rng.standard_normal(1000).astype(np.float32)
    ir = kernel_ir(_call((1000,), (128,), (7,), lambda i: (i,)), x)
    out = ir.out_mappings[0]
    manual = ir.replace(out_mappings=(out.__class__(**{**out.__dict__,
                                                       "memory_space": pl.ANY}),))
    with warnings.catch_warnings():
        warnings.simplefilter("error", pl.UnwrittenOutputWarning)
        output_coverage.check_grid(manual, check_ranges=True, debug_checks=True)
    assert all(output_coverage._is_manual(s) for s in (pl.ANY, "hbm", "GMEM"))
    assert not any(output_coverage._is_manual(s) for s in (None, pl.MemorySpace.DEFAULT, "vmem"))
    with pytest.raises(pl.UnwrittenOutputError):
        output_coverage.check_grid(ir, check_ranges=True, debug_checks=True)


def test_dynamic_grids_are_not_checked(rng):
    """A grid size known only at run time: its blocks are too (documented as not checked)."""
    x = rng.standard_normal(64).astype(np.float32)

    def run(x, n):
        return _call((64,), (8,), (n,), lambda i: (i,))(x)
    with pl.enable_debug_checks(True), warnings.catch_warnings():
        warnings.simplefilter("error", pl.UnwrittenOutputWarning)
        got = np.asarray(jax.jit(run)(x, 8))
    np.testing.assert_allclose(got, x.astype(np.float64) * 2.0, rtol=1e-6)


def test_scalar_prefetch_is_not_checked(rng):
    """Index maps that read prefetched scalars: blocks known only at run time."""
    pltpu = pytest.importorskip("pallas_tpu")
    x = rng.standard_normal((64, 128)).astype(np.float32)
    idx = np.array([0, 2], np.int32)

    def gather(idx_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0
    gs = pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, grid=(2,),
                                      in_specs=[pl.BlockSpec((8, 128), lambda i, s: (s[i], 0))],
                                      out_specs=pl.BlockSpec((8, 128), lambda i, s: (s[i], 0)))
    f = pl.pallas_call(gather, jax.ShapeDtypeStruct((64, 128), jnp.float32), grid_spec=gs,
                       interpret=pltpu.InterpretParams())
    with pl.enable_debug_checks(True), warnings.catch_warnings():
        warnings.simplefilter("error", pl.UnwrittenOutputWarning)
        jax.jit(f).lower(idx, x)     # traced: no warning, no error


def test_large_grids_cost_little_at_trace_time():
    """16M grid points: affine maps are decided per dim in closed form (no
    per-point table is built); a map past the general limits is left unchecked."""
    big = jax.ShapeDtypeStruct((4096 * 8, 4096 * 128), jnp.float32)
    call = _call(big.shape, (8, 128), (4096, 4095), lambda i, j: (i, j))
    with pytest.warns(pl.UnwrittenOutputWarning, match=r"first at index \(0, 524160\)"):
        t = block_tables(kernel_ir(call, big))[1]
    gap = output_coverage.find_gap(t)
    assert (gap.first, gap.count) == ((0, 4095 * 128), 4096 * 8 * 128)
    assert "_materialized" not in t.__dict__
    diag = _call((4096 * 8, 4096 * 8), (8, 8), (4096, 4096), lambda i, j: (i, (i + j) % 4096))
    t = block_tables(kernel_ir(diag, jax.ShapeDtypeStruct((4096 * 8,) * 2, jnp.float32)))[1]
    assert output_coverage.find_gap(t) is None      # not affine, 16M points: not decided


def _fuzz_written(grid, shape, dims, out_map):
    """Which output elements some grid point's block reaches (None: refused)."""
    import itertools
    from test_fuzz_grids import block_window
    written = np.zeros(shape, bool)
    for point in itertools.product(*[range(g) for g in grid]):
        win = block_window(shape, dims, out_map, point)
        if win is None:
            return None
        written[tuple(slice(s, s + z) for s, z, _ in win)] = True
    return written


def test_fuzzed_grids_agree_with_a_numpy_model():
    """Random grids (0-sized axes included), block dims and affine/modular index
    maps: the warning comes exactly when the model leaves elements unwritten,
    with the model's count and first index."""
    from hypothesis import given
    from test_fuzz_grids import FUZZ, kernels, make_call

    @FUZZ
    @given(case=kernels())
    def check(case):
        grid, shape, dims, maps = case
        written = _fuzz_written(grid, shape, dims, maps[1])
        if written is None:
            return                      # refused by the range check (test_fuzz_grids)
        call = make_call(grid, shape, dims, maps, allow_unwritten=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            jax.make_jaxpr(call)(jax.ShapeDtypeStruct(shape, jnp.float32))
        found = [str(w.message) for w in caught if w.category is pl.UnwrittenOutputWarning]
        if written.all():
            assert not found, found
            return
        first = tuple(int(i) for i in np.argwhere(~written)[0])
        assert len(found) == 1, (case, found)
        assert f"has {int((~written).sum())} of its {written.size} elements" in found[0]
        assert f"the first at index {first}" in found[0]
    check()
