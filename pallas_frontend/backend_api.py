"""The contract between the frontend and its backends: the one module of the
frontend a plugin imports, besides the public ``pallas_frontend`` API.

A backend sees a kernel only as a ``KernelIR``: frozen, versioned, and free of
the user's Python. This module gathers the contract from the modules that hold
it (each a concept of its own, none importing this one):

- ``contract``: the data types (``KernelIR``, ``BlockMapping``, errors,
  capability tags, versions); a leaf that imports no other frontend module;
- ``backend_base``: the ``Backend`` interface, ``LoweringContext`` and the
  inherited checks;
- ``backend_helpers``: a backend's own primitives, gathered accesses,
  parallel grid axes;
- ``kernel_arrays``: a ``KernelIR`` as plain array code;
- ``run_gate``: interpreted kernel runs one at a time (``RunGate``);
- ``hookspecs``: the pluggy markers, loaded on first use.

Versioning: ``API_VERSION = (major, minor)``. A backend declares the version
it was written against; an unequal major is refused, an older minor is
accepted (new fields and hooks are optional for it).
"""

from __future__ import annotations

from pallas_frontend import contract as _contract
from pallas_frontend.backend_base import (Backend, LoweringContext, check_capabilities,
                                          check_dtypes, check_primitive_owners,
                                          default_seconds_per_call, required_capabilities)
from pallas_frontend.backend_helpers import (def_pure_primitive, gathered_ref_accesses,
                                             interpretable, kernel_primitive, lowering_kernel,
                                             nested_grid,
                                             parallel_grid_axes, primitive_owner, ref_effects,
                                             register_interpret_rule, source_line,
                                             trace_body, tracing_kernel, tracing_kernel_params)
from pallas_frontend.contract import (_iter_equations, BackendCapabilityError,  # noqa: F401
                                      BackendUnavailableError, BlockMapping, KernelIR,
                                      ScopedAllocation, scoped_allocation_of)
from pallas_frontend.kernel_arrays import (block_window, kernel_body_fn, replay_equations,
                                           scratch_structs)
from pallas_frontend.run_gate import RunGate

# The constants, re-bound here so that the API reference shows each with its comment.

#: ``(major, minor)`` of this contract. 1.1: parallel_grid_axes; 1.2:
#: forced_interpret_params; 1.3: conformance_compiler_params, kernel_body_fn,
#: block_window, scratch_structs, CAPABILITY_TAGS; 1.4: ScopedAllocation,
#: capability collective_run_scoped; 1.5: dynamic grids, gathered_ref_accesses,
#: KernelIR.function_name / name_and_src_info; 1.6: replay_equations; 1.7:
#: Backend.adopt_foreign_params; 1.8: nested_grid, tracing_kernel, source_line;
#: 1.9: Backend.seconds_per_call, default_seconds_per_call; 1.10: RunGate;
#: 1.11: lowering_kernel; 1.12: tracing_kernel_params.
API_VERSION = _contract.API_VERSION
#: The pluggy project name that hook markers and the plugin manager share.
PROJECT_NAME = _contract.PROJECT_NAME
#: The entry-point group a backend distribution registers its plugin module under.
ENTRY_POINT_GROUP = _contract.ENTRY_POINT_GROUP
#: The owner recorded for the frontend's own kernel primitives (``kernel_primitive``):
#: every backend may meet them.
FRONTEND_OWNER = _contract.FRONTEND_OWNER
#: The ``KernelIR.metadata`` key the frontend's transformation rules set on a
#: kernel they build (``"jvp"`` for a kernel made by ``jax.jvp``).
TRANSFORM_METADATA_KEY = _contract.TRANSFORM_METADATA_KEY
#: Capability tag -> what a kernel does that needs it. The frontend derives
#: these tags from a kernel (``required_capabilities``); a backend may declare
#: more of its own in ``Backend.capabilities``.
CAPABILITY_TAGS = _contract.CAPABILITY_TAGS

_HOOK_NAMES = ("hookimpl", "hookspec", "BackendHookSpecs")


def __getattr__(name):
    # The pluggy markers load on first use: plugins need them, `import
    # pallas_frontend` does not.
    if name in _HOOK_NAMES:
        from pallas_frontend import hookspecs
        return getattr(hookspecs, name)
    raise AttributeError(f"module 'pallas_frontend.backend_api' has no attribute {name!r}")


__all__ = [
    "API_VERSION", "BackendCapabilityError", "BackendUnavailableError", "Backend", "BlockMapping",
    "CAPABILITY_TAGS", "ENTRY_POINT_GROUP", "FRONTEND_OWNER", "KernelIR", "LoweringContext",
    "PROJECT_NAME", "RunGate", "ScopedAllocation", "TRANSFORM_METADATA_KEY", "block_window",
    "check_capabilities", "check_dtypes", "check_primitive_owners", "def_pure_primitive",
    "default_seconds_per_call",
    "gathered_ref_accesses", "hookimpl", "hookspec", "interpretable", "kernel_body_fn",
    "kernel_primitive", "lowering_kernel", "nested_grid", "parallel_grid_axes",
    "primitive_owner", "ref_effects",
    "register_interpret_rule", "replay_equations", "required_capabilities",
    "scoped_allocation_of", "scratch_structs", "source_line", "trace_body", "tracing_kernel",
    "tracing_kernel_params",
]
