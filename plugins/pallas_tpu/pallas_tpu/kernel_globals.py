"""``pl.get_global`` on TPU: each call site becomes one more scratch buffer of
the rebuilt ``pallas_call``. Mosaic keeps a kernel's scratch for the whole
grid of one core, so every grid point sees the same Ref (a semaphore starts
at 0, other buffers uninitialised), as the frontend's interpreter has it.

Scratch is per TensorCore: a grid split across cores (``parallel`` axes on a
megacore chip, ``core_parallel``, several simulated cores) would give each
core its own copy, silently. Such kernels are refused before lowering.
"""

from __future__ import annotations

import contextlib
import contextvars

from pallas_frontend.backend_api import BackendCapabilityError, KernelIR

from pallas_tpu.spaces import scratch_type_of_aval

_bound: contextvars.ContextVar = contextvars.ContextVar("pallas_tpu_globals", default=None)


def global_equations(kernel: KernelIR) -> list:
    """The ``get_global`` equations of the kernel, nested bodies included."""
    return [e for e in kernel.iter_equations() if e.primitive.name == "get_global"]


def check_single_core(kernel: KernelIR, num_cores: int = 1) -> None:
    if not global_equations(kernel):
        return
    sem = tuple(getattr(kernel.compiler_params, "dimension_semantics", None) or ())
    split = [d for d in sem if d != "arbitrary"]
    why = None
    if split:
        why = f"its grid has {split[0]!r} axes, which Mosaic may split across TensorCores"
    elif kernel.num_batch_axes:
        why = "jax.vmap added parallel grid axes to it"
    elif num_cores > 1:
        why = f"TPU interpret mode runs it on {num_cores} simulated cores"
    if why is not None:
        raise BackendCapabilityError(
            f"Backend 'tpu' cannot lower pl.get_global in kernel '{kernel.name}' "
            f"({kernel.source}): {why}, and each core would get its own copy of the global. "
            "Mark every grid axis \"arbitrary\" (the default) and run it on one core.")


def scratch_types(kernel: KernelIR) -> list:
    """One ``pltpu`` scratch type per ``get_global`` call site, in order."""
    return [scratch_type_of_aval(e.params["aval"]) for e in global_equations(kernel)]


@contextlib.contextmanager
def binding(kernel: KernelIR, refs):
    """While the body is replayed, each call site's equation maps to its Ref."""
    token = _bound.set({id(e): r for e, r in zip(global_equations(kernel), refs)})
    try:
        yield
    finally:
        _bound.reset(token)


def replay_get_global(eqn, invals):
    refs = _bound.get() or {}
    if id(eqn) not in refs:
        raise NotImplementedError(
            "pallas_tpu: this pl.get_global call was not found when the kernel was rebuilt "
            "(inside a body this backend re-traces); call it at the top of the kernel body.")
    return refs[id(eqn)]


def _register():
    from pallas_tpu import evaluate
    evaluate.register_frontend_rule("get_global", replay_get_global)


_register()
