"""The contract's data types: what a backend is handed, what it declares, what it raises.

A leaf: this module imports no other module of the frontend, not even for
typing (``tests/test_import_graph.py`` checks it), so every frontend module
can import it without closing a circle. Its neighbours, each importing it:

- ``backend_base``: the ``Backend`` interface, ``LoweringContext`` and the
  checks every backend inherits (capabilities, dtypes, primitive owners);
- ``backend_helpers``: for writing a backend's primitives and schedule;
- ``kernel_arrays``: a ``KernelIR`` as plain array code.

Plugins import none of them directly: ``pallas_frontend.backend_api``
re-exports all of it and stays the one import path of the contract.

Versioning: ``API_VERSION = (major, minor)``. A backend declares the version
it was written against; an unequal major is refused, an older minor is
accepted (new fields and hooks are optional for it).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from jax.core import ShapedArray
    from jax.extend.core import Jaxpr

# 1.1: parallel_grid_axes; 1.2: forced_interpret_params; 1.3: conformance_compiler_params,
# kernel_body_fn, block_window, scratch_structs, CAPABILITY_TAGS; 1.4: ScopedAllocation
# (run_scoped collective_axes), capability collective_run_scoped; 1.5: dynamic grids
# (KernelIR.grid entries None, dynamic_grid_axes, num_index_operands, tag "dynamic_grid"),
# gathered_ref_accesses, KernelIR.function_name / name_and_src_info; 1.6: replay_equations;
# 1.7: Backend.adopt_foreign_params; 1.8: nested_grid, tracing_kernel, source_line;
# 1.9: Backend.seconds_per_call (the timing hook of pl.autotune); 1.10: RunGate (interpreted
# kernel runs one at a time, for interpreters that keep a run's state in module globals)
# 1.11: lowering_kernel (whether a kernel is being lowered on this thread)
# 1.12: tracing_kernel_params (the params of the kernel being traced on this thread)
API_VERSION: tuple[int, int] = (1, 12)
PROJECT_NAME = "pallas_frontend"     # pluggy project name (see hookspecs.py)
ENTRY_POINT_GROUP = "pallas_frontend.backends"

FRONTEND_OWNER = "pallas_frontend"    # owner of the frontend's own kernel primitives
# metadata entry that the frontend's transformation rules add to a kernel they build
TRANSFORM_METADATA_KEY = "pallas_frontend.transform"

# --- block dimensions -------------------------------------------------------
# Each kind subclasses JAX's public class of that kind (jax.experimental.pallas)
# and compares equal to it, so JAX's fuser (block-spec pull/push) takes ours and
# ours take what it returns.

def _jax_kind(name: str) -> tuple[type, ...]:
    """JAX's public block-dim class ``name`` as a base tuple; empty without JAX's Pallas."""
    try:
        from jax.experimental import pallas as jax_pallas
    except ImportError:
        return ()
    kind = getattr(jax_pallas, name, None)
    return (kind,) if isinstance(kind, type) else ()


class _SameKindAsJax:
    """Equality and hash by kind and fields, across our class and JAX's."""
    _peers: tuple[type, ...] = ()      # set below: the kind, and JAX's class of it

    def __eq__(self, other):
        if not isinstance(other, self._peers):
            return NotImplemented
        return _fields(self) == _fields(other)

    def __hash__(self):               # the hash JAX's frozen dataclass gives the same fields
        return hash(_fields(self))


def _fields(dim) -> tuple:
    return tuple(getattr(dim, f.name) for f in dataclasses.fields(dim))


@dataclasses.dataclass(frozen=True, eq=False)
class Blocked(_SameKindAsJax, *_jax_kind("Blocked")):
    """The default kind: the index_map returns a *block index* ``i``; the block
    covers elements ``[i * block_size, (i + 1) * block_size)``."""
    block_size: int

    def __post_init__(self):
        object.__setattr__(self, "block_size", _positive_size(self.block_size, "Blocked"))

    def __str__(self):
        return f"Blocked({self.block_size})"


@dataclasses.dataclass(frozen=True, eq=False)
class Element(_SameKindAsJax, *_jax_kind("Element")):
    """The index_map returns an *element offset* into the array virtually
    padded by ``padding = (low, high)`` elements. Reads of the padding are
    unspecified (the interpreter gives NaN, or the lowest int)."""
    block_size: int
    padding: tuple[int, int] = (0, 0)

    def __post_init__(self):
        object.__setattr__(self, "block_size", _positive_size(self.block_size, "Element"))
        lo, hi = self.padding
        if lo < 0 or hi < 0:
            raise ValueError(f"Element padding must be non-negative, got {self.padding}")
        object.__setattr__(self, "padding", (int(lo), int(hi)))


