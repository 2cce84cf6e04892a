"""Helpers for writing a backend: its own kernel primitives (owned, interpretable,
with bodies traced inside a kernel), and what a backend asks of a kernel beyond
its data (gathered Ref accesses, which grid axes may run in parallel), and the
grid position for a body a backend traces itself inside a kernel.

Part of the contract: plugins reach these through ``pallas_frontend.backend_api``.
Imports the contract's data types (``contract``), the one compat module and the
grid analysis, none of which imports this module back.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence

from pallas_frontend import _jax_compat as jc
from pallas_frontend import axis_binding, frames, scopes
from pallas_frontend import grid_context as _grid
from pallas_frontend.contract import FRONTEND_OWNER, KernelIR

# --- primitives owned by a backend -------------------------------------------

_primitive_owners: dict[jc.Primitive, str] = {}


def kernel_primitive(name: str, *, owner: str, multiple_results: bool = False) -> jc.Primitive:
    """Creates a JAX primitive usable inside kernels and records its owner.

    A backend that meets a primitive owned by another backend rejects the
    kernel in ``Backend.check``, naming the primitive and its owner.
    """
    frames.hide_caller_package()   # the plugin's frames are not the kernel author's line
    prim = jc.Primitive(name)
    prim.multiple_results = multiple_results
    _primitive_owners[prim] = owner
    return prim


def primitive_owner(prim: jc.Primitive) -> str | None:
    """The owner ``kernel_primitive`` recorded for ``prim`` (a backend's name or
    ``FRONTEND_OWNER``); ``None`` for JAX's own primitives."""
    return _primitive_owners.get(prim)


_interpretable: set[jc.Primitive] = set()


def register_interpret_rule(prim: jc.Primitive, rule: Callable | None = None) -> None:
    """Lets the reference interpreter run a backend's primitive.

    For a primitive that reads or writes Refs, ``rule(ctx, *args, **params)
    -> (new_ref_values, outputs)`` is a state-discharge rule: it receives Ref
    operands as arrays and returns their new values (``None`` where unchanged)
    and the primitive's outputs; ``ctx.in_avals`` holds the operand types. A
    pure primitive needs no rule (pass none): its own JAX lowering runs it.
    Either way the primitive is then accepted by the interpreter's ``check``.
    """
    if rule is not None:
        jc.register_discharge_rule(prim)(rule)
    _interpretable.add(prim)


def interpretable(prim: jc.Primitive) -> bool:
    """Whether the reference interpreter can run ``prim`` (see ``register_interpret_rule``)."""
    return prim in _interpretable


def trace_body(fun: Callable, in_avals, *, traced_for: str = "pallas sub-kernel"):
    """Traces ``fun(*args) -> list`` over ``in_avals`` (Ref types allowed) into
    ``(jaxpr, consts)``; the jaxpr takes ``*consts, *args``. For backends whose
    primitives carry a body traced inside a kernel (e.g. a software pipeline):
    what the body closes over becomes explicit operands of the primitive."""
    jaxpr, consts = jc.trace_with_explicit_consts(fun, in_avals, traced_for=traced_for)
    # a pl.run_scoped in the body: in its flat form, the one backends know
    jaxpr, consts = scopes.inline_scopes_explicit(jaxpr, consts, in_avals, traced_for=traced_for)
    # lax.axis_index of the kernel's axes: the body closes over the kernel's value
    return axis_binding.close_over_outer_axes(jaxpr, consts, in_avals, traced_for=traced_for)


def def_pure_primitive(prim: jc.Primitive, *, impl: Callable, abstract_eval: Callable,
                       batch_rule: Callable | None = None, jvp_rule: Callable | None = None):
    """Gives a side-effect-free kernel primitive its JAX rules in one call:
    ``impl`` (a JAX-traceable function, also used as its lowering on every
    platform), ``abstract_eval``, and optionally vmap and JVP rules."""
    prim.def_impl(impl)
    prim.def_abstract_eval(abstract_eval)
    jc.mlir.register_lowering(prim, jc.mlir.lower_fun(impl, multiple_results=prim.multiple_results))
    if batch_rule is not None:
        jc.batching.primitive_batchers[prim] = batch_rule
    if jvp_rule is not None:
        jc.ad.primitive_jvps[prim] = jvp_rule
    return prim


