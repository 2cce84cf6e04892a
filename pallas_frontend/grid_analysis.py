"""Which grid axes are independent, decided at trace time from the block tables.

Shared by the contract (``backend_api.parallel_grid_axes``) and the interpreter;
it imports neither (only the contract's leaf ``contract``, for types).

The interpreter's meaning is sequential: grid points in row-major order, with
output blocks and scratch carrying values from one point to the next. A set
``P`` of axes may instead run as one batched evaluation per point of the other
axes ``S`` (still in row-major order) when the result cannot differ:

- every output: two grid points whose ``P`` coordinates differ touch disjoint
  regions of it. Then all points touching an element share their ``P``
  coordinates, and among those the batched schedule keeps the sequential
  (row-major over ``S``) order. An aliased output only starts as its input's
  values. An input whose Ref the body writes carries its updates to later
  points as an output does (its block is written back), so it takes part in
  this condition too; the other inputs carry nothing.
- scratch: its incoming value can reach no output of the discharged kernel body
  (a body that overwrites scratch wholly before reading it discharges to one
  that ignores the incoming value), so the state it carries is never observed.
- the body has no effects (a debug print's order would change).

The condition only weakens when axes are removed, so ``P`` is grown greedily.
Compiler params that declare dimension semantics may only take axes away.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from pallas_frontend import _jax_compat as jc
from pallas_frontend.discharge import discharge_kernel_body
from pallas_frontend.block_indices import BlockTable, check_block_ranges
from pallas_frontend.specs import Blocked, BoundedSlice, Squeezed

if TYPE_CHECKING:   # the contract's leaf: backend_api imports this module, never the reverse
    from pallas_frontend.contract import KernelIR

# Above this many distinct blocks an unaligned output is not painted element by
# element; its axes are then simply kept sequential (always sound).
_MAX_PAINTED_BLOCKS = 4096
# Grids are enumerated only up to this many points (affine maps are decided in closed form first).
_MAX_ENUMERATED_POINTS = 1 << 20


@dataclasses.dataclass(frozen=True)
class GridAnalysis:
    """The verdict for one kernel: which axes run batched, and why not the rest."""
    grid: tuple[int, ...]
    parallel_axes: tuple[int, ...]
    reasons: tuple[str, ...]          # per axis: "" when parallel, else why sequential

    @property
    def sequential_axes(self) -> tuple[int, ...]:
        return tuple(a for a in range(len(self.grid)) if a not in self.parallel_axes)

    def describe(self) -> str:
        lines = [f"grid {self.grid}: parallel axes {self.parallel_axes}, "
                 f"sequential axes {self.sequential_axes}"]
        lines += [f"  axis {a}: sequential ({why})" for a, why in enumerate(self.reasons) if why]
        return "\n".join(lines)


def analyze_grid(kernel: KernelIR, tables: tuple[BlockTable, ...], body: jc.Jaxpr, *,
                 scratch_is_shared: bool = True) -> GridAnalysis:
    """Chooses the axes that may run batched; ``body`` is the discharged kernel.

    ``scratch_is_shared=False`` skips the scratch condition (for backends whose
    parallel programs each own their scratch; see backend_api.parallel_grid_axes).
    """
    grid = tuple(kernel.grid)
    n = len(grid)
    reasons = [""] * n
    whole = _whole_kernel_reason(kernel, body, scratch_is_shared)
    for a in range(n):
        if whole:
            reasons[a] = whole
        elif grid[a] <= 1:
            reasons[a] = "size 1: nothing to batch"
    for a in declared_sequential_axes(kernel):
        if not reasons[a]:
            reasons[a] = "declared sequential by compiler_params.dimension_semantics"
    n_in = len(kernel.in_mappings)
    written = written_inputs(kernel.jaxpr, kernel.num_index_operands + kernel.num_scalar_prefetch,
                             n_in)
    out_tables = (*tables[n_in:], *(tables[k] for k in written))
    chosen: list[int] = []
    for a in range(n):
        if reasons[a]:
            continue
        trial = chosen + [a]
        clash = next((t.mapping.origin for t in out_tables if not _disjoint_across(t, trial, grid)),
                     None)
        if clash is None:
            chosen = trial
        else:
            reasons[a] = f"{clash} revisits a block (or overlaps another) along it"
    return GridAnalysis(grid, tuple(chosen), tuple(reasons))


def written_inputs(jaxpr, num_index: int, num_inputs: int) -> tuple[int, ...]:
    """The inputs whose Ref the kernel ``jaxpr`` (not discharged) writes, by its
    write and accumulate effects (nested loops and branches included). Such a
    block is written back, so a later grid point reads the update (as JAX's
    interpreter does)."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    refs = jaxpr.invars[num_index:num_index + num_inputs]
    return tuple(sorted(refs_written(jaxpr, refs, num_index)))


