"""pallas_mgpu: the Mosaic GPU backend of pallas_frontend (NVIDIA Hopper/Blackwell).

``import pallas_mgpu as plgpu`` gives the Mosaic GPU kernel API (the names of
JAX 0.12's ``jax.experimental.pallas.mosaic_gpu``); kernels are written with
``pallas_frontend``. ``compiler_params=plgpu.CompilerParams()`` selects this
backend for a portable kernel; ``interpret=plgpu.InterpretParams()`` runs it
on CPU through JAX's Mosaic GPU interpreter.
"""

from __future__ import annotations

from pallas_mgpu.backend import MosaicGpuBackend, __version__
from pallas_mgpu import matmul as _matmul  # noqa: F401  (registers the WGMMA rule)
from pallas_mgpu.helpers import find_swizzle, planar_snake
from pallas_mgpu.loops import NDLoopInfo, nd_loop
from pallas_mgpu.memory import (
    ACC, GMEM, REGS, SMEM, TMEM, Barrier, ClusterBarrier, GPUMemoryRef, MemorySpace,
    SwizzleTransform, TilingTransform, Transform, WGMMAAccumulatorRef)
from pallas_mgpu.mesh_kernel import Mesh, kernel
from pallas_mgpu.multi_gpu import (
    SemaphoreType, cluster_ref, multicast_ref, multimem_load_reduce, multimem_store, remote_ref,
    semaphore_signal,
    semaphore_signal_multicast, semaphore_wait)
from pallas_mgpu.warp_mesh import WarpMesh
from pallas_mgpu.params import (
    CompilerParams, InterpretGPUParams, InterpretParams, LoweringSemantics, TraceScope,
    force_gpu_interpret_mode, set_gpu_interpret_mode)
from pallas_mgpu.pipeline import BlockSpec, OOBFillMode, emit_pipeline
from pallas_mgpu.warp_pipeline import emit_pipeline_warp_specialized
from pallas_mgpu import run_state as _run_state  # noqa: F401  (replays pl.run_state)
from pallas_mgpu.copy_partition import CopyPartition
from pallas_mgpu.im2col import im2col_ref
from pallas_mgpu.cluster_cancel import (
    TryClusterCancelResult, async_store_smem, query_cluster_cancel, try_cluster_cancel)
from pallas_mgpu.dynamic_scheduling import dynamic_scheduling_loop
from pallas_mgpu.inline import RefType, ShapeDtypeStruct, inline_mgpu
from pallas_mgpu.ref_union import RefUnion
from pallas_mgpu.ref_operands import alloc_semaphore
from pallas_mgpu.register_ops import mma, transpose_ref, wgmma_accumulator_load
from pallas_mgpu.warp_map import warp_map
from pallas_mgpu.plain_ops import (
    async_prefetch, atomic_add, atomic_and, atomic_max, atomic_min, atomic_or,
    atomic_xor, barrier_test, griddepcontrol_launch_dependents, griddepcontrol_wait, max, min,
    print_layout, prod, store, sum, wait_gmem_to_smem)
from pallas_mgpu.primitives import (
    Layout, SemaphoreSignal, async_copy_scales_to_tmem, async_copy_smem_to_tmem,
    async_copy_sparse_metadata_to_tmem,
    async_load_tmem, async_store_tmem, barrier_arrive, barrier_arrive_and_wait, barrier_wait,
    broadcasted_iota, commit_smem, commit_smem_to_gmem_group, commit_tmem,
    copy_gmem_to_smem, copy_smem_to_gmem, layout_cast, load, semaphore_signal_parallel,
    set_max_registers, tcgen05_commit_arrive, tcgen05_mma, wait_load_tmem, wait_smem_to_gmem,
    wgmma, wgmma_wait)

