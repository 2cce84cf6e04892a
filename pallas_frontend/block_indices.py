"""Evaluate every index_map over the whole static grid, before anything runs.

The result, one integer table per operand and dim, gives (1) the check that
every block touches the array (JAX clamps silently; we raise), and (2) the
element offsets the interpreter slices at. Index maps are tiny integer
programs, so they are evaluated with NumPy, vectorized over the grid; a
primitive without a NumPy rule falls back to JAX on the host.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import jax
import numpy as np

from pallas_frontend import _jax_compat as jc
from pallas_frontend.specs import Blocked, BoundedSlice, Element, Squeezed

if TYPE_CHECKING:   # the contract imports this module (through grid_analysis); not back
    from pallas_frontend.backend_api import BlockMapping, KernelIR


class BlockIndexError(IndexError, ValueError):
    """An index_map selects a block that lies wholly outside its array."""


@dataclasses.dataclass(frozen=True)
class BlockTable:
    """Element offsets of one operand's block at every grid point.

    ``starts[d]`` and ``sizes[d]`` have the grid's shape; offsets are in the
    coordinates of the array padded by ``pad_low`` (Element padding).
    """
    mapping: BlockMapping
    starts: tuple[np.ndarray, ...]
    sizes: tuple[np.ndarray, ...]      # valid sizes (BoundedSlice) or the block size
    pad_low: tuple[int, ...]

    @property
    def block_sizes(self) -> tuple[int, ...]:
        return tuple(d.block_size for d in self.mapping.block_dims)


def grid_coordinates(grid: tuple[int, ...]) -> list[np.ndarray]:
    """One int32 array per axis, each of the grid's shape (row-major order)."""
    if not grid:
        return []
    return [a.astype(np.int32) for a in np.meshgrid(*[np.arange(g) for g in grid], indexing="ij")]


def block_tables(kernel: KernelIR) -> tuple[BlockTable, ...]:
    """Tables for inputs then outputs. Requires index maps without prefetch refs."""
    coords = grid_coordinates(kernel.grid)
    return tuple(_table(m, coords, kernel.grid) for m in kernel.mappings)


def _table(m: BlockMapping, coords, grid) -> BlockTable:
    outs = evaluate_index_map(m.index_map, coords, grid)
    starts, sizes, pad_low = [], [], []
    it = iter(outs)
    for dim in m.block_dims:
        v = next(it)
        if isinstance(dim, Blocked):
            starts.append(v * dim.block_size)
            sizes.append(np.full(v.shape, dim.block_size, np.int64))
            pad_low.append(0)
        elif isinstance(dim, Element):
            starts.append(v)
            sizes.append(np.full(v.shape, dim.block_size, np.int64))
            pad_low.append(dim.padding[0])
        elif isinstance(dim, Squeezed):
            starts.append(v)
            sizes.append(np.ones(v.shape, np.int64))
            pad_low.append(0)
        elif isinstance(dim, BoundedSlice):
            size = next(it)
            starts.append(v)
            sizes.append(size)
            pad_low.append(0)
        else:  # pragma: no cover - specs canonicalize every dim
            raise TypeError(dim)
    return BlockTable(m, tuple(starts), tuple(sizes), tuple(pad_low))


def check_block_ranges(kernel: KernelIR, tables=None) -> tuple[BlockTable, ...]:
    """Raises ``BlockIndexError`` naming operand, grid point and index for the
    first block with no element inside its (padded) array."""
    tables = block_tables(kernel) if tables is None else tables
    for t in tables:
        m = t.mapping
        for d, (dim, start, size) in enumerate(zip(m.block_dims, t.starts, t.sizes)):
            extent = m.array_shape[d]
            if isinstance(dim, Element):
                extent += dim.padding[0] + dim.padding[1]
            if isinstance(dim, BoundedSlice):
                bad_size = (size < 0) | (size > dim.block_size)
                if bad_size.any():
                    point = _first(bad_size)
                    raise BlockIndexError(
                        f"{m.origin}: index_map ({m.index_map_source}) returned pl.ds(start, size) "
                        f"with size {int(size[point])} at grid point {point}, but BoundedSlice "
                        f"dim {d} allows sizes in [0, {dim.block_size}].")
            bad = (start < 0) | (start >= extent) if extent > 0 else np.zeros(start.shape, bool)
            if bad.any():
                point = _first(bad)
                raise BlockIndexError(_range_message(m, d, dim, start[point], extent, point))
    return tables