def refs_written(jaxpr, refs, first: int) -> set[int]:
    """Positions in ``refs`` (variables of ``jaxpr``, the first at input index
    ``first``) that its write and accumulate effects name."""
    written = set()
    for e in jaxpr.effects:
        if isinstance(e, (jc.state_types.WriteEffect, jc.state_types.AccumEffect)):
            at = e.input
            written.update(k for k, v in enumerate(refs)
                           if at is v or (isinstance(at, int) and at == first + k))
    return written


def _whole_kernel_reason(kernel: KernelIR, body: jc.Jaxpr, scratch_is_shared: bool = True) -> str:
    if any(g == 0 for g in kernel.grid):
        return "empty grid"
    if body.effects:
        return "the kernel has effects (e.g. debug_print), whose order must be kept"
    n_grid, n_in = len(kernel.grid), len(kernel.in_mappings)
    n_out, n_scr = len(kernel.out_mappings), len(kernel.scratch_avals)
    if n_scr and scratch_is_shared:
        scratch_in = body.invars[n_grid + n_in + n_out:]
        reached = _outputs_reached_by(body, scratch_in)
        if any(reached[n_in:n_in + n_out]):
            return "scratch carries state into the outputs across grid points"
    return ""


def declared_sequential_axes(kernel: KernelIR) -> tuple[int, ...]:
    """Axes that ``compiler_params.dimension_semantics`` marks other than parallel."""
    sems = getattr(kernel.compiler_params, "dimension_semantics", None)
    if not sems:
        return ()
    out = []
    for k, s in enumerate(sems):
        name = str(getattr(s, "value", getattr(s, "name", s))).lower()
        if "parallel" not in name:
            out.append(kernel.num_batch_axes + k)
    return tuple(a for a in out if a < len(kernel.grid))


def _outputs_reached_by(jaxpr: jc.Jaxpr, sources) -> list[bool]:
    """Per outvar: whether any of ``sources`` can influence it (conservative)."""
    tainted = {id(v) for v in sources}

    def hit(x):
        return not isinstance(x, jc.Literal) and id(x) in tainted

    for eqn in jaxpr.eqns:
        ins = list(eqn.invars)
        if eqn.primitive.name == "dynamic_update_slice" and \
                tuple(ins[1].aval.shape) == tuple(ins[0].aval.shape):
            ins = [ins[1]]  # a whole-array update replaces the operand entirely
        if eqn.primitive.name in ("pjit", "jit", "closed_call"):
            inner = eqn.params.get("jaxpr") or eqn.params.get("call_jaxpr")
            inner = getattr(inner, "jaxpr", inner)
            inner_src = [iv for iv, x in zip(inner.invars, ins) if hit(x)]
            for v, r in zip(eqn.outvars, _outputs_reached_by(inner, inner_src)):
                if r:
                    tainted.add(id(v))
        elif any(hit(x) for x in ins):
            tainted.update(id(v) for v in eqn.outvars)
    return [hit(v) for v in jaxpr.outvars]


# --- do blocks of different groups overlap? -----------------------------------

def _group_ids(grid, axes) -> np.ndarray:
    """Grid-shaped ids of the coordinates along ``axes`` (same id = same group)."""
    coords = np.indices(grid)
    ids = np.zeros(grid, np.int64)
    for a in axes:
        ids = ids * grid[a] + coords[a]
    return ids


def _disjoint_across(table: BlockTable, axes, grid) -> bool:
    """Whether points that differ along ``axes`` touch disjoint regions of the operand."""
    if table.is_affine and _owned_by_axes(table, axes, grid):
        return True
    if table.is_affine and _revisited_along(table, axes, grid):
        return False
    if table.num_points > _MAX_ENUMERATED_POINTS:
        return False  # too many points to enumerate: keep the axes sequential (sound)
    groups = _group_ids(grid, axes).reshape(-1)
    dims = table.mapping.block_dims
    starts = np.stack([s.reshape(-1) for s in table.starts], -1) if dims else \
        np.zeros((groups.size, 0), np.int64)
    aligned = all(isinstance(d, (Blocked, Squeezed)) for d in dims)
    if aligned:
        # Blocks on an aligned lattice either coincide or are disjoint.
        keys = starts // np.maximum(np.array(table.block_sizes, np.int64), 1)
        pairs = np.unique(np.concatenate([keys, groups[:, None]], 1), axis=0)
        return len(np.unique(pairs[:, :-1], axis=0)) == len(pairs)
    pairs = np.unique(np.concatenate([starts, groups[:, None]], 1), axis=0)
    if len(pairs) > _MAX_PAINTED_BLOCKS:
        return False
    owner = np.full(_padded_extent(table, starts), -1, np.int64)
    for row in pairs:
        region = tuple(slice(s, s + b) for s, b in zip(row[:-1], table.block_sizes))
        seen = owner[region]
        if np.any((seen != -1) & (seen != row[-1])):
            return False
        owner[region] = row[-1]
    return True