__all__ = [
    "ACC", "Barrier", "BlockSpec", "ClusterBarrier", "CompilerParams", "CopyPartition", "GMEM",
    "GPUMemoryRef", "RefType", "RefUnion", "ShapeDtypeStruct", "dynamic_scheduling_loop",
    "inline_mgpu", "mma", "transpose_ref", "warp_map", "wgmma_accumulator_load",
    "InterpretGPUParams", "InterpretParams", "Layout", "LoweringSemantics", "MemorySpace", "Mesh",
    "MosaicGpuBackend", "NDLoopInfo", "OOBFillMode", "REGS", "SMEM", "SemaphoreSignal",
    "SemaphoreType", "SwizzleTransform", "TMEM", "multimem_load_reduce", "multimem_store",
    "cluster_ref", "multicast_ref", "remote_ref", "semaphore_signal", "semaphore_signal_multicast",
    "semaphore_wait",
    "TilingTransform", "TraceScope", "Transform", "WGMMAAccumulatorRef", "WarpMesh",
    "__version__", "async_copy_scales_to_tmem", "async_copy_smem_to_tmem", "async_load_tmem",
    "async_store_tmem", "barrier_arrive", "barrier_arrive_and_wait", "barrier_wait",
    "broadcasted_iota",
    "commit_smem", "commit_smem_to_gmem_group", "commit_tmem", "copy_gmem_to_smem",
    "copy_smem_to_gmem", "emit_pipeline", "emit_pipeline_warp_specialized", "find_swizzle",
    "force_gpu_interpret_mode", "kernel", "layout_cast", "load", "nd_loop", "planar_snake",
    "semaphore_signal_parallel", "set_gpu_interpret_mode", "set_max_registers",
    "tcgen05_commit_arrive", "tcgen05_mma", "wait_load_tmem", "wait_smem_to_gmem", "wgmma",
    "wgmma_wait", "async_prefetch", "atomic_add", "atomic_and", "atomic_max",
    "atomic_min", "atomic_or", "atomic_xor", "barrier_test", "griddepcontrol_launch_dependents",
    "griddepcontrol_wait", "max", "min", "print_layout", "prod", "store", "sum",
    "wait_gmem_to_smem", "TryClusterCancelResult", "async_store_smem", "im2col_ref", "query_cluster_cancel",
    "try_cluster_cancel", "alloc_semaphore", "async_copy_sparse_metadata_to_tmem",
]


def __getattr__(name):
    # Mosaic GPU's own layout tiling (an argument of Layout.TILED(...)), passed
    # through to JAX unchanged; imported on first use (it loads Mosaic GPU).
    if name == "Tiling":
        from jax.experimental.mosaic.gpu.fragmented_array import Tiling
        return Tiling
    # the replicated warp/lane dims of Layout.TILED(...), passed through as Tiling is
    if name == "Replicated":
        from jax.experimental.mosaic.gpu.fragmented_array import Replicated
        return Replicated
    # the layouts of TMEM(..., layout=) for block-scaled and sparse MMAs, passed through
    if name == "TMEMLayout":
        from jax.experimental.pallas.mosaic_gpu import TMEMLayout
        return TMEMLayout
    # a host-side array function (the tcgen05 sparse-MMA metadata layout), JAX's own
    if name == "format_tcgen05_sparse_metadata":
        from jax.experimental.pallas.mosaic_gpu import format_tcgen05_sparse_metadata
        return format_tcgen05_sparse_metadata
    # the stages of a pipeline of pipelines (emit_pipeline_warp_specialized's
    # pipeline_state=), JAX's enum: the rebuilt kernel gets it as given
    # the transform of remote_ref's views (they are JAX's own), for isinstance checks
    if name == "PeerMemRef":
        from jax.experimental.pallas.mosaic_gpu import PeerMemRef
        return PeerMemRef
    if name == "PipelinePipeline":
        from jax.experimental.pallas.mosaic_gpu import PipelinePipeline
        return PipelinePipeline
    raise AttributeError(f"module 'pallas_mgpu' has no attribute {name!r}")
