"""Evaluate every index_map over the whole static grid, before anything runs.

The result, one integer table per operand and dim, gives (1) the check that
every block touches the array (JAX clamps silently; we raise), and (2) the
element offsets the interpreter slices at. Index maps are tiny integer
programs, so they are evaluated with NumPy, vectorized over the grid; a
primitive without a NumPy rule falls back to JAX on the host.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING

import jax
import numpy as np

from pallas_frontend import _jax_compat as jc
from pallas_frontend.affine_maps import Affine, affine_outputs
from pallas_frontend.specs import Blocked, BoundedSlice, Element, Squeezed

if TYPE_CHECKING:   # backend_api imports this module (through grid_analysis); not back
    from pallas_frontend.contract import BlockMapping, KernelIR


class BlockIndexError(IndexError, ValueError):
    """An index_map selects a block that lies wholly outside its array."""


@dataclasses.dataclass(frozen=True)
class BlockTable:
    """Element offsets of one operand's block at every grid point.

    ``starts[d]`` and ``sizes[d]`` have the grid's shape; offsets are in the
    coordinates of the array padded by ``pad_low`` (Element padding). When the
    index map is affine in the grid indices (``affine_maps``), ``start_maps``
    and ``size_maps`` give them in closed form and the grid-shaped tables are
    only built if someone asks for them.
    """
    mapping: BlockMapping
    grid: tuple[int, ...]
    pad_low: tuple[int, ...]
    start_maps: tuple[Affine, ...] | None = None
    size_maps: tuple[Affine, ...] | None = None
    tables: tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]] | None = dataclasses.field(
        default=None, compare=False, repr=False)

    @property
    def block_sizes(self) -> tuple[int, ...]:
        return tuple(d.block_size for d in self.mapping.block_dims)

    @property
    def is_affine(self) -> bool:
        return self.start_maps is not None

    @property
    def num_points(self) -> int:
        return int(np.prod(self.grid, dtype=np.int64))

    @functools.cached_property
    def _materialized(self):
        if self.tables is not None:
            return self.tables
        if self.is_affine:
            return (tuple(a.over(self.grid) for a in self.start_maps),
                    tuple(a.over(self.grid) for a in self.size_maps))
        return _enumerate(self.mapping, self.grid, 0, self.num_points, self.grid)

    @property
    def starts(self) -> tuple[np.ndarray, ...]:
        return self._materialized[0]

    @property
    def sizes(self) -> tuple[np.ndarray, ...]:
        return self._materialized[1]

    def start_bounds(self) -> list[tuple[int, int]]:
        """Per dim, (min, max) of the block start over the grid (grid non-empty)."""
        if self.is_affine:
            return [a.bounds(self.grid) for a in self.start_maps]
        return [(int(s.min()), int(s.max())) for s in self.starts]


# Above this many grid points a non-affine index map is checked chunk by chunk.
_CHUNK_POINTS = 1 << 20


def grid_coordinates(grid: tuple[int, ...]) -> list[np.ndarray]:
    """One int32 array per axis, each of the grid's shape (row-major order)."""
    if not grid:
        return []
    return [a.astype(np.int32) for a in np.meshgrid(*[np.arange(g) for g in grid], indexing="ij")]


def block_tables(kernel: KernelIR) -> tuple[BlockTable, ...]:
    """Tables for inputs then outputs. Requires index maps without prefetch refs."""
    return tuple(_table(m, tuple(kernel.grid)) for m in kernel.mappings)


def _pad_low(m: BlockMapping) -> tuple[int, ...]:
    return tuple(d.padding[0] if isinstance(d, Element) else 0 for d in m.block_dims)


def block_positions(m: BlockMapping, outs, full):
    """(starts, sizes) per dim from the index map's outputs; ``full(v)`` makes a
    constant of the same kind as ``v``."""
    starts, sizes = [], []
    it = iter(outs)
    for dim in m.block_dims:
        v = next(it)
        if isinstance(dim, Blocked):
            starts.append(v * dim.block_size if not isinstance(v, Affine) else
                          v.scaled(dim.block_size))
            sizes.append(full(v, dim.block_size))
        elif isinstance(dim, (Element, Squeezed)):
            starts.append(v)
            sizes.append(full(v, 1 if isinstance(dim, Squeezed) else dim.block_size))
        elif isinstance(dim, BoundedSlice):
            starts.append(v)
            sizes.append(next(it))
        else:  # pragma: no cover - specs canonicalize every dim
            raise TypeError(dim)
    return tuple(starts), tuple(sizes)