def gathered_ref_accesses(kernel: KernelIR) -> list[tuple[str, str]]:
    """Ref reads and writes indexed by integer arrays (gathers and scatters,
    ``x_ref[idx]``, ``x_ref.at[jnp.arange(n)]``), as ``(primitive, file:line)``.
    A backend that cannot lower them refuses the kernel naming the line. (API 1.5)"""
    found = []
    for eqn in kernel.iter_equations():
        first = jc.ref_indexers(eqn)
        if first is not None and any(getattr(v.aval, "shape", ()) != ()
                                     for v in eqn.invars[first:]):
            found.append((eqn.primitive.name, jc.jaxpr_source_line(eqn) or kernel.source))
    return found


def ref_effects(*, reads: Sequence[int] = (), writes: Sequence[int] = ()) -> set:
    """The effects of a backend primitive that reads/writes its Ref operands
    (by operand position), for ``Primitive.def_effectful_abstract_eval``."""
    return ({jc.state_types.ReadEffect(i) for i in reads}
            | {jc.state_types.WriteEffect(i) for i in writes})


def parallel_grid_axes(kernel: KernelIR, *, private_scratch: bool = False) -> tuple[bool, ...]:
    """Per grid axis: whether grid points may run independently along it.

    The frontend's grid analysis (``pallas_frontend/grid_analysis.py``, the
    verdict the interpreter also uses):
    points differing along the parallel axes write disjoint regions of every
    output, the body has no ordered effects, ``dimension_semantics`` does not
    declare the axis sequential, and scratch carries no observed state from
    one point to the next. The sequential axes must run in row-major order.

    ``private_scratch=True`` drops the scratch condition, for a backend that
    gives each parallel program its own scratch: that backend must then prove
    itself that a program never observes scratch it did not write.
    """
    if kernel.dynamic_grid_axes:     # index maps cannot be evaluated ahead: run in order
        return (False,) * len(kernel.grid)
    # on first use: the analysis pulls in the block tables (NumPy evaluation of index maps)
    from pallas_frontend import grid_analysis
    return grid_analysis.parallel_grid_axes(kernel, private_scratch=private_scratch)


# --- a body a backend traces itself, inside a kernel --------------------------

def nested_grid(indices: Sequence, sizes: Sequence):
    """A context manager for a backend that traces a body of its own inside a kernel
    (a pipeline's per-step body): within it, ``pl.program_id(a)`` is ``indices[a]``
    and ``pl.num_programs(a)`` is ``sizes[a]``; the kernel's own grid returns after."""
    return _grid.grid_context(indices, sizes, None)


def tracing_kernel() -> bool:
    """Whether a ``pallas_call`` / ``pl.kernel`` body is being traced on this thread
    (so a backend's public function can tell a call inside a kernel from one outside)."""
    return _grid.current_grid() is not None


def tracing_kernel_params():
    """The compiler params of the kernel whose body is being traced on this thread
    (as given to ``pallas_call`` / ``pl.kernel``, completed by its mesh), or None
    outside a kernel trace: a backend's public function can tell which kind of
    kernel it is called in (e.g. a TPU SparseCore kernel from a TensorCore one)."""
    return _grid.current_kernel_params() if tracing_kernel() else None


_lowering = threading.local()


@contextlib.contextmanager
def lowering_kernel_scope():
    """Marks this thread as lowering a kernel (the frontend's ``pallas_call`` lowering
    rule enters it around ``Backend.lower``)."""
    _lowering.depth = getattr(_lowering, "depth", 0) + 1
    try:
        yield
    finally:
        _lowering.depth -= 1


def lowering_kernel() -> bool:
    """Whether a kernel is being lowered on this thread, by any backend or interpreter
    (so a primitive that exists only inside kernels can refuse an XLA lowering outside
    one, as JAX's TPU primitives do). (API 1.11)"""
    return getattr(_lowering, "depth", 0) > 0


# --- where in the user's code ---------------------------------------------------

def source_line(eqn) -> str:
    """``file:line`` of the user's code that traced a kernel equation ('' if unknown):
    the innermost frame outside JAX, the frontend and every loaded backend's package,
    so a refusal names the user's call, not the library function that bound it."""
    return jc.jaxpr_source_line(eqn)
