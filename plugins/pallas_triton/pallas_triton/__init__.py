"""pallas_triton: the Triton backend of pallas_frontend.

Kernels written with ``pallas_frontend`` become one generated ``@triton.jit``
function. Choose this backend with ``compiler_params=pallas_triton.CompilerParams(...)``
(launched on NVIDIA/AMD GPUs through XLA's own Triton custom call), or run the
generated kernel anywhere with ``interpret=pallas_triton.InterpretParams()``;
``compile_for_target`` returns PTX/cubin for an explicit GPU without needing one.
"""

from __future__ import annotations

__version__ = "0.1.0"

from pallas_triton.params import CompilerParams, InterpretParams  # noqa: E402
from pallas_triton.backend import TritonBackend, generate_source  # noqa: E402
from pallas_triton.autotune import Autotuner, Config, autotune  # noqa: E402
from pallas_triton.compile import compile_for_target, kernel_ir_of  # noqa: E402
from pallas_triton.grid_spec import PrefetchScalarGridSpec  # noqa: E402
from pallas_triton.primitives import (  # noqa: E402
    approx_tanh, atomic_add, atomic_and, atomic_cas, atomic_max, atomic_min, atomic_or,
    atomic_sub, atomic_xchg, atomic_xor, debug_barrier, dot, elementwise_inline_asm, load,
    max_contiguous, store)
from pallas_triton.gpu_launch import CUSTOM_CALL as CUSTOM_CALL_TARGET_NAME  # noqa: E402

__all__ = ["GpuInfo", "GpuVersion", "get_gpu_info", "get_gpu_info_from_version",
           "is_gpu_device", "CUSTOM_CALL_TARGET_NAME", "Autotuner", "CompilerParams", "Config", "autotune", "InterpretParams", "PrefetchScalarGridSpec", "TritonBackend", "compile_for_target",
           "generate_source", "kernel_ir_of", "__version__", "approx_tanh", "atomic_add",
           "atomic_and", "atomic_cas", "atomic_max", "atomic_min", "atomic_or", "atomic_sub",
           "atomic_xchg", "atomic_xor", "debug_barrier", "dot", "elementwise_inline_asm", "load",
           "max_contiguous", "store"]

# JAX's GPU queries (pallas_triton.gpu_info), loaded on first use: they import
# JAX's Triton Pallas modules (a quarter of a second), which kernels never need.
_GPU_INFO = frozenset({"GpuInfo", "GpuVersion", "get_gpu_info", "get_gpu_info_from_version",
                       "is_gpu_device"})


def __getattr__(name):
    if name in _GPU_INFO:
        from pallas_triton import gpu_info
        return getattr(gpu_info, name)
    raise AttributeError(f"module 'pallas_triton' has no attribute {name!r}")