def _table(m: BlockMapping, grid) -> BlockTable:
    affine = affine_outputs(m.index_map, grid)
    if affine is not None:
        n = len(grid)
        starts, sizes = block_positions(m, affine, lambda v, k: Affine(k, (0,) * n))
        return BlockTable(m, grid, _pad_low(m), starts, sizes)
    num = int(np.prod(grid, dtype=np.int64))
    tables = _enumerate(m, grid, 0, num, grid) if num <= _CHUNK_POINTS else None
    return BlockTable(m, grid, _pad_low(m), tables=tables)


def _enumerate(m: BlockMapping, grid, lo: int, hi: int, shape):
    """(starts, sizes) at the row-major grid points ``lo..hi``, reshaped to ``shape``."""
    flat = np.arange(lo, hi, dtype=np.int64)
    coords = [c.astype(np.int32) for c in np.unravel_index(flat, grid)] if grid else []
    outs = evaluate_index_map(m.index_map, coords, (hi - lo,) if grid else ())
    starts, sizes = block_positions(m, outs, lambda v, k: np.full(v.shape, k, np.int64))
    return (tuple(np.asarray(s).reshape(shape) for s in starts),
            tuple(np.asarray(s).reshape(shape) for s in sizes))


def check_block_ranges(kernel: KernelIR, tables=None) -> tuple[BlockTable, ...]:
    """Raises ``BlockIndexError`` naming operand, grid point and index for the
    first block with no element inside its (padded) array.

    Affine index maps are checked in closed form; others point by point, in
    chunks of the grid so that memory stays bounded."""
    tables = block_tables(kernel) if tables is None else tables
    for t in tables:
        problem = _affine_problem(t) if t.is_affine else _enumerated_problem(t)
        if problem:
            raise BlockIndexError(problem)
    return tables


def _extent(m: BlockMapping, d: int, dim) -> int:
    extent = m.array_shape[d]
    if isinstance(dim, Element):
        extent += dim.padding[0] + dim.padding[1]
    return extent


def _size_message(m, d, dim, size, point) -> str:
    return (f"{m.origin}: index_map ({m.index_map_source}) returned pl.ds(start, size) "
            f"with size {int(size)} at grid point {point}, but BoundedSlice "
            f"dim {d} allows sizes in [0, {dim.block_size}].")


def _affine_problem(t: BlockTable) -> str:
    m, grid = t.mapping, t.grid
    if any(g == 0 for g in grid):
        return ""
    for d, (dim, start, size) in enumerate(zip(m.block_dims, t.start_maps, t.size_maps)):
        if isinstance(dim, BoundedSlice):
            point = size.first_outside(grid, 0, dim.block_size)
            if point is not None:
                return _size_message(m, d, dim, _value_at(size, point), point)
        extent = _extent(m, d, dim)
        point = start.first_outside(grid, 0, extent - 1) if extent > 0 else None
        if point is not None:
            return _range_message(m, d, dim, _value_at(start, point), extent, point)
    return ""


def _value_at(a: Affine, point) -> int:
    return a.const + sum(c * i for c, i in zip(a.coefs, point))


def _enumerated_problem(t: BlockTable) -> str:
    """The message for the first violation (dim by dim, then row-major), or ''."""
    m, grid = t.mapping, t.grid
    num = t.num_points
    step = num if t.tables is not None else _CHUNK_POINTS
    first: dict[tuple[int, str], str] = {}
    for lo in range(0, num, max(step, 1)):
        hi = min(num, lo + step)
        if t.tables is not None:
            starts = [s.reshape(-1) for s in t.tables[0]]
            sizes = [s.reshape(-1) for s in t.tables[1]]
        else:
            starts, sizes = _enumerate(m, grid, lo, hi, (hi - lo,))
        for d, (dim, start, size) in enumerate(zip(m.block_dims, starts, sizes)):
            if isinstance(dim, BoundedSlice) and (d, "size") not in first:
                bad = (size < 0) | (size > dim.block_size)
                if bad.any():
                    k = int(np.argmax(bad))
                    first[(d, "size")] = _size_message(m, d, dim, size[k], _point(lo + k, grid))
            extent = _extent(m, d, dim)
            if extent > 0 and (d, "start") not in first:
                bad = (start < 0) | (start >= extent)
                if bad.any():
                    k = int(np.argmax(bad))
                    first[(d, "start")] = _range_message(m, d, dim, start[k], extent,
                                                         _point(lo + k, grid))
    for d in range(len(m.block_dims)):
        for kind in ("size", "start"):
            if (d, kind) in first:
                return first[(d, kind)]
    return ""


