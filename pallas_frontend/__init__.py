"""pallas_frontend: a Pallas kernel language for JAX with pluggable backends.

``import pallas_frontend as pl`` gives the user API: BlockSpec/GridSpec,
``pallas_call``, ``kernel`` and the in-kernel helpers. Backends live in
separate distributions and are found through entry points on first use.

The API's modules load on first attribute access (PEP 562), so importing the
package costs almost nothing until a kernel is written.
"""

from __future__ import annotations

import importlib as _importlib
import warnings as _warnings
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# public name -> the module (under pallas_frontend) that defines it
_API = {
    "_jax_compat": ("Slice", "ds", "run_state"),
    "autotuning": ("autotune",),
    "autotune_space": ("search_space", "tile_sizes"),
    "cost": ("estimate_cost",),
    "export": ("enable_poison_buffers", "lower_as_mlir", "pallas_export_experimental"),
    "backend_api": ("API_VERSION",),
    "block_indices": ("BlockIndexError",),
    "call_primitive": ("pallas_call_p",),
    "helpers": ("align_to", "broadcast_to", "cdiv", "empty", "empty_like", "empty_ref_like",
                "loop", "next_power_of_2", "pad_ref", "select_ref", "strides_from_shape",
                "when", "with_scoped"),
    "launch": ("kernel", "pallas_call"),
    "output_coverage": ("UnwrittenOutputError", "UnwrittenOutputWarning"),
    "primitives": ("DeviceIdType", "KernelCheckError", "SemaphoreDeadlockError", "debug_check",
                   "debug_print", "delay",
                   "enable_debug_checks", "get_global", "multiple_of", "num_programs",
                   "program_id", "run_scoped", "semaphore_read", "semaphore_signal",
                   "semaphore_wait"),
    "registry": ("backends", "get_backend", "register_backend", "set_default_backend",
                 "which_backend"),
    "specs": ("ANY", "HOST", "BlockDim", "Blocked", "BoundedSlice", "Buffered",
              "CompilerParams", "CostEstimate", "Element", "GridSpec", "Indirect", "MemoryRef",
              "MemorySpace",
              "RevisitMode", "Squeezed", "no_block_spec", "semaphore", "squeezed"),
    "ref_checks": ("RefIndexError",),
    # BlockSpec through tracing, which gives it to_block_mapping
    "tracing": ("BlockSpec", "PallasTypeError", "PallasUsageError"),
    "diagnostics": ("print_backend_info",),
}
_HOME = {name: module for module, names in _API.items() for name in names}
_ALIASES = {"dslice": "ds"}

_DEPRECATED = {
    "core_map": "pl.core_map is deprecated; use pl.kernel instead.",
    "reciprocal": "pl.reciprocal is deprecated; it moved to the TPU backend: use "
                  "pallas_tpu.reciprocal (or 1 / x in portable kernels).",
}
_REMOVED = {
    "dot": "pl.dot was removed; use jax.numpy.dot, jax.numpy.einsum or the @ operator "
           "(pallas_triton.dot for Triton-specific options).",
    "debug_checks_enabled": "pl.debug_checks_enabled was removed; use "
                            "pl.enable_debug_checks.value instead.",
}


def _reciprocal(x, *, approx: bool = False, full_range: bool = True):
    del approx, full_range  # the exact reciprocal satisfies both hints
    return 1.0 / x


def __getattr__(name):
    target = _ALIASES.get(name, name)
    if target in _HOME:
        value = getattr(_importlib.import_module(f"{__name__}.{_HOME[target]}"), target)
        globals()[name] = value           # later lookups skip __getattr__
        return value
    if name in _DEPRECATED:
        _warnings.warn(_DEPRECATED[name], DeprecationWarning, stacklevel=2)
        if name == "core_map":
            from pallas_frontend.core_map_launch import core_map
            return core_map
        return _reciprocal
    if name in _REMOVED:
        raise AttributeError(_REMOVED[name])
    raise AttributeError(f"module 'pallas_frontend' has no attribute {name!r}")


__all__ = sorted([*_HOME, *_ALIASES])


def __dir__():
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # what static tools see; at run time the names load lazily
    from pallas_frontend._jax_compat import Slice, ds, run_state
    from pallas_frontend.autotuning import autotune
    from pallas_frontend.autotune_space import search_space, tile_sizes
    from pallas_frontend.cost import estimate_cost
    from pallas_frontend.export import (
        enable_poison_buffers, lower_as_mlir, pallas_export_experimental)
    from pallas_frontend.backend_api import API_VERSION
    from pallas_frontend.block_indices import BlockIndexError
    from pallas_frontend.call_primitive import pallas_call_p
    from pallas_frontend.diagnostics import print_backend_info
    from pallas_frontend.helpers import (
        align_to, broadcast_to, cdiv, empty, empty_like, empty_ref_like, loop, next_power_of_2,
        pad_ref, select_ref, strides_from_shape, when, with_scoped)
    from pallas_frontend.launch import kernel, pallas_call
    from pallas_frontend.output_coverage import UnwrittenOutputError, UnwrittenOutputWarning
    from pallas_frontend.primitives import (
        DeviceIdType, KernelCheckError, SemaphoreDeadlockError, debug_check, debug_print, delay,
        enable_debug_checks,
        get_global, multiple_of, num_programs, program_id, run_scoped, semaphore_read,
        semaphore_signal, semaphore_wait)
    from pallas_frontend.registry import (
        backends, get_backend, register_backend, set_default_backend, which_backend)
    from pallas_frontend.specs import (
        ANY, HOST, BlockDim, BlockSpec, Blocked, BoundedSlice, Buffered, CompilerParams,
        CostEstimate, Element, GridSpec, Indirect, MemoryRef, MemorySpace, RevisitMode, Squeezed,
        no_block_spec, semaphore, squeezed)
    from pallas_frontend.ref_checks import RefIndexError
    from pallas_frontend.tracing import PallasTypeError, PallasUsageError
    dslice = ds


# A PALLAS_FRONTEND_* variable with a bad value (or a misspelt name) warns now,
# not only when the code that reads it first runs (maybe deep inside a kernel call).
from pallas_frontend import env_config as _env_config  # noqa: E402

_env_config.warn_on_bad_settings()
