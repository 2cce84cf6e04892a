"""The contract between the frontend and its backends.

A backend sees a kernel only as a ``KernelIR``: frozen, versioned, and free of
the user's Python. Plugins import this module and the public
``pallas_frontend`` API, nothing else from the frontend.

Versioning: ``API_VERSION = (major, minor)``. A backend declares the version
it was written against; an unequal major is refused, an older minor is
accepted (new fields and hooks are optional for it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from pallas_frontend import _jax_compat as jc
from pallas_frontend.kernel_arrays import (block_window, kernel_body_fn, replay_equations,
                                           scratch_structs)
from pallas_frontend.specs import BlockDim, Blocked, BoundedSlice, Buffered, Element, Squeezed

# 1.1: parallel_grid_axes; 1.2: forced_interpret_params; 1.3: conformance_compiler_params,
# kernel_body_fn, block_window, scratch_structs, CAPABILITY_TAGS; 1.4: ScopedAllocation
# (run_scoped collective_axes), capability collective_run_scoped; 1.5: dynamic grids
# (KernelIR.grid entries None, dynamic_grid_axes, num_index_operands, tag "dynamic_grid"),
# gathered_ref_accesses, KernelIR.function_name / name_and_src_info; 1.6: replay_equations
API_VERSION: tuple[int, int] = (1, 6)
PROJECT_NAME = "pallas_frontend"     # pluggy project name (see hookspecs.py)
ENTRY_POINT_GROUP = "pallas_frontend.backends"

_HOOK_NAMES = ("hookimpl", "hookspec", "BackendHookSpecs")


def __getattr__(name):
    # The pluggy markers load on first use: plugins need them, `import
    # pallas_frontend` does not.
    if name in _HOOK_NAMES:
        from pallas_frontend import hookspecs
        return getattr(hookspecs, name)
    raise AttributeError(f"module 'pallas_frontend.backend_api' has no attribute {name!r}")


# --- the kernel as a backend sees it -----------------------------------------

@dataclasses.dataclass(frozen=True, eq=False)
class BlockMapping:
    """How one operand is windowed at each grid point.

    ``index_map`` is a closed jaxpr from the grid indices (one int32 scalar per
    grid axis, batch axes included), followed by the scalar-prefetch Refs if
    any, to one int32 scalar per entry of ``block_dims`` -- two, ``start`` and
    ``size``, for a ``BoundedSlice`` dim. For ``Blocked`` dims the value is a
    block index; for ``Element``, ``Squeezed`` and ``BoundedSlice`` it is an
    element offset.
    """
    origin: str                      # e.g. "args[0]", "outputs[1]['b']": used in messages
    array_shape: tuple[int, ...]
    dtype: np.dtype
    block_dims: tuple[BlockDim, ...]
    index_map: jc.Jaxpr
    index_map_source: str            # "file:line" of the user's index_map
    memory_space: Any = None
    pipeline_mode: Buffered | None = None

    @property
    def block_shape(self) -> tuple[int, ...]:
        """The shape of the kernel-visible Ref (squeezed dims removed)."""
        return tuple(d.block_size for d in self.block_dims if not isinstance(d, Squeezed))

    @property
    def index_map_arity(self) -> int:
        return len(self.index_map.invars)

    @property
    def num_index_outputs(self) -> int:
        return sum(2 if isinstance(d, BoundedSlice) else 1 for d in self.block_dims)


@dataclasses.dataclass(frozen=True, eq=False)
class KernelIR:
    """One kernel launch: everything a backend needs, nothing it must not see.

    ``jaxpr`` invars are, in order: one int32 scalar per grid axis (the
    program ids, batch axes first), then Refs for the scalar-prefetch
    operands, the inputs, the outputs and the scratch buffers. It returns
    nothing. The first ``num_batch_axes`` grid axes come from ``vmap`` and are
    hidden from the kernel's ``pl.program_id``.

    Dynamic grids (API 1.5): ``grid[a]`` is ``None`` for an axis whose size is
    known only at run time (``grid=(n,)`` with ``n`` traced). Then the
    ``pallas_call_p`` operands begin with one int32 scalar per dynamic axis
    (its size, in axis order) before the scalar-prefetch operands, and the
    kernel jaxpr takes the same scalars right after the program ids (what
    ``pl.num_programs`` returns for that axis). Index maps are unchanged.
    A backend that does not handle them refuses the capability
    ``"dynamic_grid"`` (see ``required_capabilities``).
    """
    name: str
    source: str                          # "file:line" of the kernel function
    jaxpr: jc.Jaxpr
    grid: tuple[int | None, ...]
    grid_names: tuple[str, ...] | None
    in_mappings: tuple[BlockMapping, ...]
    out_mappings: tuple[BlockMapping, ...]
    scratch_avals: tuple[jc.AbstractRef, ...] = ()
    num_scalar_prefetch: int = 0
    num_batch_axes: int = 0
    input_output_aliases: tuple[tuple[int, int], ...] = ()
    compiler_params: Any = None
    cost_estimate: Any = None
    metadata: tuple[tuple[str, str], ...] = ()
    debug: bool = False
    api_version: tuple[int, int] = API_VERSION
    function_name: str = ""              # the kernel function's __name__ (API 1.5)

    @property
    def name_and_src_info(self) -> str:
        """JAX's form: ``{name} for kernel function {function} at {file}:{line}``,
        or ``{function} at {file}:{line}`` when no name was given."""
        if self.function_name and self.function_name != self.name:
            return f"{self.name} for kernel function {self.function_name} at {self.source}"
        return f"{self.name} at {self.source}"

    @property
    def mappings(self) -> tuple[BlockMapping, ...]:
        return self.in_mappings + self.out_mappings

    @property
    def out_avals(self) -> tuple[jc.ShapedArray, ...]:
        return tuple(jc.ShapedArray(m.array_shape, m.dtype) for m in self.out_mappings)

    @property
    def num_grid_axes(self) -> int:
        return len(self.grid)

    @property
    def dynamic_grid_axes(self) -> tuple[int, ...]:
        """The grid axes whose size is a run-time operand (API 1.5)."""
        return tuple(a for a, g in enumerate(self.grid) if g is None)

    @property
    def num_index_operands(self) -> int:
        """Leading int32 scalar invars of ``jaxpr``: program ids, then dynamic sizes."""
        return len(self.grid) + len(self.dynamic_grid_axes)

    def replace(self, **changes) -> KernelIR:
        return dataclasses.replace(self, **changes)

    def iter_equations(self):
        """Every equation of the kernel, nested loop and branch bodies included."""
        yield from _iter_equations(self.jaxpr)

    def pretty(self) -> str:
        """A readable dump (what ``debug=True`` prints)."""
        lines = [f"KernelIR v{self.api_version[0]}.{self.api_version[1]} '{self.name}' ({self.source})"
                 + (f" kernel function {self.function_name}"
                    if self.function_name and self.function_name != self.name else ""),
                 f"  grid={self.grid}" + (f" names={self.grid_names}" if self.grid_names else "")
                 + (f" batch_axes={self.num_batch_axes}" if self.num_batch_axes else "")]
        for m in self.mappings:
            dims = ", ".join(str(d) for d in m.block_dims)
            lines.append(f"  {m.origin}: {m.dtype}{list(m.array_shape)} blocks=({dims}) "
                         f"space={m.memory_space} index_map={m.index_map_source}")
        for i, s in enumerate(self.scratch_avals):
            lines.append(f"  scratch[{i}]: {s}")
        if self.input_output_aliases:
            lines.append(f"  aliases (input->output): {dict(self.input_output_aliases)}")
        if self.compiler_params is not None:
            lines.append(f"  compiler_params: {self.compiler_params}")
        lines.append("  kernel jaxpr:")
        lines.extend("    " + ln for ln in str(self.jaxpr).splitlines())
        return "\n".join(lines)


def _iter_equations(jaxpr):
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in jc.sub_jaxprs(eqn):
            yield from _iter_equations(sub)


@dataclasses.dataclass(frozen=True)
class ScopedAllocation:
    """The ``memory_space`` of an ``empty_ref`` equation that
    ``run_scoped(..., collective_axes=...)`` traced: one buffer shared by the
    programs along ``collective_axes`` (e.g. the warpgroups of a Mosaic GPU
    CTA) instead of one per program. ``memory_space`` is the type's own.
    Backends without the capability tag ``collective_run_scoped`` refuse it
    in ``check``. (API 1.3)"""
    memory_space: Any
    collective_axes: tuple[str, ...]


def scoped_allocation_of(eqn) -> ScopedAllocation | None:
    """The ``ScopedAllocation`` an equation carries, if it is a collective scoped allocation."""
    space = eqn.params.get("memory_space") if eqn.primitive.name == "empty_ref" else None
    return space if isinstance(space, ScopedAllocation) else None


# --- primitives owned by a backend -------------------------------------------

FRONTEND_OWNER = "pallas_frontend"
_primitive_owners: dict[jc.Primitive, str] = {}


def kernel_primitive(name: str, *, owner: str, multiple_results: bool = False) -> jc.Primitive:
    """Creates a JAX primitive usable inside kernels and records its owner.

    A backend that meets a primitive owned by another backend rejects the
    kernel in ``Backend.check``, naming the primitive and its owner.
    """
    prim = jc.Primitive(name)
    prim.multiple_results = multiple_results
    _primitive_owners[prim] = owner
    return prim


def primitive_owner(prim: jc.Primitive) -> str | None:
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
    return jc.trace_with_explicit_consts(fun, in_avals, traced_for=traced_for)


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


# --- errors -------------------------------------------------------------------

class BackendCapabilityError(NotImplementedError):
    """A backend cannot take this kernel; raised by ``Backend.check`` before lowering."""


class BackendUnavailableError(RuntimeError):
    """The selected backend is not installed, failed to load, or cannot run here."""


# --- the backend interface ----------------------------------------------------

@dataclasses.dataclass(frozen=True)
class LoweringContext:
    """What ``Backend.lower`` gets besides the kernel."""
    mlir_ctx: Any                 # JAX's LoweringRuleContext
    platform: str
    interpret_params: Any = None

    def lower_fun(self, fun: Callable, *args):
        """Lowers a JAX-traceable ``fun(*args) -> list`` in place of the call."""
        return jc.lower_fun_per_shard(fun, self.mlir_ctx, *args)


class Backend:
    """A kernel backend. Subclass it and hand an instance over through the
    ``pallas_frontend_backend`` hook (or ``pallas_frontend.register_backend``).

    Class attributes describe the backend; ``check`` and ``lower`` do the work.
    """
    name: str = ""
    distribution: str | None = None          # the pip distribution that ships it
    version: str = "0"
    # Required: the backend API this backend was written against (e.g. (1, 2)).
    # A backend that leaves it unset is refused at load with the fix.
    api_version: tuple[int, int] | None = None
    platforms: tuple[str, ...] = ()          # JAX platforms it lowers for: "cpu", "cuda", "rocm", "tpu"
    priority: int = 0                        # highest wins among defaults for a platform
    compiler_params_type: type | None = None
    interpret_params_type: type | None = None
    memory_spaces: tuple[Any, ...] = ()
    capabilities: frozenset[str] = frozenset()
    dtypes: frozenset[str] | None = None     # None: any dtype
    pip_extra: str | None = None             # the pallas-frontend extra that installs it, if any
    # Conformance manifests (``pallas_frontend.testing``): test-name pattern
    # (fnmatch, e.g. "test_jvp*") -> reason. ``conformance_unsupported``: a
    # permanent gap, the test is skipped. ``conformance_xfail``: a known bug,
    # the test must fail (an unexpected pass fails the run).
    conformance_unsupported: Mapping[str, str] = {}
    conformance_xfail: Mapping[str, str] = {}

    def is_available(self) -> tuple[bool, str]:
        """Whether this machine can run the backend; the reason when not."""
        return True, ""

    def check(self, kernel: KernelIR) -> None:
        """Raises ``BackendCapabilityError`` for what this backend cannot take.

        The base check rejects other backends' primitives (unless
        ``accepts_foreign_primitive``), unsupported dtypes and missing
        capabilities; override and call ``super().check(kernel)``.
        """
        check_primitive_owners(self, kernel, accept=self.accepts_foreign_primitive)
        check_dtypes(self, kernel)
        check_capabilities(self, kernel)

    def accepts_foreign_primitive(self, prim: jc.Primitive) -> bool:
        """Whether this backend can run ``prim`` although another backend owns it."""
        return False

    def call_effects(self, kernel: KernelIR, interpret: Any) -> frozenset:
        """JAX effects the launch has beyond the kernel's own (e.g. the ordered
        host callbacks of an interpreter), so that JAX threads tokens into
        ``lower``. Asked when ``interpret`` is this backend's interpret params
        or the kernel's compiler params are this backend's."""
        return frozenset()

    def forced_interpret_params(self) -> Any:
        """The interpret params this backend's own process-wide or scoped
        interpret mode is set to (e.g. ``pallas_tpu.force_tpu_interpret_mode()``),
        or None. While set, a ``pallas_call`` whose ``compiler_params`` are this
        backend's and that passes no ``interpret=`` runs as if it had passed
        ``interpret=<these params>``. (API 1.2)"""
        return None

    def conformance_compiler_params(self) -> Sequence[Any]:
        """Non-default compiler params the conformance suite runs its kernels
        with, besides the defaults of ``call_options``. Default: the
        default-constructed ``compiler_params_type`` with each bool field
        flipped in turn. Override to name the options that matter. (API 1.3)"""
        params_type = self.compiler_params_type
        if params_type is None:
            return []
        try:
            base = params_type()
        except TypeError:       # required fields: the backend must say
            return []
        return [dataclasses.replace(base, **{f.name: not getattr(base, f.name)})
                for f in dataclasses.fields(params_type)
                if f.init and isinstance(getattr(base, f.name), bool)]

    def lower(self, kernel: KernelIR, ctx: LoweringContext, *args) -> Sequence[Any]:
        """Returns the MLIR values of the outputs, one per ``kernel.out_mappings``.

        ``ctx.mlir_ctx`` is JAX's lowering-rule context (``ctx.mlir_ctx.avals_in``
        are the operand types), ``ctx.platform`` the platform being lowered for,
        ``ctx.interpret_params`` the interpret params of the call, if any.
        ``args`` are the MLIR values of the operands: the scalar-prefetch
        operands, then the inputs, in ``kernel.in_mappings`` order (full
        arrays, not blocks). Return a sequence of MLIR values of the output
        arrays' shapes and dtypes. The simplest honest lowering is a JAX
        function: ``ctx.lower_fun(fn, *args)`` with ``fn(*arrays) -> list``
        (``kernel_body_fn``, ``block_window`` and ``scratch_structs`` turn the
        kernel into array code; see docs/backend-authors.md)."""
        raise NotImplementedError(f"backend {self.name!r} does not implement lower()")

    def call_options(self, platform: str) -> dict[str, Any]:
        """The ``pallas_call`` keywords that run a kernel on this backend on
        ``platform`` (used by the conformance suite and ``pallas doctor``).

        Default: its interpret params when it does not serve ``platform``,
        else its default-constructed compiler params, else ``backend=name``.
        Override when the params need arguments.
        """
        if platform not in self.platforms and self.interpret_params_type is not None:
            return {"interpret": self.interpret_params_type()}
        if self.compiler_params_type is not None:
            try:
                return {"compiler_params": self.compiler_params_type()}
            except TypeError:
                pass
        return {"backend": self.name}

    def compile_platform(self) -> str:
        """The platform that compile-only checks (the conformance suite's
        ``lowering`` layer) target; kernels for them are built with
        ``call_options(compile_platform())``. Default: this machine's JAX
        platform. A backend that can compile for its hardware without it
        (e.g. for a TPU topology with libtpu) returns that platform."""
        import jax
        return jax.default_backend()

    def compile_only(self, fn: Callable, *args) -> Any:
        """Lowers and compiles ``jax.jit(fn)`` for ``args`` (arrays or
        ``jax.ShapeDtypeStruct``) on ``compile_platform()``, never running it;
        returns the compiled executable. Override to compile for a target that
        is not this machine; raise ``BackendUnavailableError`` (with the fix)
        when that target cannot be reached here."""
        import jax
        return jax.jit(fn).lower(*args).compile()

    def describe(self) -> dict[str, Any]:
        ok, why = self.is_available()
        return {
            "name": self.name, "distribution": self.distribution, "version": self.version,
            "api_version": ("%d.%d" % tuple(self.api_version)) if self.api_version else None,
            "platforms": list(self.platforms),
            "priority": self.priority, "capabilities": sorted(self.capabilities),
            "available": ok, "unavailable_reason": why,
        }

    def __repr__(self):
        return f"<Backend {self.name} {self.version} platforms={self.platforms}>"


def check_primitive_owners(backend: Backend, kernel: KernelIR,
                           accept: Callable[[jc.Primitive], bool] = lambda prim: False) -> None:
    """Rejects primitives owned by another backend, unless ``accept(prim)``."""
    for eqn in kernel.iter_equations():
        owner = primitive_owner(eqn.primitive)
        if owner is not None and owner not in (FRONTEND_OWNER, backend.name) \
                and not accept(eqn.primitive):
            where = jc.jaxpr_source_line(eqn) or kernel.source
            raise BackendCapabilityError(
                f"Kernel '{kernel.name}' uses primitive '{eqn.primitive.name}' of backend "
                f"'{owner}' at {where}, which backend '{backend.name}' cannot lower. "
                f"Run it with backend '{owner}' (pass its CompilerParams) or use the "
                "portable pallas_frontend API instead.")


def check_dtypes(backend: Backend, kernel: KernelIR) -> None:
    if backend.dtypes is None:
        return
    for m in kernel.mappings:
        if np.dtype(m.dtype).name not in backend.dtypes:
            raise BackendCapabilityError(
                f"Backend '{backend.name}' does not support dtype {np.dtype(m.dtype).name} "
                f"of {m.origin} in kernel '{kernel.name}' ({kernel.source}). "
                f"Supported: {', '.join(sorted(backend.dtypes))}.")


# Capability tags a kernel needs, derived from its IR. A backend declares the
# tags it supports in ``Backend.capabilities``; a backend that declares none is
# not checked (it takes responsibility in its own ``check``). Backends may
# declare more tags of their own (e.g. "atomics", "dma"): the frontend derives
# only these, and the conformance suite's ``@requires`` reads all of them.
CAPABILITY_TAGS: dict[str, str] = {
    "grid": "a grid of at least one axis (the kernel runs more than once, or per program id)",
    "blocked": "a Blocked dim whose block is smaller than its array dim (real windowing)",
    "element": "a pl.Element dim (element offsets, with padding)",
    "squeezed": "a pl.Squeezed dim (None in a block shape)",
    "bounded_slice": "a pl.BoundedSlice dim (a dynamic valid size per block)",
    "scratch": "scratch buffers (scratch_shapes)",
    "aliasing": "input_output_aliases",
    "run_scoped": "pl.run_scoped allocations inside the body",
    "debug_print": "pl.debug_print",
    "debug_check": "pl.debug_check",
    "semaphores": "semaphore primitives",
    "float64": "a float64 operand",
    "loops": "loops in the body (lax.fori_loop / while_loop / scan)",
    "vmap": "batch axes added by jax.vmap",
    "jvp": "a kernel built by jax.jvp from another kernel",
    "dynamic_grid": "a grid size known only at run time (grid=(n,) with n traced)",
}
# metadata entry that the frontend's transformation rules add to a kernel they build
TRANSFORM_METADATA_KEY = "pallas_frontend.transform"

_PRIMITIVE_TAGS = {"run_scoped": "run_scoped", "empty_ref": "run_scoped",
                   "debug_print": "debug_print",
                   "debug_check": "debug_check", "scan": "loops", "while": "loops"}


def required_capabilities(kernel: KernelIR) -> dict[str, str]:
    """Tag -> where in the kernel it is needed (``file:line`` or operand)."""
    need: dict[str, str] = {}
    if len(kernel.grid) > kernel.num_batch_axes:
        need["grid"] = kernel.source
    if kernel.scratch_avals:
        need["scratch"] = kernel.source
    if kernel.input_output_aliases:
        need["aliasing"] = kernel.source
    if kernel.num_batch_axes:
        need["vmap"] = kernel.source
    if kernel.dynamic_grid_axes:
        need["dynamic_grid"] = f"grid {kernel.grid} ({kernel.source})"
    if dict(kernel.metadata).get(TRANSFORM_METADATA_KEY) == "jvp":
        need["jvp"] = kernel.source
    for m in kernel.mappings:
        where = f"{m.origin} ({m.index_map_source or kernel.source})"
        if np.dtype(m.dtype) == np.float64:
            need.setdefault("float64", f"{m.origin} ({kernel.source})")
        dims = list(zip(m.block_dims, m.array_shape))
        # vmap's batch dims are squeezed leading dims: part of "vmap", not "squeezed"
        skip = 0
        while skip < min(kernel.num_batch_axes, len(dims)) and isinstance(dims[skip][0], Squeezed):
            skip += 1
        for d, n in dims[skip:]:
            if isinstance(d, Blocked) and d.block_size < n:
                need.setdefault("blocked", where)
            elif isinstance(d, Element):
                need.setdefault("element", where)
            elif isinstance(d, Squeezed):
                need.setdefault("squeezed", where)
            elif isinstance(d, BoundedSlice):
                need.setdefault("bounded_slice", where)
    for eqn in kernel.iter_equations():
        name = eqn.primitive.name
        tag = "semaphores" if name.startswith("semaphore_") else _PRIMITIVE_TAGS.get(name)
        if tag is not None:
            need.setdefault(tag, jc.jaxpr_source_line(eqn) or kernel.source)
        if scoped_allocation_of(eqn) is not None:
            line = jc.jaxpr_source_line(eqn)
            # the allocation is traced inside pl.run_scoped: point at the kernel instead
            if not line or "pallas_frontend" in line:
                line = kernel.source
            need.setdefault("collective_run_scoped", line)
    return need


def check_capabilities(backend: Backend, kernel: KernelIR) -> None:
    if not backend.capabilities:
        return
    for tag, where in required_capabilities(kernel).items():
        if tag not in backend.capabilities:
            raise BackendCapabilityError(
                f"Backend '{backend.name}' lacks capability '{tag}' that kernel "
                f"'{kernel.name}' needs at {where}. Choose another backend (e.g. "
                "interpret=True) or rewrite the kernel without it.")


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
    from pallas_frontend import grid_analysis   # imports no interpreter, nor this module
    return grid_analysis.parallel_grid_axes(kernel, private_scratch=private_scratch)


__all__ = [
    "API_VERSION", "BackendCapabilityError", "BackendUnavailableError", "Backend", "BlockMapping",
    "CAPABILITY_TAGS", "ENTRY_POINT_GROUP", "FRONTEND_OWNER", "KernelIR", "LoweringContext",
    "PROJECT_NAME", "TRANSFORM_METADATA_KEY", "block_window", "check_capabilities",
    "check_dtypes", "check_primitive_owners", "def_pure_primitive", "gathered_ref_accesses",
    "hookimpl", "hookspec",
    "interpretable", "kernel_body_fn", "kernel_primitive", "parallel_grid_axes",
    "primitive_owner", "ref_effects", "register_interpret_rule", "replay_equations",
    "required_capabilities",
    "scratch_structs", "trace_body",
]
