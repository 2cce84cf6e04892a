"""``emit_pipeline_warp_specialized`` with what JAX's Mosaic GPU kernels use:
``compute_context`` (a carry threaded through the body, a prologue and
epilogue on the compute warpgroups), manual consumed barriers, and buffers
from ``get_allocations`` allocated by the caller with ``pl.run_scoped``.
Each kernel runs with JAX's API and with ours, in GPU interpret mode,
against NumPy."""

import functools
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as jax_pl
from jax_window import jplgpu as jax_plgpu  # JAX's plgpu (with 0.10's GPU interpret API)

import pallas_frontend as pl
import pallas_mgpu as plgpu
from h100_ops import lowered_module, mosaic_ops

APIS = {"jax": (jax_pl, jax_plgpu), "ours": (pl, plgpu)}
ROWS, COLS, BLOCK = 128, 512, 128       # two compute warpgroups of 64 rows each


def _column_block_sums(api, *, manual_consumed: bool, caller_allocates: bool, scale: float):
    """o[r, c] = scale * sum_k x[r, k * BLOCK + c]: the pipeline walks the
    column blocks of x; each compute warpgroup keeps its 64 rows' running sum
    in a register carry and stores it in the compute context's epilogue."""
    P, gpu = APIS[api]

    @functools.partial(
        gpu.kernel, out_type=jax.ShapeDtypeStruct((ROWS, BLOCK), jnp.float32),
        num_threads=3, thread_name="wg", interpret=gpu.InterpretGPUParams())
    def k(x_ref, o_ref):
        wg = jax.lax.axis_index("wg")
        rows = pl.ds(wg * 64, 64)

        def body(idx, x_smem, *rest):
            *barriers, carry = rest
            total = carry + x_smem[rows, :]
            if manual_consumed:
                gpu.barrier_arrive(barriers[0])
            return total

        def context(run):
            # a prologue value the carry starts from (on the compute warpgroups only)
            start = jnp.zeros((64, BLOCK), jnp.float32) + jnp.float32(0.0) * wg.astype(jnp.float32)
            total = run(start)
            o_ref[rows, :] = total * scale

        pipeline = gpu.emit_pipeline_warp_specialized(
            body, grid=(COLS // BLOCK,), memory_registers=40,
            in_specs=[gpu.BlockSpec((ROWS, BLOCK), lambda j: (0, j))],
            max_concurrent_steps=2, wg_axis="wg", num_compute_wgs=2,
            manual_consumed_barriers=manual_consumed, compute_context=context)
        if caller_allocates:
            P.run_scoped(lambda allocs: pipeline(x_ref, allocations=allocs),
                         pipeline.get_allocations(x_ref), collective_axes="wg")
        else:
            pipeline(x_ref)
    return k


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("manual_consumed,caller_allocates", [(False, False), (True, True)])
def test_compute_context_carries_a_value_through_the_pipeline(api, manual_consumed,
                                                             caller_allocates, rng):
    x = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    scale = float(rng.uniform(0.5, 2.0))
    k = _column_block_sums(api, manual_consumed=manual_consumed,
                           caller_allocates=caller_allocates, scale=scale)
    got = np.asarray(jax.jit(k)(x))
    want = scale * x.astype(np.float64).reshape(ROWS, COLS // BLOCK, BLOCK).sum(axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_get_allocations_matches_jax():
    """Same buffers and barriers as JAX's pipeline asks for (the caller hands
    them back to JAX's pipeline when the kernel is rebuilt)."""
    got, want = {}, {}
    for api, store in (("jax", want), ("ours", got)):
        _, gpu = APIS[api]
        t = (gpu.TilingTransform((8, 64)), gpu.SwizzleTransform(128))
        pipe = gpu.emit_pipeline_warp_specialized(
            lambda *a: None, grid=(3,), memory_registers=40, wg_axis="wg", num_compute_wgs=2,
            in_specs=[gpu.BlockSpec((64, 64), lambda i: (i, 0), transforms=t,
                                    collective_axes="c"),
                      gpu.BlockSpec((64, 64), lambda i: (0, i))],
            out_specs=[gpu.BlockSpec((32,), lambda i: (i,)), gpu.BlockSpec((32,), lambda i: (1,))],
            max_concurrent_steps=5,
            manual_consumed_barriers=True)
        refs = [jax.ShapeDtypeStruct(s, jnp.float16) for s in ((192, 64), (64, 192), (96,), (64,))]
        allocs = pipe.get_allocations(*refs)
        store.update({k: [(type(v).__name__, tuple(getattr(v, "shape", ())),
                           getattr(v, "num_barriers", None), getattr(v, "num_arrivals", None),
                           tuple(getattr(v, "collective_axes", ())))
                          for v in vs] for k, vs in allocs.items()})
    assert got == want


def test_pipeline_run_twice_in_compute_context_is_refused():
    @functools.partial(plgpu.kernel, out_type=jax.ShapeDtypeStruct((BLOCK, BLOCK), jnp.float32),
                       num_threads=2, thread_name="wg", interpret=plgpu.InterpretGPUParams())
    def k(x_ref, o_ref):
        def context(run):
            run(jnp.zeros((BLOCK, BLOCK), jnp.float32))
            run(jnp.zeros((BLOCK, BLOCK), jnp.float32))
        plgpu.emit_pipeline_warp_specialized(
            lambda idx, x, carry: carry + x[...], grid=(2,), memory_registers=40,
            in_specs=[plgpu.BlockSpec((BLOCK, BLOCK), lambda j: (0, j))], wg_axis="wg",
            num_compute_wgs=1, compute_context=context)(x_ref)
    with pytest.raises(ValueError, match="may run only once in compute_context"):
        k(np.ones((BLOCK, 2 * BLOCK), np.float32))


def _first_blocks_sum(api):
    """o[r, c] = sum over k < n of x[r, k * BLOCK + c], n read from memory when
    the kernel runs (the pipeline's grid size is traced), with a None in the
    in_specs where an optional operand is absent (as tokamax's attention passes
    no bias): the body gets None there."""
    P, gpu = APIS[api]

    @functools.partial(
        gpu.kernel, out_type=jax.ShapeDtypeStruct((ROWS, BLOCK), jnp.float32),
        num_threads=3, thread_name="wg", interpret=gpu.InterpretGPUParams())
    def k(x_ref, n_ref, o_ref):
        wg = jax.lax.axis_index("wg")
        rows = pl.ds(wg * 64, 64)

        def body(idx, x_smem, bias, carry):
            assert bias is None
            return carry + x_smem[rows, :]

        def context(run):
            o_ref[rows, :] = run(jnp.zeros((64, BLOCK), jnp.float32))

        gpu.emit_pipeline_warp_specialized(
            body, grid=(n_ref[0],), memory_registers=40,
            in_specs=[gpu.BlockSpec((ROWS, BLOCK), lambda j: (0, j)), None],
            max_concurrent_steps=2, wg_axis="wg", num_compute_wgs=2,
            compute_context=context)(x_ref, None)
    return k


@pytest.mark.parametrize("api", APIS)
def test_traced_grid_size_and_a_none_spec(api, rng):
    x = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    n = int(rng.integers(1, COLS // BLOCK + 1))
    got = np.asarray(jax.jit(_first_blocks_sum(api))(x, np.array([n], np.int32)))
    want = x.astype(np.float64).reshape(ROWS, COLS // BLOCK, BLOCK)[:, :n].sum(axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _attention_backward_shape(api, interpret=True, block=BLOCK):
    """The shape of tokamax's sm90 attention backward (dK/dV kernel): a 2-D
    grid whose first size (ub - lb) is known only at run time, index maps
    offset by the run-time lower bound lb, None specs first and in the middle
    (no bias, no mask), manual consumed barriers (None for the absent
    operands). o[r, c] = sum over lb <= k < ub, h < 2 of x[h, r, k * BLOCK + c]
    + 2 * y[h, r, k * BLOCK + c]."""
    P, gpu = APIS[api]
    heads = 2

    @functools.partial(
        gpu.kernel, out_type=jax.ShapeDtypeStruct((ROWS, block), jnp.float32),
        num_threads=3, thread_name="wg",
        interpret=gpu.InterpretGPUParams() if interpret else False)
    def k(x_ref, y_ref, bounds_ref, o_ref):
        wg = jax.lax.axis_index("wg")
        rows = pl.ds(wg * 64, 64)
        lb, ub = bounds_ref[0], bounds_ref[1]

        def body(idx, bias_smem, x_smem, mask_smem, y_smem,
                 bias_consumed, x_consumed, mask_consumed, y_consumed, carry):
            assert bias_smem is None and mask_smem is None
            assert bias_consumed is None and mask_consumed is None
            total = carry + x_smem[rows, :] + 2 * y_smem[rows, :]
            gpu.barrier_arrive(x_consumed)
            gpu.barrier_arrive(y_consumed)
            return total

        def context(run):
            o_ref[rows, :] = run(jnp.zeros((64, block), jnp.float32))

        spec = gpu.BlockSpec((None, ROWS, block), lambda i, h: (h, 0, lb + i))
        gpu.emit_pipeline_warp_specialized(
            body, grid=(ub - lb, heads), memory_registers=40,
            in_specs=[None, spec, None, spec], max_concurrent_steps=2, wg_axis="wg",
            num_compute_wgs=2, manual_consumed_barriers=True,
            compute_context=context)(None, x_ref, None, y_ref)
    return k


@pytest.mark.parametrize("api", APIS)
def test_attention_backward_shaped_pipeline(api, rng):
    x, y = (rng.standard_normal((2, ROWS, COLS)).astype(np.float32) for _ in range(2))
    lb = int(rng.integers(0, COLS // BLOCK))
    ub = int(rng.integers(lb + 1, COLS // BLOCK + 1))
    got = np.asarray(jax.jit(_attention_backward_shape(api))(
        x, y, np.array([lb, ub], np.int32)))
    both = (x.astype(np.float64) + 2 * y.astype(np.float64)).reshape(2, ROWS, -1, BLOCK)
    np.testing.assert_allclose(got, both[:, :, lb:ub].sum(axis=(0, 2)), rtol=1e-5, atol=1e-5)


def test_attention_backward_shaped_pipeline_lowers_for_cuda_as_jax():
    """The same kernel lowered for cuda (no compiler needed): JAX's Mosaic GPU
    operations, as often. Blocks of 64 columns: two stages of two 128x128
    float32 operands would not fit in shared memory."""
    args = [jax.ShapeDtypeStruct((2, ROWS, COLS), jnp.float32)] * 2 + [
        jax.ShapeDtypeStruct((2,), jnp.int32)]
    ops = {api: mosaic_ops(lowered_module(_attention_backward_shape(api, False, 64), *args))
           for api in APIS}
    assert ops["ours"]["nvvm.mbarrier.try_wait.parity"] > 0     # the pipeline's waits
    assert ops["ours"] == ops["jax"], (ops["ours"] - ops["jax"], ops["jax"] - ops["ours"])