def _first(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0]) if mask.ndim else ()


def _range_message(m: BlockMapping, d, dim, start, extent, point) -> str:
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

def _convert(x, *, new_dtype, **_):
    return np.asarray(x).astype(np.int64 if np.issubdtype(new_dtype, np.integer) else new_dtype)


def _div(x, y):  # lax.div rounds toward zero
    q = np.abs(x) // np.abs(y)
    return np.where((x < 0) != (y < 0), -q, q)


def _rem(x, y):  # lax.rem takes the sign of the dividend
    return x - _div(x, y) * y


_NP_RULES = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": _div, "rem": _rem,
    "max": np.maximum, "min": np.minimum, "neg": np.negative, "abs": np.abs,
    "sign": np.sign, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal, "and": np.logical_and,
    "or": np.logical_or, "not": np.logical_not,
    "convert_element_type": _convert,
    "select_n": lambda p, *cases: np.choose(np.asarray(p).astype(np.int64), np.broadcast_arrays(*cases)),
    "clamp": lambda lo, x, hi: np.clip(x, lo, hi),
    "multiple_of": lambda x, **_: x,
    "squeeze": lambda x, **_: x,
    "shift_right_arithmetic": np.right_shift,
    "shift_left": np.left_shift,
}


def evaluate_index_map(jaxpr: jc.Jaxpr, coords: list[np.ndarray], grid) -> list[np.ndarray]:
    """Values of the index map's outputs at every grid point (grid-shaped int64)."""
    shape = tuple(grid)
    try:
        outs = _np_eval(jaxpr, [c.astype(np.int64) for c in coords])
    except _NoNumpyRule:
        outs = _jax_eval(jaxpr, coords)
    return [np.broadcast_to(np.asarray(o, np.int64), shape) for o in outs]


class _NoNumpyRule(Exception):
    pass


def _np_eval(jaxpr: jc.Jaxpr, args):
    env = {}

    def read(a):
        return np.int64(a.val) if isinstance(a, jc.Literal) and np.ndim(a.val) == 0 and \
            np.issubdtype(np.asarray(a.val).dtype, np.integer) else (
            np.asarray(a.val) if isinstance(a, jc.Literal) else env[a])

    for v, c in zip(jaxpr.constvars, jaxpr.consts):
        env[v] = np.asarray(c)
    for v, a in zip(jaxpr.invars, args):
        env[v] = a
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "pjit" or name == "closed_call" or name == "jit":
            inner = eqn.params.get("jaxpr") or eqn.params.get("call_jaxpr")
            outs = _np_eval(inner, [read(x) for x in eqn.invars])
        elif name in _NP_RULES:
            fn = _NP_RULES[name]
            vals = [read(x) for x in eqn.invars]
            if name in ("convert_element_type", "multiple_of", "squeeze"):
                outs = [fn(*vals, **eqn.params)]
            else:
                outs = [fn(*vals)]
        else:
            raise _NoNumpyRule(name)
        for v, o in zip(eqn.outvars, outs):
            env[v] = o
    return [read(v) for v in jaxpr.outvars]


def _jax_eval(jaxpr: jc.Jaxpr, coords):
    flat = [c.reshape(-1) for c in coords]
    with jax.ensure_compile_time_eval():
        fn = jax.vmap(lambda *idx: jc.eval_jaxpr(jaxpr, *idx)) if flat else (
            lambda: jc.eval_jaxpr(jaxpr))
        outs = fn(*flat)
    shape = coords[0].shape if coords else ()
    return [np.asarray(o).reshape(shape) for o in outs]
