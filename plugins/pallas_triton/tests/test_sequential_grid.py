"""Kernels that carry state along grid axes: outputs revisited over k, scratch accumulators.

Launched axes become Triton programs, the others loops inside each program
(pallas_triton/schedule.py). Each kernel runs under Triton's interpreter and is
compared with NumPy in float64 and with the frontend interpreter (interpret=True).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_triton as pt
from pallas_frontend.backend_api import BackendCapabilityError
from pallas_frontend.testing import kernels as K
from pallas_triton import schedule

TRITON = dict(interpret=pt.InterpretParams())
FRONTEND = dict(interpret=True)
# f32 products summed over k=384 in blocks: float32 rounding, far below these.
MATMUL_TOL = dict(rtol=2e-5, atol=2e-4)


# The conformance suite's matmuls: zero-then-accumulate into the output block
# over the k grid axis, and the same with a scratch accumulator.
matmul_into_output = K.blocked_matmul
matmul_in_scratch = K.scratch_matmul


def running_block_sums(rows, cols, br, bc, reset_each_row=True, **call):
    """out[:, block j] = x[:, block j] + the row sums of blocks 0..j-1 (a running
    total in scratch, reset at the first column block, or only at the first grid point)."""
    def body(x, o, total):
        first = pl.program_id(1) == 0
        if not reset_each_row:
            first = first & (pl.program_id(0) == 0)

        @pl.when(first)
        def _():
            total[...] = jnp.zeros_like(total)
        v = x[...]
        o[...] = v + total[...]
        total[...] += v.sum(axis=1, keepdims=True)
    return pl.pallas_call(
        body, jax.ShapeDtypeStruct((rows, cols), jnp.float32), grid=(rows // br, cols // bc),
        in_specs=[pl.BlockSpec((br, bc), lambda i, j: (i, j))],
        out_specs=pl.BlockSpec((br, bc), lambda i, j: (i, j)),
        scratch_shapes=[pl.MemorySpace.DEFAULT((br, 1), jnp.float32)], **call)


def running_block_sums_ref(x, br, bc, reset_each_row=True):
    x = np.asarray(x, np.float64)
    rows, cols = x.shape
    out, total = np.empty_like(x), np.zeros((br, 1))
    for i in range(rows // br):
        if reset_each_row:
            total = np.zeros((br, 1))
        for j in range(cols // bc):
            block = x[i * br:(i + 1) * br, j * bc:(j + 1) * bc]
            out[i * br:(i + 1) * br, j * bc:(j + 1) * bc] = block + total
            total = total + block.sum(axis=1, keepdims=True)
    return out


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("make", [matmul_into_output, matmul_in_scratch])
def test_matmul_over_k_grid_axis_ragged_m(rng, make):
    m, n, k = 200, 256, 384                       # m = 3 blocks of 64 + a ragged 8 rows
    a, b = _f32(rng, m, k), _f32(rng, k, n)
    got = np.asarray(make(m, n, k, 64, 128, 128, **TRITON)(a, b))
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got, want, **MATMUL_TOL)
    ref = np.asarray(make(m, n, k, 64, 128, 128, **FRONTEND)(a, b))
    np.testing.assert_allclose(got, ref, **MATMUL_TOL)       # both f32, summed in other orders


@pytest.mark.parametrize("make", [matmul_into_output, matmul_in_scratch])
def test_matmul_launches_ij_and_loops_over_k(make):
    a = jax.ShapeDtypeStruct((256, 384), jnp.float32)
    b = jax.ShapeDtypeStruct((384, 256), jnp.float32)
    ir = pt.kernel_ir_of(make(256, 256, 384, 64, 128, 128, **TRITON), a, b)
    plan = schedule.plan(ir)
    assert (plan.parallel_axes, plan.sequential_axes) == ((0, 1), (2,))
    assert plan.register_outputs == {0}
    gen = pt.generate_source(ir)
    assert gen.num_programs == 4 * 2
    assert "for pid2 in range(3):" in gen.source


def test_aliased_output_accumulates_onto_its_input(rng):
    """A register output starts as its aliased input's block, not as padding."""
    def body(x, c_in, o):
        del c_in
        o[...] += x[...] * 2.0
    x, c = _f32(rng, 64, 256), _f32(rng, 64, 64)
    f = pl.pallas_call(body, jax.ShapeDtypeStruct((64, 64), jnp.float32), grid=(4,),
                       in_specs=[pl.BlockSpec((64, 64), lambda kk: (0, kk)),
                                 pl.BlockSpec((64, 64), lambda kk: (0, 0))],
                       out_specs=pl.BlockSpec((64, 64), lambda kk: (0, 0)),
                       input_output_aliases={1: 0}, **TRITON)
    want = c.astype(np.float64) + 2.0 * x.astype(np.float64).reshape(64, 4, 64).sum(1)
    np.testing.assert_allclose(np.asarray(f(x, c)), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reset_each_row", [True, False])
def test_running_total_in_scratch(rng, reset_each_row):
    rows, cols, br, bc = 32, 256, 16, 64
    x = _f32(rng, rows, cols)
    f = running_block_sums(rows, cols, br, bc, reset_each_row, **TRITON)
    got = np.asarray(f(x))
    np.testing.assert_allclose(got, running_block_sums_ref(x, br, bc, reset_each_row),
                               rtol=1e-5, atol=1e-4)
    ref = np.asarray(running_block_sums(rows, cols, br, bc, reset_each_row, **FRONTEND)(x))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)   # f32 sums in other orders
    plan = schedule.plan(pt.kernel_ir_of(f, x))
    # Reset per row: rows are independent programs. Reset once: the total flows
    # across rows, so the whole grid is one program's loop.
    assert plan.parallel_axes == ((0,) if reset_each_row else ())
    assert plan.register_outputs == set()          # the output block moves along the loop


