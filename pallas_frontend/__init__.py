"""pallas_frontend: a Pallas kernel language for JAX with pluggable backends.

``import pallas_frontend as pl`` gives the user API: BlockSpec/GridSpec,
``pallas_call``, ``kernel`` and the in-kernel helpers. Backends live in
separate distributions and are found through entry points on first use.
"""

from __future__ import annotations

import warnings as _warnings

__version__ = "0.1.0"

from pallas_frontend._jax_compat import Slice, ds  # noqa: E402
from pallas_frontend.backend_api import API_VERSION  # noqa: E402
from pallas_frontend.block_indices import BlockIndexError  # noqa: E402
from pallas_frontend.call_primitive import pallas_call_p  # noqa: E402
from pallas_frontend.helpers import (  # noqa: E402
    align_to, broadcast_to, cdiv, empty, empty_like, empty_ref_like, loop, next_power_of_2,
    strides_from_shape, when, with_scoped)
from pallas_frontend.pallas_call import kernel, pallas_call  # noqa: E402
from pallas_frontend.primitives import (  # noqa: E402
    DeviceIdType, KernelCheckError, debug_check, debug_print, enable_debug_checks, get_global,
    multiple_of, num_programs, program_id, run_scoped, semaphore_read, semaphore_signal,
    semaphore_wait)
from pallas_frontend.registry import (  # noqa: E402
    backends, get_backend, register_backend, set_default_backend, which_backend)
from pallas_frontend.specs import (  # noqa: E402
    ANY, HOST, BlockDim, BlockSpec, Blocked, BoundedSlice, Buffered, CompilerParams, CostEstimate,
    Element, GridSpec, MemoryRef, MemorySpace, RevisitMode, Squeezed, no_block_spec, squeezed)
from pallas_frontend.tracing import PallasUsageError  # noqa: E402

dslice = ds

# name -> (message, replacement object or None when the name is removed)
_DEPRECATED = {
    "core_map": ("pl.core_map is deprecated; use pl.kernel instead.", "core_map"),
    "reciprocal": ("pl.reciprocal is deprecated; it moved to the TPU backend: use "
                   "pallas_tpu.reciprocal (or 1 / x in portable kernels).", "reciprocal"),
}
_REMOVED = {
    "dot": "pl.dot was removed; use jax.numpy.dot, jax.numpy.einsum or the @ operator "
           "(pallas_triton.dot for Triton-specific options).",
    "debug_checks_enabled": "pl.debug_checks_enabled was removed; use "
                            "pl.enable_debug_checks.value instead.",
}


def _deprecated_target(name):
    if name == "core_map":
        from pallas_frontend.pallas_call import core_map
        return core_map

    def reciprocal(x, *, approx: bool = False, full_range: bool = True):
        del approx, full_range  # the exact reciprocal satisfies both hints
        return 1.0 / x
    return reciprocal


def __getattr__(name):
    if name in _DEPRECATED:
        _warnings.warn(_DEPRECATED[name][0], DeprecationWarning, stacklevel=2)
        return _deprecated_target(name)
    if name in _REMOVED:
        raise AttributeError(_REMOVED[name])
    raise AttributeError(f"module 'pallas_frontend' has no attribute {name!r}")


def print_backend_info(file=None) -> None:
    """Prints every discovered backend: version, platforms, capabilities, availability."""
    from pallas_frontend.diagnostics import print_backend_info as _print
    _print(file=file)


__all__ = [
    "ANY", "API_VERSION", "BlockDim", "BlockIndexError", "BlockSpec", "Blocked", "BoundedSlice",
    "Buffered", "CompilerParams", "CostEstimate", "DeviceIdType", "Element", "GridSpec", "HOST",
    "KernelCheckError", "MemoryRef", "MemorySpace", "PallasUsageError", "RevisitMode", "Slice",
    "Squeezed", "align_to", "backends", "broadcast_to", "cdiv", "debug_check", "debug_print",
    "ds", "dslice", "empty", "empty_like", "empty_ref_like", "enable_debug_checks", "get_backend",
    "get_global", "kernel", "loop", "multiple_of", "next_power_of_2", "no_block_spec",
    "num_programs", "pallas_call", "pallas_call_p", "print_backend_info", "program_id",
    "register_backend", "run_scoped", "semaphore_read", "semaphore_signal", "semaphore_wait",
    "set_default_backend", "squeezed", "strides_from_shape", "when", "which_backend",
    "with_scoped",
]
