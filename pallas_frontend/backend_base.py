"""The backend interface: ``Backend`` (what a plugin subclasses), the
``LoweringContext`` its ``lower`` receives, and the checks every backend
inherits (other backends' primitives, dtypes, capability tags), which
``Backend.check`` runs before any lowering work.

Part of the contract: plugins reach it through ``pallas_frontend.backend_api``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pallas_frontend import _jax_compat as jc
from pallas_frontend.backend_helpers import primitive_owner
from pallas_frontend.contract import (FRONTEND_OWNER, TRANSFORM_METADATA_KEY,
                                      BackendCapabilityError, Blocked, BoundedSlice, Element,
                                      KernelIR, Squeezed, scoped_allocation_of)

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
        ``interpret=<these params>``; so does one with no ``compiler_params``
        when no other loaded backend has its interpret mode on. (API 1.2)"""
        return None

    def adopt_foreign_params(self, obj: Any) -> Any:
        """``obj``, a params object of another library passed as ``interpret=``
        or ``compiler_params=`` (e.g. JAX's own ``InterpretGPUParams``, which
        code written for JAX passes), as this backend's own params object with
        the same meaning; None when this backend does not read it. The frontend
        asks every backend before refusing such an object. (API 1.7)"""
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

    def seconds_per_call(self, fn: Callable, args: Sequence[Any]) -> float:
        """Seconds one call of ``fn(*args)`` takes on the device that holds
        ``args`` (arrays); ``pl.autotune`` compares candidates by it. ``fn`` is
        a pure JAX function. Default: measured in a device loop
        (``pallas_frontend.device_timing``: ``n`` dependent calls inside one
        jitted ``fori_loop``, per call ``(T(3n) - T(n)) / 2n``, so launch and
        sync costs cancel). Override when your device has a better clock (a
        profiler's kernel time). Never called while tracing. (API 1.9)"""
        return default_seconds_per_call(fn, args)

    def describe(self) -> dict[str, Any]:
        """The backend as JSON-ready data: name, distribution, version, api
        version, platforms, priority, capabilities, and whether it is available
        on this machine, with the reason when not."""
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


def default_seconds_per_call(fn: Callable, args: Sequence[Any]) -> float:
    """``Backend.seconds_per_call``'s default: the device-loop time of ``fn(*args)``."""
    from pallas_frontend import device_timing
    return device_timing.time_per_call(fn, *args).seconds


def check_primitive_owners(backend: Backend, kernel: KernelIR,
                           accept: Callable[[jc.Primitive], bool] = lambda prim: False) -> None:
    """Rejects primitives owned by another backend, unless ``accept(prim)``."""
    for eqn in kernel.iter_equations():
        owner = primitive_owner(eqn.primitive)
        if owner is not None and owner not in (FRONTEND_OWNER, backend.name) \
                and not accept(eqn.primitive):
            where = jc.jaxpr_source_line(eqn) or kernel.source
            err = BackendCapabilityError(
                f"Kernel '{kernel.name}' uses primitive '{eqn.primitive.name}' of backend "
                f"'{owner}' at {where}, which backend '{backend.name}' (the one running "
                f"this kernel) cannot lower. {FOREIGN_PRIMITIVE_ADVICE.format(owner=owner)}")
            err.primitive_owner = owner   # the launch puts the owner's own names in the advice
            raise err


# The launch replaces it by the owner's CompilerParams/InterpretParams names when
# the owner is installed (call_primitive.name_owner_in_advice).
def public_class_name(cls) -> str:
    """``pkg.Name`` when the top-level package exports the class (a backend's
    params type, for advice), else its full path."""
    import sys
    if cls is None:
        return "its CompilerParams"
    top = cls.__module__.split(".")[0]
    if getattr(sys.modules.get(top), cls.__qualname__, None) is cls:
        return f"{top}.{cls.__qualname__}"
    return f"{cls.__module__}.{cls.__qualname__}"


FOREIGN_PRIMITIVE_ADVICE = ("Run it with backend '{owner}' on its hardware (its "
                            "CompilerParams), or on any machine in its interpreter (its "
                            "InterpretParams), or write the step with the portable "
                            "pallas_frontend API.")


def check_dtypes(backend: Backend, kernel: KernelIR) -> None:
    """Rejects an operand whose dtype is not in ``backend.dtypes`` (``None``:
    any dtype), naming the operand, the kernel and the supported dtypes."""
    if backend.dtypes is None:
        return
    for m in kernel.mappings:
        if _dtype_name(m.dtype) not in backend.dtypes:
            raise BackendCapabilityError(
                f"Backend '{backend.name}' does not support dtype {_dtype_name(m.dtype)} "
                f"of {m.origin} in kernel '{kernel.name}' ({kernel.source}). "
                f"Supported: {', '.join(sorted(backend.dtypes))}.")


def _dtype_name(dtype) -> str:
    """'float32', ...; a typed PRNG key's extended dtype by its name ('key<fry>')."""
    try:
        return np.dtype(dtype).name
    except TypeError:
        return str(dtype)


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
    # the user's prefetch operands (a dynamic grid may add its sizes operand: "dynamic_grid")
    prefetched = kernel.num_scalar_prefetch - ("pallas_frontend.grid_sizes_operand"
                                               in dict(kernel.metadata))
    if prefetched > 0:
        need["scalar_prefetch"] = f"num_scalar_prefetch={prefetched} ({kernel.source})"
    if dict(kernel.metadata).get(TRANSFORM_METADATA_KEY) == "jvp":
        need["jvp"] = kernel.source
    for m in kernel.mappings:
        where = f"{m.origin} ({m.index_map_source or kernel.source})"
        if _dtype_name(m.dtype) == "float64":
            need.setdefault("float64", f"{m.origin} ({kernel.source})")
        dims = list(zip(m.block_dims, m.array_shape))
        # vmap's batch dims are squeezed leading dims: part of "vmap", not "squeezed"
        skip = 0
        while skip < min(kernel.num_batch_axes, len(dims)) and isinstance(dims[skip][0], Squeezed):
            skip += 1
        for d, n in dims[skip:]:
            if isinstance(d, Blocked) and _smaller(d.block_size, n):
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
        if tag is not None and tag not in need:     # the first use names the line
            need[tag] = jc.jaxpr_source_line(eqn) or kernel.source
        if scoped_allocation_of(eqn) is not None and "collective_run_scoped" not in need:
            line = jc.jaxpr_source_line(eqn)
            # the allocation is traced inside pl.run_scoped: point at the kernel instead
            if not line or "pallas_frontend" in line:
                line = kernel.source
            need["collective_run_scoped"] = line
    return need


def _smaller(block: Any, n: Any) -> bool:
    """block < n; a jax.export symbolic dim is only ordered against itself."""
    if isinstance(block, (int, np.integer)) and isinstance(n, (int, np.integer)):
        return block < n
    return not (block == n)


def check_capabilities(backend: Backend, kernel: KernelIR) -> None:
    """Rejects the kernel when it needs a tag of ``required_capabilities`` that
    ``backend.capabilities`` lacks, naming the tag and where the kernel needs
    it. A backend that declares no capabilities is not checked here."""
    if not backend.capabilities:
        return
    for tag, where in required_capabilities(kernel).items():
        if tag not in backend.capabilities:
            raise BackendCapabilityError(
                f"Backend '{backend.name}' lacks capability '{tag}' that kernel "
                f"'{kernel.name}' needs at {where}. Choose another backend (e.g. "
                "interpret=True) or rewrite the kernel without it.")
