"""pallas_tpu: the TPU backend of pallas_frontend, through Mosaic TPU.

``import pallas_tpu as pltpu`` gives the TPU-only kernel API; the kernels
themselves are written with ``pallas_frontend``. Passing
``compiler_params=pltpu.CompilerParams(...)`` selects this backend;
``interpret=pltpu.InterpretParams()`` runs it through JAX's TPU interpreter.
"""

from __future__ import annotations

from pallas_tpu.backend import TpuBackend, __version__
from pallas_tpu.collectives import core_barrier, get_barrier_semaphore, run_on_first_core
from pallas_tpu.chip_info import (
    ChipVersion, Tiling, TpuInfo, get_tpu_info, get_tpu_info_for_chip, is_tpu_device)
from pallas_tpu.grid_spec import PrefetchScalarGridSpec
from pallas_tpu.layout_ops import bitcast, einshape, roll
from pallas_tpu.memory import (
    ANY, CMEM, HBM, SEMAPHORE, SMEM, VMEM, VMEM_SHARED, MemorySpace, SemaphoreType)
from pallas_tpu.mesh import CoreType, TensorCoreMesh, create_tensorcore_mesh
from pallas_tpu.params import (
    ARBITRARY, CORE_PARALLEL, PARALLEL, SUBCORE_PARALLEL, CompilerParams,
    GridDimensionSemantics, InterpretParams, SideEffectType, force_tpu_interpret_mode,
    reset_tpu_interpret_mode_state, set_tpu_interpret_mode)
from pallas_tpu.buffered_ref import BufferedRef, BufferType
from pallas_tpu.pipeline import emit_pipeline, emit_pipeline_with_allocations
from pallas_tpu.async_prefetch import emit_pipeline_with_async_prefetch
from pallas_tpu.pipeline_schedule import PipelineStep
from pallas_tpu.primitives import (
    AsyncCopyDescriptor, async_copy, async_remote_copy, load, make_async_copy,
    make_async_remote_copy, prng_random_bits, prng_seed, reciprocal, store, sync_copy)
from pallas_tpu.spaces import with_memory_space_constraint
from pallas_tpu.semaphore_types import dma_semaphore_class as _dma_semaphore_class
from pallas_tpu import dma_interpret as _dma_interpret  # noqa: F401  (interpret=True rules)
from pallas_tpu import ref_io_interpret as _ref_io_interpret  # noqa: F401  (the same)
from pallas_tpu import float8_dot as _float8_dot  # noqa: F401  (its compile-time rewrite)
from pallas_tpu.random import (
    stateful_bernoulli, stateful_bits, stateful_normal, stateful_uniform)
from pallas_tpu.keyed_random import sample_block, to_pallas_key
from pallas_tpu.kernel_hints import touch, trace_value
from pallas_tpu.conv import conv
from pallas_tpu.memory_query import has_memory_space
from pallas_tpu.access_hints import annotate
from pallas_tpu.lowering_errors import LoweringException
from pallas_tpu.narrow_types import (
    join_bits, pack_elementwise, pack_fp6, split_bits, stochastic_round, unpack_elementwise,
    unpack_fp6)

__all__ = [
    "ChipVersion", "Tiling", "TpuInfo", "get_tpu_info", "get_tpu_info_for_chip", "is_tpu_device",
    "ANY", "ARBITRARY", "AsyncCopyDescriptor", "CMEM", "CORE_PARALLEL",
    "CompilerParams", "CoreType", "GridDimensionSemantics", "TensorCoreMesh",
    "create_tensorcore_mesh",
    "reset_tpu_interpret_mode_state", "HBM", "InterpretParams", "MemorySpace", "PARALLEL",
    "PrefetchScalarGridSpec", "SEMAPHORE", "SMEM", "SUBCORE_PARALLEL", "SemaphoreType",
    "SideEffectType", "TpuBackend", "VMEM", "__version__", "async_copy", "async_remote_copy",
    "BufferType", "BufferedRef", "bitcast", "einshape", "emit_pipeline",
    "emit_pipeline_with_allocations", "PipelineStep", "force_tpu_interpret_mode", "load", "make_async_copy",
    "emit_pipeline_with_async_prefetch",
    "make_async_remote_copy", "prng_random_bits", "prng_seed", "reciprocal", "roll",
    "set_tpu_interpret_mode", "stateful_bernoulli", "stateful_bits", "stateful_normal",
    "stateful_uniform", "store", "sync_copy",
    "VMEM_SHARED", "core_barrier", "get_barrier_semaphore", "run_on_first_core",
    "with_memory_space_constraint", "sample_block", "to_pallas_key",
    "touch", "trace_value", "conv", "join_bits", "pack_elementwise", "pack_fp6", "split_bits",
    "stochastic_round", "unpack_elementwise", "unpack_fp6", "has_memory_space", "annotate",
    "LoweringException", "dma_semaphore",
]

# JAX's dtype class of DMA semaphores: jnp.issubdtype(sem.dtype, pltpu.dma_semaphore)
dma_semaphore = _dma_semaphore_class()


def __getattr__(name):
    # JAX's deprecated alias (pltpu.HOST: JAX HEAD warns, JAX 0.12.0 removed it): the
    # host memory is the frontend's, pallas_frontend.HOST
    if name == "HOST":
        import warnings

        import pallas_frontend
        warnings.warn("pltpu.HOST is deprecated, use pl.HOST (pallas_frontend.HOST) instead.",
                      DeprecationWarning, stacklevel=2)
        return pallas_frontend.HOST
    raise AttributeError(f"module 'pallas_tpu' has no attribute {name!r}")
