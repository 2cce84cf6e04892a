"""What a user writes to window operands over a grid: block dims, BlockSpec, GridSpec.

These are plain descriptions; nothing here traces or validates against an
array. ``tracing.py`` turns them, with the operands, into ``BlockMapping``s.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

# the block-dim kinds (re-exported: pallas_frontend.specs.Blocked is the contract's Blocked)
from pallas_frontend.contract import (BlockDim, Blocked, BoundedSlice, Element,  # noqa: F401
                                      Indirect, Squeezed, squeezed)


class PallasUsageError(ValueError):
    """A pallas_call argument is malformed (raised before tracing the kernel)."""


class PallasTypeError(PallasUsageError, TypeError):
    """A pallas_call argument has the wrong type. Both a ValueError (what JAX
    raises) and a TypeError (what the frontend raised before)."""


# --- block dimensions -------------------------------------------------------
# Blocked, Element, Squeezed, BoundedSlice, Indirect: imported above from the
# contract's leaf module, whose BlockMapping speaks in them.


def value_dtype(dtype):
    """``np.dtype(dtype)``, except that a JAX extended dtype (a typed PRNG key's
    ``key<impl>``) stays as it is: key arrays are operands, values and Refs of
    kernels too, their key data handled by JAX (``jax.random.key_data``)."""
    if _is_extended(dtype):
        return dtype
    return np.dtype(dtype)


def _is_extended(dtype) -> bool:
    import jax
    try:
        return jax.dtypes.issubdtype(dtype, jax.dtypes.extended)
    except TypeError:
        return False


def check_dims(shape, what: str) -> tuple[int, ...]:
    """``shape`` as a tuple of non-negative ints, or a ValueError naming ``what``."""
    dims = tuple(shape)
    for d in dims:
        if _is_symbolic(d):
            continue             # a jax.export symbolic dim (b, 8 * b, ...): >= 1 by construction
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0:
            raise ValueError(f"{what} has shape {dims}: every dim must be a non-negative int "
                             f"(got {d!r}).")
    return tuple(d if _is_symbolic(d) else int(d) for d in dims)


def _is_symbolic(d) -> bool:
    if isinstance(d, (int, np.integer)) or not hasattr(d, "__floordiv__"):
        return False
    import jax.export       # public; only reached for non-int dims
    return jax.export.is_symbolic_dim(d)


def _jax_pallas():
    """JAX's public Pallas module, whose spec objects ours interoperate with
    (JAX's fuser makes and takes them); None where JAX has no Pallas."""
    try:
        from jax.experimental import pallas
    except ImportError:
        return None
    return pallas


def _from_jax_dim(dim: Any) -> Any:
    """JAX's own block-dim object (e.g. in a block spec JAX's fuser returned)
    as ours of the same kind; anything else unchanged."""
    jax_pallas = _jax_pallas()
    for kind in (Blocked, Element, Squeezed, BoundedSlice, Indirect):
        jax_kind = getattr(jax_pallas, kind.__name__, None)
        if isinstance(jax_kind, type) and isinstance(dim, jax_kind) and not isinstance(dim, kind):
            return kind(*(getattr(dim, f.name) for f in dataclasses.fields(jax_kind)))
    return dim


def _concrete_int(dim: Any) -> Any:
    """A concrete 0-d integer array (``jnp.int32(8)``, as JAX takes) as its int;
    anything else (a tracer too) unchanged."""
    dtype = getattr(dim, "dtype", None)
    if (dtype is None or isinstance(dim, np.integer) or np.ndim(dim) != 0
            or not np.issubdtype(dtype, np.integer)):
        return dim
    try:
        return int(dim)
    except Exception:      # noqa: BLE001 -- a tracer: refused below as not an int
        return dim


def canonicalize_block_dim(dim: Any, origin: str) -> BlockDim:
    """Turns ``int``/``None``/block-dim objects (ours or JAX's) into a block-dim object."""
    if dim is None:
        return squeezed
    dim = _from_jax_dim(dim)
    if isinstance(dim, (Blocked, Element, Squeezed, BoundedSlice)):
        return dim
    if isinstance(dim, Indirect):
        raise ValueError(
            f"Block shape for {origin} has {dim!r}: indirect (index-array) block dims are taken "
            "by software pipelines (pallas_tpu.emit_pipeline), not by pallas_call. Pass the "
            "indices as an input and gather inside the kernel (x_ref[idx]).")
    dim = _concrete_int(dim)
    if isinstance(dim, (int, np.integer)) and not isinstance(dim, bool):
        if dim <= 0:
            raise ValueError(f"Block shape for {origin} has a non-positive dim {dim}; "
                             "block dims must be positive ints.")
        return Blocked(int(dim))
    raise TypeError(
        f"Unsupported block dimension {dim!r} for {origin}. Allowed: int, None, "
        "pl.Blocked, pl.Element, pl.Squeezed, pl.BoundedSlice.")


def _jax_bases(name: str) -> tuple[type, ...]:
    jax_class = getattr(_jax_pallas(), name, None)
    return (jax_class,) if isinstance(jax_class, type) else ()


# --- memory spaces ----------------------------------------------------------

@dataclasses.dataclass(frozen=True, init=False)
class MemoryRef:
    """A shape and dtype placed in a memory space: a scratch buffer's type.

    ``MemoryRef(shape, dtype, memory_space)``, or JAX's
    ``MemoryRef(inner_aval, memory_space)`` (an abstract value or anything
    with a shape and dtype)."""
    shape: tuple[int, ...]
    dtype: np.dtype
    memory_space: Any

    def __init__(self, shape=None, dtype=None, memory_space=None, *, inner_aval=None):
        if inner_aval is None and hasattr(shape, "shape") and hasattr(shape, "dtype"):
            if memory_space is not None:
                raise TypeError("MemoryRef(inner_aval, memory_space) takes two arguments, "
                                f"got a third ({memory_space!r}).")
            inner_aval, memory_space = shape, dtype
        if inner_aval is not None:
            shape, dtype = inner_aval.shape, inner_aval.dtype
        if shape is None or dtype is None:
            raise TypeError("MemoryRef needs a shape and a dtype: MemoryRef(shape, dtype, "
                            "memory_space) or MemoryRef(inner_aval, memory_space).")
        object.__setattr__(self, "shape", check_dims(shape, f"{memory_space} scratch"))
        object.__setattr__(self, "dtype", value_dtype(dtype))
        object.__setattr__(self, "memory_space", memory_space)

    @property
    def inner_aval(self):
        """The value type inside the buffer, as JAX's MemoryRef names it."""
        import jax
        return jax.core.ShapedArray(self.shape, self.dtype)

    def __matmul__(self, mesh):
        """``space(shape, dtype) @ mesh`` is ``(space @ mesh)(shape, dtype)``,
        as in JAX: the space (a backend's) says what tying it to a mesh means."""
        tie = getattr(type(self.memory_space), "__matmul__", None)
        tied = NotImplemented if tie is None else tie(self.memory_space, mesh)
        return tied if tied is NotImplemented else tied(self.shape, self.dtype)


class MemorySpace(enum.Enum):
    """Device-agnostic memory spaces; backends add their own physical ones.

    ``MemorySpace.ANY(shape, dtype)`` makes a ``MemoryRef`` scratch type. Each
    member equals JAX's ``pl.MemorySpace`` member of the same name (JAX's fuser
    marks PRNG-key operands with ``KEY``).
    """
    ANY = "any"          # leave the operand where it lives; the kernel sees it whole
    DEFAULT = "default"  # the backend's default for pipelined blocks
    HOST = "host"
    ERROR = "error"      # JAX's: checkify error state
    INDEX = "index"      # JAX's: scalar-prefetch operands
    KEY = "key"          # JAX's: PRNG keys

    def __call__(self, shape, dtype) -> MemoryRef:
        return MemoryRef(tuple(shape), value_dtype(dtype), self)

    def like(self, x) -> MemoryRef:
        """``ANY.like(x)``: a buffer of ``x``'s shape and dtype (an array,
        ShapeDtypeStruct or abstract value) in this space."""
        if getattr(x, "shape", None) is None or getattr(x, "dtype", None) is None:
            raise TypeError(f"pl.MemorySpace.{self.name}.like(x): x must have a shape and a "
                            f"dtype (an array, jax.ShapeDtypeStruct or abstract value), got {x!r}.")
        return self(x.shape, x.dtype)

    def __eq__(self, other):
        if isinstance(other, MemorySpace):
            return self is other
        jax_space = getattr(_jax_pallas(), "MemorySpace", None)
        if isinstance(jax_space, type) and isinstance(other, jax_space):
            return self.value == other.value
        # JAX 0.11's pl.HOST is XLA's host memory space (jax.memory.Space.Host)
        import jax
        xla_space = getattr(getattr(jax, "memory", None), "Space", None)
        if isinstance(xla_space, type) and isinstance(other, xla_space):
            return self is MemorySpace.HOST and other.name.lower() == "host"
        return NotImplemented

    def __hash__(self):           # as JAX's enum hashes its member of the same name
        return hash(self._name_)

    def __str__(self):
        return self.value      # "any", "default", "host": as JAX prints Ref<default>{...}


ANY = MemorySpace.ANY
HOST = MemorySpace.HOST


# --- pipelining -------------------------------------------------------------

class RevisitMode(enum.Enum):
    """``Buffered(revisit=...)``: whether an output block may be revisited only
    at the next grid step (``IMMEDIATE``, the default) or at any later one
    (``ANY``: the backend restores the buffer as needed). JAX's values; inputs
    ignore it."""
    IMMEDIATE = "immediate"
    ANY = "any"


@dataclasses.dataclass(frozen=True)
class Buffered:
    """Multi-buffering depth of a pipelined operand (a backend hint).

    ``buffer_count`` is an int, or (JAX 0.12) an ``(in_count, out_count)``
    pair for an operand that is both read and written by a pipeline."""
    buffer_count: int | tuple[int, int]
    use_lookahead: bool = False
    revisit: RevisitMode | None = None
    prefetched_count: int = 0

    def __post_init__(self):
        count = self.buffer_count
        counts = count if isinstance(count, tuple) else (count,)
        if isinstance(count, list) or len(counts) not in (1, 2) or not all(
                isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in counts):
            raise ValueError(f"Buffered.buffer_count must be an int >= 1 or a pair of them "
                             f"(in_count, out_count), got {count!r}")


# --- specs ------------------------------------------------------------------

@dataclasses.dataclass
class BlockSpec(*_jax_bases("BlockSpec")):
    """How one operand is windowed at each grid point.

    ``block_shape=None`` means the whole array; ``index_map=None`` means block
    index 0 along every dim. A subclass of JAX's ``BlockSpec`` (which wraps
    ``index_map`` so that JAX's fuser can compare specs), so JAX's fuser takes it.
    """
    block_shape: Sequence[int | None | BlockDim] | None = None
    index_map: Callable[..., Any] | None = None
    memory_space: Any = dataclasses.field(default=None, kw_only=True)
    pipeline_mode: Buffered | None = None      # third positional, as in JAX

    def replace(self, **changes) -> BlockSpec:
        """A copy of this spec with the named fields changed."""
        return dataclasses.replace(self, **changes)

    def __post_init__(self):
        mode = self.pipeline_mode
        if mode is not None and not hasattr(mode, "buffer_count"):
            raise TypeError(
                f"BlockSpec's third positional argument is pipeline_mode (e.g. pl.Buffered(2)), "
                f"got {mode!r}; memory_space is keyword-only: BlockSpec(..., memory_space=...).")
        jax_post_init = getattr(super(), "__post_init__", None)
        if jax_post_init is not None:
            jax_post_init()

    # ``to_block_mapping`` is attached by ``tracing`` (it traces the index map).


def from_jax_block_spec(spec: Any) -> Any:
    """JAX's own ``BlockSpec`` (not ours) as ours, with JAX's generic memory
    space and ``Buffered`` as ours, so a pallas_call takes specs written with
    ``jax.experimental.pallas``; anything else unchanged."""
    jax_pallas = _jax_pallas()
    if isinstance(spec, BlockSpec) or not isinstance(spec, getattr(jax_pallas, "BlockSpec", ())):
        return spec
    space, mode = spec.memory_space, spec.pipeline_mode
    if isinstance(space, jax_pallas.MemorySpace) and space.value in MemorySpace._value2member_map_:
        space = MemorySpace(space.value)
    if isinstance(mode, jax_pallas.Buffered):
        fields = {f.name: getattr(mode, f.name) for f in dataclasses.fields(mode)}
        if fields.get("revisit") is not None:
            fields["revisit"] = RevisitMode(fields["revisit"].value)
        mode = Buffered(**fields)
    return BlockSpec(spec.block_shape, spec.index_map, memory_space=space, pipeline_mode=mode)


class _NoBlockSpec:
    def __repr__(self):
        return "no_block_spec"


# JAX's own object where JAX has Pallas: its fuser tests specs with ``is``.
no_block_spec: Any = getattr(_jax_pallas(), "no_block_spec", None) or _NoBlockSpec()

# JAX's dtype class of regular semaphores, for jnp.issubdtype(ref.dtype,
# pl.semaphore): a backend whose semaphore Refs report JAX's semaphore dtypes
# answers True (pallas_tpu's do); None where JAX has no Pallas.
semaphore: Any = getattr(_jax_pallas(), "semaphore", None)


@dataclasses.dataclass(init=False)
class GridSpec:
    """The grid, the in/out BlockSpec trees and the scratch shapes, packed.

    ``grid`` is an int, a tuple of ints, or a named grid ``(("i", 4), ("j", 2))``;
    a size may be a traced integer scalar (a dynamic grid dim, known at run time).
    """
    grid: tuple[int, ...]
    grid_names: tuple[str, ...] | None
    in_specs: Any
    out_specs: Any
    scratch_shapes: Any
    num_scalar_prefetch: int = 0

    def __init__(self, grid: Any = (), in_specs: Any = no_block_spec,
                 out_specs: Any = no_block_spec, scratch_shapes: Any = ()):
        self.grid, self.grid_names = normalize_grid(grid)
        if in_specs is not no_block_spec and not isinstance(in_specs, (list, tuple)):
            raise PallasTypeError(f"`in_specs` must be a tuple or a list (one entry per "
                                  f"kernel input). Found: {in_specs!r}")
        self.in_specs = tuple(in_specs) if isinstance(in_specs, list) else in_specs
        self.out_specs = tuple(out_specs) if isinstance(out_specs, list) else out_specs
        self.scratch_shapes = scratch_shapes
        self.num_scalar_prefetch = 0


def normalize_grid(grid: Any) -> tuple[tuple[int, ...], tuple[str, ...] | None]:
    """An int, a tuple of ints, or a named grid -> (sizes, names or None)."""
    if isinstance(grid, (int, np.integer)) and not isinstance(grid, bool):
        grid = (grid,)
    if not isinstance(grid, (tuple, list)):
        raise TypeError(f"Grid must be an int or a tuple of ints, got {grid!r}.")
    names = None
    if grid and all(isinstance(g, (tuple, list)) for g in grid):
        if not all(len(g) == 2 and isinstance(g[0], str) for g in grid):
            raise TypeError(f"A named grid must be a tuple of (name, size) pairs, got {grid!r}.")
        names = tuple(g[0] for g in grid)
        if len(set(names)) != len(names):
            raise ValueError(f"Grid axis names must be distinct, got {names}.")
        grid = tuple(g[1] for g in grid)
    sizes = []
    for g in grid:
        if _is_symbolic(g):
            sizes.append(g)      # symbolic under jax.export: its size is an operand
            continue
        if (traced := _traced_size(g)) is not None:
            sizes.append(traced)  # known at run time: an operand too
            continue
        if hasattr(g, "dtype") and np.size(g) == 1 and np.issubdtype(g.dtype, np.integer):
            # a concrete array scalar (or one-element array, as JAX); through NumPy, since
            # a jax.Array captured by a jit being traced would be staged by jnp's reshape
            g = int(np.asarray(g).reshape(()))
        if isinstance(g, bool) or not isinstance(g, (int, np.integer)):
            raise TypeError(
                f"Grid must be a tuple of integers, got {tuple(grid)!r}: element {g!r} is a "
                f"{type(g).__name__}. Give Python ints (e.g. pl.cdiv(n, block)), a jax.export "
                "symbolic dim or, for a size known only at run time, a traced int32 scalar.")
        if g < 0:
            raise ValueError(f"Grid sizes must be non-negative, got {tuple(grid)!r}.")
        if g > np.iinfo(np.int32).max:   # program ids are int32 scalars
            raise ValueError(f"Grid sizes must fit in int32 (at most 2**31 - 1), got "
                             f"{tuple(grid)!r}: program ids are int32. Split the axis in two.")
        sizes.append(int(g))
    return tuple(sizes), names


def _traced_size(g):
    """``g`` as a traced integer scalar (a dynamic grid size), or None where
    ``g`` is not traced. A one-element array (e.g. ``int32[1]`` read from an
    SMEM operand) is taken as its element, as JAX takes it."""
    import jax   # only reached for grids that are not plain ints
    if not isinstance(g, jax.core.Tracer):
        return None
    aval = g.aval
    if math.prod(aval.shape) != 1 or not np.issubdtype(aval.dtype, np.integer):
        raise TypeError(f"A dynamic grid size must be an integer scalar (or a one-element "
                        f"integer array), got {aval.str_short()}.")
    return g if aval.shape == () else jax.numpy.reshape(g, ())


# --- backend parameters -----------------------------------------------------

@dataclasses.dataclass(frozen=True)
class CompilerParams:
    """The base of every backend's compiler-params dataclass.

    A backend subclasses it (a frozen dataclass); the type of the object passed
    as ``pallas_call(compiler_params=...)`` selects the backend.
    """
    #: name of the backend that owns this params type; set by subclasses.
    BACKEND: Any = dataclasses.field(default=None, init=False, repr=False, compare=False)

    def replace(self, **changes):
        """A copy of these params with the named fields changed (the type kept)."""
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True)
class CostEstimate:
    """A cost hint passed to the compiler: all fields are ints."""
    flops: int
    transcendentals: int
    bytes_accessed: int
    remote_bytes_transferred: int = 0

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"CostEstimate.{f.name} must be an int, got {v!r}.")

    def to_json(self) -> bytes:
        """The estimate as JSON bytes, ``{"flops": ..., ...}`` (JAX's encoding)."""
        fields = ", ".join(f'"{f.name}": {getattr(self, f.name)}' for f in dataclasses.fields(self))
        return ("{" + fields + "}").encode()
