"""The fast interpreter on kernels with known answers (NumPy float64 on fresh
random data), and the grid analysis's verdicts on them."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

import pallas_frontend as pl
from fast_interp_helpers import carried_cumsum_kernel, kernel_ir, run_both
from pallas_frontend import grid_analysis
from pallas_frontend.interpreter import vectorized


def _rand(seed, shape):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _matmul(m, n, k, bm, bn, bk, **kw):
    def kernel(a_ref, b_ref, o_ref):
        @pl.when(pl.program_id(2) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
        o_ref[...] += jnp.dot(a_ref[...], b_ref[...], precision="highest")
    return pl.pallas_call(
        kernel, jax.ShapeDtypeStruct((m, n), jnp.float32),
        grid=(pl.cdiv(m, bm), pl.cdiv(n, bn), pl.cdiv(k, bk)),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
                  pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)), **kw)


def test_matmul_accumulates_over_sequential_k():
    a, b = _rand(1, (64, 48)), _rand(2, (48, 80))
    call = _matmul(64, 80, 48, 16, 16, 16)
    ir = kernel_ir(call, a, b)
    plan = vectorized.make_plan(ir)
    assert plan.batch_axes == (0, 1) and plan.step_axes == (2,)
    seq, vec, _ = run_both(call, a, b)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(vec[0], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(vec[0], seq[0], rtol=1e-5, atol=1e-5)
    # The default CPU path is the fast one.
    np.testing.assert_allclose(np.asarray(jax.jit(call)(a, b)), want, rtol=1e-4, atol=1e-4)


def test_matmul_with_ragged_edges():
    a, b = _rand(3, (50, 37)), _rand(4, (37, 29))
    call = _matmul(50, 29, 37, 16, 8, 16)
    # K overhangs: the padding (NaN) of the last k block reaches the dot, as in
    # the sequential semantics; rows and columns that never meet it are exact.
    seq, vec, plan = run_both(call, a, b)
    assert plan.batch_axes == (0, 1)
    np.testing.assert_array_equal(np.isnan(vec[0]), np.isnan(seq[0]))
    call = _matmul(50, 29, 32, 16, 8, 16)
    a = a[:, :32]
    b = b[:32]
    seq, vec, _ = run_both(call, a, b)
    np.testing.assert_allclose(vec[0], a.astype(np.float64) @ b.astype(np.float64),
                               rtol=1e-4, atol=1e-4)


def _cumsum_call(n, block, *, dims=None):
    params = _Params(dimension_semantics=dims) if dims else None
    return pl.pallas_call(carried_cumsum_kernel, jax.ShapeDtypeStruct((n,), jnp.float32),
                          grid=(n // block,),
                          in_specs=[pl.BlockSpec((block,), lambda i: (i,))],
                          out_specs=pl.BlockSpec((block,), lambda i: (i,)),
                          scratch_shapes=[pl.ANY((1,), jnp.float32)], compiler_params=params)


def test_scratch_carrying_state_keeps_the_axis_sequential():
    x = _rand(5, (96,))
    call = _cumsum_call(96, 8)
    plan = vectorized.make_plan(kernel_ir(call, x))
    assert plan.batch_axes == ()
    assert "scratch" in plan.analysis.reasons[0]
    seq, vec, _ = run_both(call, x)
    np.testing.assert_allclose(vec[0], np.cumsum(x.astype(np.float64)), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(vec[0], seq[0])


def test_scratch_written_before_read_is_batched():
    def kernel(x_ref, o_ref, tmp_ref):
        tmp_ref[...] = x_ref[...] * 3.0
        o_ref[...] = tmp_ref[...] - 1.0
    x = _rand(6, (12, 40))
    call = pl.pallas_call(kernel, jax.ShapeDtypeStruct((12, 40), jnp.float32), grid=(3, 5),
                          in_specs=[pl.BlockSpec((4, 8), lambda i, j: (i, j))],
                          out_specs=pl.BlockSpec((4, 8), lambda i, j: (i, j)),
                          scratch_shapes=[pl.ANY((4, 8), jnp.float32)])
    seq, vec, plan = run_both(call, x)
    assert plan.batch_axes == (0, 1) and plan.num_steps == 1
    np.testing.assert_allclose(vec[0], x.astype(np.float64) * 3 - 1, rtol=1e-6)
    np.testing.assert_array_equal(vec[0], seq[0])


def test_partially_written_scratch_is_not_trusted():
    def kernel(x_ref, o_ref, tmp_ref):
        @pl.when(pl.program_id(0) == 0)
        def _():
            tmp_ref[...] = x_ref[...]
        tmp_ref[0:2, :] = x_ref[0:2, :]
        o_ref[...] = tmp_ref[...]
    x = _rand(7, (8, 8))
    call = pl.pallas_call(kernel, jax.ShapeDtypeStruct((8, 8), jnp.float32), grid=(2,),
                          in_specs=[pl.BlockSpec((4, 8), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((4, 8), lambda i: (i, 0)),
                          scratch_shapes=[pl.ANY((4, 8), jnp.float32)])
    seq, vec, plan = run_both(call, x)
    assert plan.batch_axes == ()
    np.testing.assert_array_equal(vec[0], seq[0])
    np.testing.assert_array_equal(vec[0][4:6], x[4:6])
    # the second point still sees rows 2:4 that the first point left in scratch
    np.testing.assert_array_equal(vec[0][6:8], x[2:4])


@dataclasses.dataclass(frozen=True)
class _Params(pl.CompilerParams):
    dimension_semantics: tuple = ()


def test_dimension_semantics_only_narrow():
    x = _rand(8, (64,))
    # Declaring the carried axis parallel does not make it batched.
    call = _cumsum_call(64, 8, dims=("parallel",))
    plan = vectorized.make_plan(kernel_ir(call, x))
    assert plan.batch_axes == ()
    seq, vec, _ = run_both(call, x)
    np.testing.assert_array_equal(vec[0], seq[0])
    # Declaring a free axis arbitrary keeps it sequential.
    a, b = _rand(9, (32, 32)), _rand(10, (32, 32))
    call = _matmul(32, 32, 32, 16, 16, 16,
                   compiler_params=_Params(dimension_semantics=("parallel", "arbitrary",
                                                                "arbitrary")))
    plan = vectorized.make_plan(kernel_ir(call, a, b))
    assert plan.batch_axes == (0,)
    assert "dimension_semantics" in plan.analysis.reasons[1]
    seq, vec, _ = run_both(call, a, b)
    np.testing.assert_allclose(vec[0], a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_revisited_output_along_inner_axis():
    # Row sums: the output block is revisited along j, so j is sequential, i batched.
    def kernel(x_ref, o_ref):
        @pl.when(pl.program_id(1) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
        o_ref[...] += jnp.sum(x_ref[...], axis=1)
    x = _rand(11, (24, 40))
    call = pl.pallas_call(kernel, jax.ShapeDtypeStruct((24,), jnp.float32), grid=(3, 5),
                          in_specs=[pl.BlockSpec((8, 8), lambda i, j: (i, j))],
                          out_specs=pl.BlockSpec((8,), lambda i, j: (i,)))
    seq, vec, plan = run_both(call, x)
    assert plan.batch_axes == (0,) and plan.step_axes == (1,)
    np.testing.assert_allclose(vec[0], x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(vec[0], seq[0])


def test_transposed_and_squeezed_blocks_batch_as_views():
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...].T * 2.0
    x = _rand(12, (3, 16, 24))
    call = pl.pallas_call(kernel, jax.ShapeDtypeStruct((3, 24, 16), jnp.float32), grid=(3, 2, 4),
                          in_specs=[pl.BlockSpec((None, 8, 6), lambda b, i, j: (b, i, j))],
                          out_specs=pl.BlockSpec((None, 6, 8), lambda b, i, j: (b, j, i)))
    seq, vec, plan = run_both(call, x)
    assert plan.batch_axes == (0, 1, 2)
    assert all(acc.is_view for acc in plan.accesses)
    np.testing.assert_allclose(vec[0], np.transpose(x, (0, 2, 1)) * 2.0, rtol=1e-6)
    np.testing.assert_array_equal(vec[0], seq[0])


def test_debug_print_keeps_grid_order():
    def kernel(x_ref, o_ref):
        pl.debug_print("point {}", pl.program_id(0))
        o_ref[...] = x_ref[...] + 1.0
    x = _rand(13, (16,))
    call = pl.pallas_call(kernel, jax.ShapeDtypeStruct((16,), jnp.float32), grid=(4,),
                          in_specs=[pl.BlockSpec((4,), lambda i: (i,))],
                          out_specs=pl.BlockSpec((4,), lambda i: (i,)))
    plan = vectorized.make_plan(kernel_ir(call, x))
    assert plan.batch_axes == ()
    assert "effects" in plan.analysis.reasons[0]


def test_memory_guard_loops_over_a_broadcast_gather(monkeypatch):
    # Every point reads an overlapping window of x at a non-affine offset:
    # gathering all windows at once copies x many times over, so past the
    # budget the axis is looped instead.
    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.broadcast_to(jnp.sum(x_ref[...]), o_ref.shape)
    x = _rand(14, (256,))
    call = pl.pallas_call(kernel, jax.ShapeDtypeStruct((64 * 8,), jnp.float32), grid=(64,),
                          in_specs=[pl.BlockSpec((pl.Element(128),), lambda i: ((i * 3) % 128,))],
                          out_specs=pl.BlockSpec((8,), lambda i: (i,)))
    want = np.repeat([x[(i * 3) % 128:(i * 3) % 128 + 128].astype(np.float64).sum()
                      for i in range(64)], 8)
    seq, vec, plan = run_both(call, x)
    assert plan.batch_axes == (0,) and not plan.accesses[0].is_view
    np.testing.assert_allclose(vec[0], want, rtol=1e-4)
    monkeypatch.setattr(vectorized, "_MIN_BATCH_BUDGET", 0)
    seq, vec, plan = run_both(call, x)
    assert plan.batch_axes == () and "looped" in plan.note
    np.testing.assert_allclose(vec[0], want, rtol=1e-4)
    np.testing.assert_array_equal(vec[0], seq[0])


def test_vmap_of_a_fast_kernel():
    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.exp(x_ref[...]) + pl.program_id(0).astype(jnp.float32)
    call = pl.pallas_call(kernel, jax.ShapeDtypeStruct((32, 8), jnp.float32), grid=(4,),
                          in_specs=[pl.BlockSpec((8, 8), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((8, 8), lambda i: (i, 0)))
    x = _rand(15, (5, 32, 8))
    got = np.asarray(jax.jit(jax.vmap(call))(x))
    want = np.exp(x.astype(np.float64)) + (np.arange(32) // 8)[None, :, None]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    batched = jax.vmap(call)
    seq, vec, plan = run_both(batched, x)
    assert plan.batch_axes == (0, 1)
    np.testing.assert_array_equal(vec[0], seq[0])


def test_coverage_report_names_unwritten_elements():
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    x = _rand(16, (10, 12))
    # Blocks (4, 4) at block rows 0..1 only: rows 8..9 are never written.
    call = pl.pallas_call(kernel, jax.ShapeDtypeStruct((10, 12), jnp.float32), grid=(2, 3),
                          in_specs=[pl.BlockSpec((4, 4), lambda i, j: (i, j))],
                          out_specs=pl.BlockSpec((4, 4), lambda i, j: (i, j)),
                          allow_unwritten_outputs=True)
    ir = kernel_ir(call, x)
    from pallas_frontend.block_indices import block_tables
    tables = block_tables(ir)
    gap = grid_analysis.unwritten_elements(tables[1], 6)
    expect = np.zeros((10, 12), bool)
    expect[8:] = True
    np.testing.assert_array_equal(gap, expect)
    report = grid_analysis.coverage_report(ir, tables)
    assert "24 of 120 elements" in report and "[8:10, 0:12]" in report
    seq, vec, _ = run_both(call, x)
    np.testing.assert_array_equal(vec[0], seq[0])
    assert np.isnan(vec[0][8:]).all()
    np.testing.assert_array_equal(vec[0][:8], x[:8])


def test_coverage_report_with_element_offsets():
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    x = _rand(17, (20,))
    call = pl.pallas_call(kernel, jax.ShapeDtypeStruct((20,), jnp.float32), grid=(3,),
                          in_specs=[pl.BlockSpec((pl.Element(4),), lambda i: (i * 5,))],
                          out_specs=pl.BlockSpec((pl.Element(4),), lambda i: (i * 5,)),
                          allow_unwritten_outputs=True)
    ir = kernel_ir(call, x)
    from pallas_frontend.block_indices import block_tables
    gap = grid_analysis.unwritten_elements(block_tables(ir)[1], 3)
    np.testing.assert_array_equal(np.nonzero(~gap)[0], [0, 1, 2, 3, 5, 6, 7, 8, 10, 11, 12, 13])
    seq, vec, plan = run_both(call, x)
    assert plan.batch_axes == (0,)
    np.testing.assert_array_equal(vec[0], seq[0])


def test_debug_prints_the_analysis(capsys):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0
    x = _rand(18, (16,))
    call = pl.pallas_call(kernel, jax.ShapeDtypeStruct((16,), jnp.float32), grid=(3,),
                          in_specs=[pl.BlockSpec((4,), lambda i: (i,))],
                          out_specs=pl.BlockSpec((4,), lambda i: (i,)), debug=True,
                          allow_unwritten_outputs=True)
    out = np.asarray(jax.jit(call)(x))
    np.testing.assert_allclose(out[:12], x[:12].astype(np.float64) * 2)
    text = capsys.readouterr().out
    assert "parallel axes (0,)" in text
    assert "4 of 16 elements are written by no grid point" in text