def _owned_by_axes(table: BlockTable, axes, grid) -> bool:
    """Closed-form sufficient condition for affine maps: every axis in ``axes``
    moves some dim of the block by at least a block, and no other axis moves
    that dim. Points differing along the axis then start a block apart there."""
    for a in axes:
        owned = False
        for d, (m, b) in enumerate(zip(table.start_maps, table.block_sizes)):
            others = any(c and grid[x] > 1 for x, c in enumerate(m.coefs) if x != a)
            if not others and abs(m.coefs[a]) >= max(b, 1):
                owned = True
                break
        if not owned:
            return False
    return True


def _revisited_along(table: BlockTable, axes, grid) -> bool:
    """Closed-form sufficient condition for the opposite: some axis in ``axes``
    (of size > 1) moves no dim of an aligned, non-empty block, so two points one
    step apart along it touch the very same block (a matmul's k over its output)."""
    dims = table.mapping.block_dims
    if not all(isinstance(d, (Blocked, Squeezed)) for d in dims) or \
            any(b < 1 for b in table.block_sizes):
        return False
    return any(grid[a] > 1 and all(m.coefs[a] == 0 for m in table.start_maps) for a in axes)


def _padded_extent(table: BlockTable, starts) -> tuple[int, ...]:
    ext = []
    for d, n in enumerate(table.mapping.array_shape):
        reach = int((starts[:, d] + table.block_sizes[d]).max()) if len(starts) else 0
        ext.append(max(n + table.pad_low[d], reach))
    return tuple(ext)


# --- which output elements does no grid point write? ----------------------------

def unwritten_elements(table: BlockTable, num_points: int) -> np.ndarray:
    """A boolean mask of the operand's shape: True where no grid point writes."""
    m = table.mapping
    shape = tuple(m.array_shape)
    if not shape or num_points == 0:
        return np.full(shape, num_points == 0)
    starts = np.stack([s.reshape(-1) for s in table.starts], -1)
    if all(isinstance(d, (Blocked, Squeezed)) for d in m.block_dims):
        # Aligned blocks: mark visited blocks on the block lattice, then expand.
        sizes = np.maximum(np.array(table.block_sizes, np.int64), 1)
        keys = starts // sizes
        lattice = np.zeros(tuple(int(k) + 1 for k in keys.max(0)), bool)
        lattice[tuple(keys.T)] = True
        for d, b in enumerate(sizes):
            lattice = np.repeat(lattice, int(b), axis=d)
        written = np.zeros(shape, bool)
        crop = tuple(slice(0, min(n, e)) for n, e in zip(shape, lattice.shape))
        written[crop] = lattice[crop]
        return ~written
    sizes = np.stack([s.reshape(-1) for s in table.sizes], -1)
    sizes = np.where([isinstance(d, BoundedSlice) for d in m.block_dims], sizes,
                     np.array(table.block_sizes, np.int64))
    written = np.zeros(shape, bool)
    nd = len(shape)
    for row in np.unique(np.concatenate([starts, sizes], 1), axis=0):
        region = []
        for d in range(nd):
            lo = int(row[d]) - table.pad_low[d]
            region.append(slice(max(lo, 0), max(lo + int(row[nd + d]), 0)))
        written[tuple(region)] = True
    return ~written


def coverage_report(kernel: KernelIR, tables: tuple[BlockTable, ...]) -> str:
    """Which output elements no grid point writes (they keep their initial
    padding, or the aliased input's values)."""
    lines = []
    num_points = int(np.prod(kernel.grid, dtype=np.int64))
    for t in tables[len(kernel.in_mappings):]:
        gap = unwritten_elements(t, num_points)
        count = int(gap.sum())
        if not count:
            lines.append(f"  {t.mapping.origin}: every element is written")
            continue
        box = np.argwhere(gap)
        lo, hi = box.min(0), box.max(0) + 1
        span = ", ".join(f"{a}:{b}" for a, b in zip(lo, hi))
        lines.append(f"  {t.mapping.origin}: {count} of {gap.size} elements are written by no "
                     f"grid point (within [{span}]); they read as padding (NaN / int min) "
                     "unless aliased")
    return "grid coverage:\n" + "\n".join(lines)


def parallel_grid_axes(kernel: KernelIR, *, private_scratch: bool = False) -> tuple[bool, ...]:
    """Per grid axis: whether grid points may run independently along it
    (the implementation of ``backend_api.parallel_grid_axes``)."""
    if kernel.num_scalar_prefetch:
        raise NotImplementedError(
            "The grid analysis does not take scalar-prefetch kernels (their index maps read "
            "runtime values); treat every axis as sequential.")
    tables = check_block_ranges(kernel)
    n_grid = len(kernel.grid)
    body = discharge_kernel_body(kernel.jaxpr, n_grid)
    found = analyze_grid(kernel, tables, body, scratch_is_shared=not private_scratch)
    return tuple(a in found.parallel_axes for a in range(n_grid))
