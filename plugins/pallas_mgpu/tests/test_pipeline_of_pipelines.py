"""A pipeline of pipelines: ``emit_pipeline_warp_specialized`` with
``pipeline_state=`` (JAX's ``PipelinePipeline``: START, STEADY..., STOP), the
pipelines sharing the caller's allocations, their bodies differing. Run with
JAX's API and with ours in GPU interpret mode, against NumPy; the stage given
as the enum (static) and as an int32 known only at run time."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as jax_pl
from jax_window import jplgpu as jax_plgpu  # JAX's plgpu (with 0.10's GPU interpret API)

import pallas_frontend as pl
import pallas_mgpu as plgpu
from h100_ops import mosaic_ops, sharded_lowered_module

APIS = {"jax": (jax_pl, jax_plgpu), "ours": (pl, plgpu)}
ROWS, COLS, BLOCK = 128, 512, 128
SCALES = (1.0, -2.0, 0.5)           # one body per pipeline: o[:, p] = SCALES[p] * x_p


def _three_pipelines(api, traced_state: bool, interpret: bool = True):
    P, gpu = APIS[api]

    @functools.partial(
        gpu.kernel, out_type=jax.ShapeDtypeStruct((3, ROWS, COLS), jnp.float32),
        num_threads=3, thread_name="wg",
        interpret=gpu.InterpretGPUParams() if interpret else None)
    def k(stage_ref, x0_ref, x1_ref, x2_ref, o_ref):
        wg = jax.lax.axis_index("wg")
        rows = pl.ds(wg * 64, 64)

        def make(p, state):
            def body(idx, x_smem):
                o_ref[p, rows, pl.ds(idx[0] * BLOCK, BLOCK)] = x_smem[rows, :] * SCALES[p]
            return gpu.emit_pipeline_warp_specialized(
                body, grid=(COLS // BLOCK,), memory_registers=40,
                in_specs=[gpu.BlockSpec((ROWS, BLOCK), lambda j: (0, j))],
                max_concurrent_steps=2, wg_axis="wg", num_compute_wgs=2,
                pipeline_state=state)

        stages = ([stage_ref[i] for i in range(3)] if traced_state else
                  [gpu.PipelinePipeline.START, gpu.PipelinePipeline.STEADY,
                   gpu.PipelinePipeline.STOP])
        pipes = [make(p, s) for p, s in enumerate(stages)]

        def run_all(allocs):
            for pipe, x in zip(pipes, (x0_ref, x1_ref, x2_ref)):
                pipe(x, allocations=allocs)
        P.run_scoped(run_all, pipes[0].get_allocations(x0_ref), collective_axes="wg")
    return k


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("traced_state", [False, True])
def test_three_pipelines_share_their_allocations(api, traced_state, rng):
    xs = [rng.standard_normal((ROWS, COLS)).astype(np.float32) for _ in range(3)]
    stages = np.array([0, 1, 2], np.int32)        # START, STEADY, STOP, read at run time
    got = np.asarray(jax.jit(_three_pipelines(api, traced_state))(stages, *xs))
    want = np.stack([s * x.astype(np.float64) for s, x in zip(SCALES, xs)])
    np.testing.assert_allclose(got, want, rtol=1e-6)


def _h100_ops(api, traced_state):
    """Operation counts of the kernel's Mosaic GPU module lowered for an H100."""
    args = [jax.ShapeDtypeStruct((3,), jnp.int32)] + [
        jax.ShapeDtypeStruct((ROWS, COLS), jnp.float32)] * 3
    return mosaic_ops(sharded_lowered_module(
        _three_pipelines(api, traced_state, interpret=False), *args))


@pytest.mark.parametrize("traced_state", [False, True])
def test_lowers_for_h100_to_jaxs_operations(traced_state):
    ours, jaxs = _h100_ops("ours", traced_state), _h100_ops("jax", traced_state)
    # the shared allocations are one collective run_scoped of several buffers:
    # one block-wide gpu.barrier, as JAX's (one scope per buffer had one more)
    assert ours == jaxs, (ours - jaxs, jaxs - ours)
    assert ours["nvvm.mbarrier.try_wait.parity"] > 0     # the pipelines' barrier waits


def test_pipeline_state_is_jaxs_enum():
    assert plgpu.PipelinePipeline is jax_plgpu.PipelinePipeline


def _refused(**kw):
    @functools.partial(
        plgpu.kernel, out_type=jax.ShapeDtypeStruct((ROWS, COLS), jnp.float32),
        num_threads=3, thread_name="wg", interpret=plgpu.InterpretGPUParams())
    def k(x_ref, o_ref):
        pipe = plgpu.emit_pipeline_warp_specialized(
            lambda idx, x_smem: None, grid=kw.pop("grid", (COLS // BLOCK,)), memory_registers=40,
            in_specs=[plgpu.BlockSpec((ROWS, BLOCK), lambda j: (0, j))], wg_axis="wg",
            num_compute_wgs=2, pipeline_state=plgpu.PipelinePipeline.START, **kw)
        pipe(x_ref)                                   # no shared allocations
    return k


def test_refusals_before_anything_runs():
    x = np.ones((ROWS, COLS), np.float32)
    with pytest.raises(ValueError, match="pipeline_state needs the allocations"):
        jax.jit(_refused()).lower(x)
    with pytest.raises(NotImplementedError, match="divisible by max_concurrent_steps=3"):
        jax.jit(_refused(max_concurrent_steps=3)).lower(x)