@dataclasses.dataclass(frozen=True, eq=False)
class Squeezed(_SameKindAsJax, *_jax_kind("Squeezed")):
    """A size-1 dim removed from the kernel's Ref; ``None`` in a block shape
    means the same. The index_map returns the element index."""

    @property
    def block_size(self) -> int:
        """Always 1: the dim is one element of the array."""
        return 1


squeezed = Squeezed()


@dataclasses.dataclass(frozen=True, eq=False)
class BoundedSlice(_SameKindAsJax, *_jax_kind("BoundedSlice")):
    """The index_map returns ``pl.ds(start, size)`` in elements, with
    ``size <= block_size``; the kernel sees a Ref of ``block_size``."""
    block_size: int

    def __post_init__(self):
        object.__setattr__(self, "block_size", _positive_size(self.block_size, "BoundedSlice"))


@dataclasses.dataclass(frozen=True, eq=False)
class Indirect(_SameKindAsJax, *_jax_kind("Indirect")):
    """A dim indexed by an array of ``block_size`` indices (a gather for
    inputs, a scatter for outputs). As in JAX, only software pipelines take
    it (e.g. ``pallas_tpu.emit_pipeline``); ``pallas_call`` block shapes refuse it."""
    block_size: int

    def __repr__(self):
        return f"Indirect({self.block_size})"


BlockDim = Blocked | Element | Squeezed | BoundedSlice | Indirect
for _kind in (Blocked, Element, Squeezed, BoundedSlice, Indirect):
    _kind._peers = (_kind, *_kind.__bases__[1:])
del _kind


def _positive_size(size, kind: str) -> int:
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size <= 0:
        raise ValueError(f"pl.{kind}({size!r}): the block size must be a positive int "
                         f"(the number of elements the block spans), e.g. pl.{kind}(128).")
    return int(size)


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
    index_map: Jaxpr                 # closed: its consts ride along
    index_map_source: str            # "file:line" of the user's index_map
    memory_space: Any = None
    pipeline_mode: Any = None        # a pallas_frontend.Buffered, or None
    # Outputs only: the space out_shape placed the whole array in
    # (``MemorySpace.X(shape, dtype)``), None for a plain ShapeDtypeStruct.
    # Optional (a backend reads it with getattr): JAX tells XLA to allocate such
    # an output there, where ``memory_space`` says only where blocks are seen.
    array_memory_space: Any = None

    @property
    def block_shape(self) -> tuple[int, ...]:
        """The shape of the kernel-visible Ref (squeezed dims removed)."""
        return tuple(d.block_size for d in self.block_dims if not isinstance(d, Squeezed))

    @property
    def index_map_arity(self) -> int:
        """How many scalars ``index_map`` takes: the grid indices, then the
        scalar-prefetch Refs."""
        return len(self.index_map.invars)

    @property
    def num_index_outputs(self) -> int:
        """How many int32 scalars ``index_map`` returns: one per block dim, two
        (start, size) for a ``BoundedSlice`` dim."""
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
    jaxpr: Jaxpr
    grid: tuple[int | None, ...]
    grid_names: tuple[str, ...] | None
    in_mappings: tuple[BlockMapping, ...]
    out_mappings: tuple[BlockMapping, ...]
    scratch_avals: tuple[Any, ...] = ()  # jax AbstractRefs
    num_scalar_prefetch: int = 0
    num_batch_axes: int = 0
    input_output_aliases: tuple[tuple[int, int], ...] = ()
    compiler_params: Any = None
    cost_estimate: Any = None
    metadata: tuple[tuple[str, str | int | float], ...] = ()
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
        """The inputs' block mappings, then the outputs'."""
        return self.in_mappings + self.out_mappings

    @property
    def out_avals(self) -> tuple[ShapedArray, ...]:
        """The shapes and dtypes of the outputs, in ``out_mappings`` order."""
        from jax.core import ShapedArray
        return tuple(ShapedArray(m.array_shape, m.dtype) for m in self.out_mappings)

    @property
    def num_grid_axes(self) -> int:
        """``len(grid)``: the batch axes from ``vmap`` included."""
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
        """A copy with the named fields changed (the IR is frozen), e.g. a
        backend's ``kernel.replace(compiler_params=params)``."""
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
    """Every equation of ``jaxpr``, then (depth first) those of the jaxprs in its params."""
    # jax's public name for what _jax_compat.sub_jaxprs wraps: no compat import in the leaf
    from jax.extend.core import jaxprs_in_params
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in jaxprs_in_params(eqn.params):
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


# --- errors -------------------------------------------------------------------

class BackendCapabilityError(NotImplementedError):
    """A backend cannot take this kernel; raised by ``Backend.check`` before lowering."""


class BackendUnavailableError(RuntimeError):
    """The selected backend is not installed, failed to load, or cannot run here."""


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