def test_sm90_pallas_style_f16_matmul_uses_wgmma():
    a = jax.ShapeDtypeStruct((256, 256), jnp.float16)

    def f16_matmul(x, y):
        def body(xr, yr, o):
            @pl.when(pl.program_id(2) == 0)
            def _():
                o[...] = jnp.zeros_like(o)
            o[...] += jnp.dot(xr[...], yr[...], preferred_element_type=jnp.float32)
        return pl.pallas_call(
            body, jax.ShapeDtypeStruct((256, 256), jnp.float32), grid=(2, 2, 4),
            in_specs=[pl.BlockSpec((128, 64), lambda i, j, kk: (i, kk)),
                      pl.BlockSpec((64, 128), lambda i, j, kk: (kk, j))],
            out_specs=pl.BlockSpec((128, 128), lambda i, j, kk: (i, j)), **TRITON)(x, y)
    asm = pt.compile_for_target(pt.kernel_ir_of(f16_matmul, a, a), target=("cuda", 90),
                                params=pt.CompilerParams(num_warps=8, num_stages=3))
    assert "wgmma.mma_async" in asm["ptx"]
    assert "for pid2 in range(4):" in asm["source"]


# --- what stays refused ------------------------------------------------------------------

def test_sliced_scratch_is_refused_naming_buffer_and_line():
    def body(x, o, s):
        s[pl.ds(0, 8)] = x[pl.ds(0, 8)]
        o[...] = x[...]
    f = pl.pallas_call(body, jax.ShapeDtypeStruct((16,), jnp.float32),
                       scratch_shapes=[pl.MemorySpace.DEFAULT((16,), jnp.float32)], **TRITON)
    with pytest.raises(BackendCapabilityError,
                       match=r"scratch_shapes\[0\] \(float32\[16\]\).*sliced 'swap' at "
                             r".*test_sequential_grid.py:\d+"):
        f(np.ones(16, np.float32))


def test_scratch_of_any_size_accumulates(rng):
    """A (24,) scratch accumulator (padded to 32 lanes in registers) over a revisiting grid."""
    def body(x, o, s):
        @pl.when(pl.program_id(0) == 0)
        def _():
            s[...] = jnp.zeros((24,), jnp.float32)
        s[...] = s[...] + x[...] * 2
        o[...] = s[...]
    x = rng.standard_normal(72).astype(np.float32)
    f = pl.pallas_call(body, jax.ShapeDtypeStruct((24,), jnp.float32), grid=(3,),
                       in_specs=[pl.BlockSpec((24,), lambda i: (i,))],
                       out_specs=pl.BlockSpec((24,), lambda i: (0,)),
                       scratch_shapes=[pl.MemorySpace.DEFAULT((24,), jnp.float32)], **TRITON)
    np.testing.assert_allclose(np.asarray(f(x)), 2 * x.astype(np.float64).reshape(3, 24).sum(0),
                               rtol=1e-6, atol=1e-6)