def _point(flat: int, grid) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat, grid)) if grid else ()


def _range_message(m: BlockMapping, d, dim, start, extent, point) -> str:
    return _jax_phrase(m, dim, start) + _our_range_message(m, d, dim, start, extent, point)


def _jax_phrase(m: BlockMapping, dim, start) -> str:
    """JAX's words for this error (code that matches on them keeps working)."""
    kind = "output" if m.origin.startswith("outputs") else "input"
    idx = int(start) // dim.block_size if isinstance(dim, Blocked) else int(start)
    return f"Out-of-bounds block index {idx} for {kind} {m.origin}. "


def _our_range_message(m: BlockMapping, d, dim, start, extent, point) -> str:
    if isinstance(dim, Blocked):
        idx = int(start) // dim.block_size
        nblocks = -(-extent // dim.block_size)
        return (
            f"{m.origin}: the index_map ({m.index_map_source}) returned block index {idx} for "
            f"dim {d} at grid point {point}, but that dim has {nblocks} block(s) of "
            f"{dim.block_size} (array shape {m.array_shape}); valid block indices are "
            f"0..{nblocks - 1}. Blocked index maps return block indices, not element offsets: "
            f"return i, not i * {dim.block_size}. (Use pl.Element(...) in block_shape if you "
            "mean element offsets.)")
    kind = type(dim).__name__
    return (f"{m.origin}: the index_map ({m.index_map_source}) returned element offset "
            f"{int(start)} for {kind} dim {d} at grid point {point}, outside [0, {extent}) "
            f"(array shape {m.array_shape}). {kind} index maps return element offsets.")


# --- a NumPy evaluator for integer index-map programs ------------------------
# Index maps run in the dtypes of their jaxpr (int32 grid indices, so int32
# arithmetic that wraps on overflow), and every backend computes block indices
# that way. The evaluator therefore computes each operation exactly in a wider
# type and wraps the result to the operation's own dtype, with XLA's rules for
# the corner cases (division by zero, shifts by the bit width or more), so the
# range check sees the indices that will run: `((i + 2) << 30) >> 20` is -2048
# here as on the device, not 2048.

def _wide(x):
    x = np.asarray(x)
    if x.dtype == np.bool_ or x.dtype.itemsize == 8:
        return x
    return x.astype(np.int64) if np.issubdtype(x.dtype, np.integer) else x


def _bits(dtype) -> int:
    return np.dtype(dtype).itemsize * 8


def _div(x, y, dt):  # lax.div: rounds toward zero; x / 0 is -1, MIN / -1 wraps to MIN
    safe = np.where(y == 0, 1, y)
    q = np.abs(x) // np.abs(safe)
    q = np.where((x < 0) != (safe < 0), -q, q)
    return np.where(y == 0, -1, q)


def _rem(x, y, dt):  # lax.rem: the sign of the dividend; x % 0 is x
    safe = np.where(y == 0, 1, y)
    return np.where(y == 0, x, x - _div(x, safe, dt) * safe)


def _shift_left(x, s, dt):
    n = _bits(dt)
    ok = (s >= 0) & (s < n)
    mask = (1 << n) - 1 if n < 64 else -1
    return np.where(ok, np.left_shift(x & mask, np.where(ok, s, 0)), 0)


def _shift_right_arithmetic(x, s, dt):
    n = _bits(dt)
    ok = (s >= 0) & (s < n)
    return np.where(ok, np.right_shift(x, np.where(ok, s, 0)), np.where(x < 0, -1, 0))


def _shift_right_logical(x, s, dt):
    n = _bits(dt)
    ok = (s >= 0) & (s < n)
    unsigned = x & ((1 << n) - 1) if n < 64 else x.astype(np.uint64)
    return np.where(ok, np.right_shift(unsigned, np.where(ok, s, 0)), 0)


def _binary(fn):
    return lambda x, y, dt: fn(x, y)


def _unary(fn):
    return lambda x, dt: fn(x)


_NP_RULES = {
    "add": _binary(np.add), "sub": _binary(np.subtract), "mul": _binary(np.multiply),
    "div": _div, "rem": _rem,
    "max": _binary(np.maximum), "min": _binary(np.minimum), "neg": _unary(np.negative),
    "abs": _unary(np.abs), "sign": _unary(np.sign), "lt": _binary(np.less),
    "le": _binary(np.less_equal), "gt": _binary(np.greater), "ge": _binary(np.greater_equal),
    "eq": _binary(np.equal), "ne": _binary(np.not_equal),
    "and": _binary(np.bitwise_and), "or": _binary(np.bitwise_or), "xor": _binary(np.bitwise_xor),
    "not": lambda x, dt: np.logical_not(x) if x.dtype == np.bool_ else np.invert(x),
    "convert_element_type": _unary(lambda x: x),
    "select_n": lambda p, *cases_dt: np.choose(np.asarray(p).astype(np.int64),
                                               np.broadcast_arrays(*cases_dt[:-1])),
    "clamp": lambda lo, x, hi, dt: np.clip(x, lo, hi),
    "multiple_of": _unary(lambda x: x),
    "squeeze": _unary(lambda x: x),
    "shift_left": _shift_left,
    "shift_right_arithmetic": _shift_right_arithmetic,
    "shift_right_logical": _shift_right_logical,
}


def _wrap(x, dtype):
    """``x`` (exact, in a wide type) as a value of ``dtype``: integers wrap."""
    dtype = np.dtype(dtype)
    x = np.asarray(x)
    if dtype == np.bool_:
        return x.astype(np.bool_)
    with np.errstate(over="ignore"):
        return x.astype(dtype)


def evaluate_index_map(jaxpr: jc.Jaxpr, coords: list[np.ndarray], grid) -> list[np.ndarray]:
    """Values of the index map's outputs at every grid point (grid-shaped int64),
    computed with the wrapping integer semantics the index map runs with."""
    shape = tuple(grid)
    try:
        outs = _np_eval(jaxpr, [np.asarray(c, np.int32) for c in coords])
    except _NoNumpyRule:
        outs = _jax_eval(jaxpr, coords)
    return [np.broadcast_to(np.asarray(o).astype(np.int64), shape) for o in outs]


class _NoNumpyRule(Exception):
    pass


def _is_exact_dtype(dtype) -> bool:
    dtype = np.dtype(dtype)
    return dtype == np.bool_ or np.issubdtype(dtype, np.integer)


def _np_eval(jaxpr: jc.Jaxpr, args):
    env = {}

    def read(a):
        if isinstance(a, jc.Literal):
            return _wrap(a.val, a.aval.dtype)
        return env[a]

    for v, c in zip(jaxpr.constvars, jaxpr.consts):
        if not _is_exact_dtype(v.aval.dtype):
            raise _NoNumpyRule("float constant")
        env[v] = _wrap(c, v.aval.dtype)
    for v, a in zip(jaxpr.invars, args):
        env[v] = _wrap(a, v.aval.dtype)
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if not all(_is_exact_dtype(v.aval.dtype) for v in (*eqn.invars, *eqn.outvars)):
            raise _NoNumpyRule(name)   # floats: JAX's own rounding, on the host
        if name in ("pjit", "closed_call", "jit"):
            outs = _np_eval_closed(eqn, [read(x) for x in eqn.invars])
        elif name in _NP_RULES:
            vals = [_wide(read(x)) for x in eqn.invars]
            dt = eqn.invars[-1].aval.dtype if name == "select_n" else eqn.invars[0].aval.dtype
            with np.errstate(over="ignore"):
                outs = [_NP_RULES[name](*vals, dt)]
        else:
            raise _NoNumpyRule(name)
        for v, o in zip(eqn.outvars, outs):
            env[v] = _wrap(o, v.aval.dtype)
    return [read(v) for v in jaxpr.outvars]


def _np_eval_closed(eqn, args):
    inner = eqn.params.get("jaxpr") or eqn.params.get("call_jaxpr")
    if hasattr(inner, "consts") and hasattr(inner, "jaxpr") and not hasattr(inner, "eqns"):
        inner = jc.with_consts(inner.jaxpr, inner.consts) if inner.consts else inner.jaxpr
    return _np_eval(inner, args)


def _jax_eval(jaxpr: jc.Jaxpr, coords):
    flat = [c.reshape(-1) for c in coords]
    with jax.ensure_compile_time_eval():
        fn = jax.vmap(lambda *idx: jc.eval_jaxpr(jaxpr, *idx)) if flat else (
            lambda: jc.eval_jaxpr(jaxpr))
        outs = fn(*flat)
    shape = coords[0].shape if coords else ()
    return [np.asarray(o).reshape(shape) for o in outs]
