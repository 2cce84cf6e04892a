"""Output coverage: output elements that no grid point writes.

A grid that is too small for its outputs (the beginner's ``grid=(1000 // 128,)``
over a (1000,) array with (128,) blocks) leaves the output's tail as whatever
the buffer held: uninitialized memory on a device, padding in an interpreter.
JAX says nothing. The frontend decides it at trace time from the block tables
it already builds for the range check (``block_indices``), before any backend
is chosen, so every backend gets the same verdict:

- by default a ``UnwrittenOutputWarning``; under ``pl.enable_debug_checks`` an
  ``UnwrittenOutputError``; each names the kernel, the output, the first
  unwritten index (row-major) and the grid that misses it;
- not checked (nothing to say, or nothing the frontend can know): outputs that
  alias an input (``input_output_aliases``: unwritten elements keep the input's
  values), outputs left in place for manual DMA (``pl.ANY`` and a backend's
  whole-buffer spaces: HBM, GMEM, host, semaphores), outputs named in
  ``pallas_call(..., allow_unwritten_outputs=...)``, scalar-prefetch kernels
  and dynamic grids (their blocks are known only at run time), and the rare
  grids too large to decide cheaply (see the limits below).

The cost: affine index maps whose output dims each move with at most one grid
axis (nearly all kernels) are decided in closed form per dim; other maps use
the per-point tables the range check built, compressed to the distinct block
boundaries, so the work is linear in the grid points, never in the elements.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import TYPE_CHECKING

import numpy as np

from pallas_frontend import _jax_compat as jc
from pallas_frontend.block_indices import BlockTable, block_tables, check_block_ranges
from pallas_frontend.specs import Blocked, BoundedSlice, Squeezed

if TYPE_CHECKING:
    from pallas_frontend.contract import KernelIR

# Limits of the general (non closed-form) decision; past them an output is not checked.
_MAX_POINTS = 1 << 20            # grid points enumerated
_MAX_CELLS = 1 << 22             # cells of the compressed output
_MAX_CORNER_UPDATES = 1 << 24    # distinct blocks times 2**ndim
_MAX_AXIS = 1 << 22              # one grid axis's length, in the closed form

# Memory spaces whose operands the kernel sees whole and writes by hand (DMA):
# their block mapping says nothing about which elements get written.
_MANUAL_SPACES = frozenset({"any", "hbm", "gmem", "host", "semaphore"})


class UnwrittenOutputWarning(UserWarning):
    """An output has elements that no grid point writes (see ``output_coverage``)."""


class UnwrittenOutputError(ValueError):
    """``UnwrittenOutputWarning``'s finding, raised under ``pl.enable_debug_checks``."""


@dataclasses.dataclass(frozen=True)
class Gap:
    """What no grid point writes of one output."""
    count: int                        # unwritten elements
    first: tuple[int, ...]            # the first one, row-major
    short_dim: int | None             # a dim whose blocks (projected) miss part of it


def check_grid(kernel: KernelIR, *, check_ranges: bool, debug_checks: bool,
               allowed=False) -> None:
    """The range check (``check_ranges``) and this module's coverage check."""
    tables = check_block_ranges(kernel) if check_ranges else block_tables(kernel)
    check_output_coverage(kernel, tables, debug_checks=debug_checks, allowed=allowed)


def check_output_coverage(kernel: KernelIR, tables: tuple[BlockTable, ...], *,
                          debug_checks: bool, allowed=False) -> None:
    """Warns (raises under debug checks) for the first output with unwritten elements.

    ``allowed``: True skips every output; a collection of flat output indices skips those."""
    if allowed is True:
        return
    skip = set(allowed or ()) | {o for _, o in kernel.input_output_aliases}
    n_in = len(kernel.in_mappings)
    for j, t in enumerate(tables[n_in:]):
        if j in skip or _is_manual(t.mapping.memory_space):
            continue
        gap = find_gap(t)
        if gap is None:
            continue
        msg = _message(kernel, j, t, gap)
        if debug_checks:
            raise UnwrittenOutputError(msg)
        _warn_at_kernel(msg, kernel.source)


def _is_manual(space) -> bool:
    if space is None:
        return False
    name = getattr(space, "value", None)
    name = name if isinstance(name, str) else str(space)
    return name.lower() in _MANUAL_SPACES


def _warn_at_kernel(msg: str, source: str) -> None:
    """The warning points at the kernel function's line (``warnings`` filters by category)."""
    filename, _, line = source.rpartition(":")
    if filename and line.isdigit():
        warnings.warn_explicit(msg, UnwrittenOutputWarning, filename, int(line))
    else:
        warnings.warn(msg, UnwrittenOutputWarning, stacklevel=3)


def find_gap(t: BlockTable) -> Gap | None:
    """The output's unwritten elements, or None when every element is written
    (or when deciding would cost more than the limits allow). A shape with a
    symbolic dim (``jax.export``) is sized only when the kernel runs: not checked."""
    if any(jc.is_symbolic_dim(n) for n in t.mapping.array_shape):
        return None
    shape = tuple(int(n) for n in t.mapping.array_shape)
    if any(n == 0 for n in shape):
        return None
    if t.num_points == 0:
        return Gap(math.prod(shape), (0,) * len(shape), 0 if shape else None)
    if not shape:
        return None
    if t.is_affine:
        per_dim = _product_form(t, shape)
        if per_dim is not None:
            return _product_gap(per_dim, shape)
    if t.tables is None and (not t.is_affine or t.num_points > _MAX_POINTS):
        return None
    return _boxes_gap(t, shape)


# --- closed form: each output dim moves with at most one grid axis -----------------

def _product_form(t: BlockTable, shape):
    """Per dim, the 1-D (first unwritten, written count), when the set of blocks
    is a product of per-dim sets (each grid axis moves at most one dim); else None.
    The union of a product of intervals is the product of the per-dim unions."""
    grid = t.grid
    used: set[int] = set()
    out = []
    for d, (start, size) in enumerate(zip(t.start_maps, t.size_maps)):
        if any(size.coefs):
            return None
        axes = [a for a, c in enumerate(start.coefs) if c and grid[a] > 1]
        if len(axes) > 1 or used & set(axes):
            return None
        used.update(axes)
        lo = start.const - t.pad_low[d]
        if axes:
            a = axes[0]
            if grid[a] > _MAX_AXIS:
                return None
            lo = lo + start.coefs[a] * np.arange(grid[a], dtype=np.int64)
        out.append(_cover_1d(np.atleast_1d(lo), size.const, shape[d]))
    return out


def _cover_1d(lo: np.ndarray, size: int, n: int) -> tuple[int | None, int]:
    """(first index in [0, n) that no interval [lo, lo + size) covers, covered count)."""
    lo = np.unique(lo)
    hi = np.clip(lo + size, 0, n)
    lo = np.clip(lo, 0, n)
    keep = hi > lo
    lo, hi = lo[keep], hi[keep]
    if not len(lo):
        return 0, 0
    reach = np.maximum.accumulate(hi)      # starts sorted: merged runs end at reach
    gap_after = lo[1:] > reach[:-1]
    run_start = np.concatenate([lo[:1], lo[1:][gap_after]])
    run_end = np.concatenate([reach[:-1][gap_after], reach[-1:]])
    covered = int((run_end - run_start).sum())
    if run_start[0] > 0:
        return 0, covered
    return (int(run_end[0]) if run_end[0] < n else None), covered


def _product_gap(per_dim, shape) -> Gap | None:
    if all(first is None for first, _ in per_dim):
        return None
    count = math.prod(shape) - math.prod(c for _, c in per_dim)
    # Every element with x[d] outside dim d's cover is unwritten: the first is
    # the smallest of (0, .., first[d], .., 0) over the dims d with a gap.
    candidates = [(tuple(f if k == d else 0 for k in range(len(shape))), d)
                  for d, (f, _) in enumerate(per_dim) if f is not None]
    first, dim = min(candidates)
    return Gap(count, first, dim)


# --- general: paint the distinct blocks on the output compressed to their edges -------

def _boxes_gap(t: BlockTable, shape) -> Gap | None:
    nd = len(shape)
    dims = t.mapping.block_dims
    lo = np.stack([s.reshape(-1) for s in t.starts], -1) - np.array(t.pad_low, np.int64)
    size = np.stack([np.broadcast_to(np.asarray(s), t.grid).reshape(-1) for s in t.sizes], -1)
    size = np.where([isinstance(d, BoundedSlice) for d in dims], size,
                    np.array(t.block_sizes, np.int64))
    hi = np.clip(lo + size, 0, shape)
    lo = np.clip(lo, 0, shape)
    boxes = np.unique(np.concatenate([lo, hi], 1), axis=0)
    boxes = boxes[(boxes[:, nd:] > boxes[:, :nd]).all(1)]
    if not len(boxes):
        return Gap(math.prod(shape), (0,) * nd, 0)
    if len(boxes) * (1 << nd) > _MAX_CORNER_UPDATES:
        return None
    edges = [np.unique(np.concatenate([[0, n], boxes[:, d], boxes[:, nd + d]]))
             for d, n in enumerate(shape)]
    cells = tuple(len(e) - 1 for e in edges)
    if math.prod(cells) > _MAX_CELLS:
        return None
    # A difference array over the cells: +-1 at each box's 2**nd corners, then
    # prefix sums along every dim give how many boxes cover each cell.
    lo_c = [np.searchsorted(e, boxes[:, d]) for d, e in enumerate(edges)]
    hi_c = [np.searchsorted(e, boxes[:, nd + d]) for d, e in enumerate(edges)]
    diff_shape = tuple(c + 1 for c in cells)
    diff = np.zeros(math.prod(diff_shape), np.int64)
    for corner in range(1 << nd):
        idx = [hi_c[d] if corner >> d & 1 else lo_c[d] for d in range(nd)]
        sign = -1 if bin(corner).count("1") % 2 else 1
        diff += np.bincount(np.ravel_multi_index(idx, diff_shape), minlength=diff.size) * sign
    counts = diff.reshape(diff_shape)
    for d in range(nd):
        counts = np.cumsum(counts, axis=d)
    empty = counts[tuple(slice(0, c) for c in cells)] == 0
    if not empty.any():
        return None
    cell = np.unravel_index(int(np.argmax(empty)), cells)
    first = tuple(int(e[c]) for e, c in zip(edges, cell))
    lengths = np.ones(cells, np.int64)
    for d, e in enumerate(edges):
        lengths = lengths * np.diff(e).reshape([-1 if k == d else 1 for k in range(nd)])
    count = int(lengths[empty].sum())
    short = next((d for d in range(nd) if _projected_first(boxes, d, nd, shape[d]) is not None),
                 None)
    return Gap(count, first, short)


def _projected_first(boxes, d, nd, n) -> int | None:
    """The first index of dim ``d`` that no block reaches (blocks projected on ``d``)."""
    order = np.argsort(boxes[:, d], kind="stable")
    lo, hi = boxes[order, d], boxes[order, nd + d]
    reach = np.maximum.accumulate(hi)
    if lo[0] > 0:
        return 0
    gaps = np.nonzero(lo[1:] > reach[:-1])[0]
    if len(gaps):
        return int(reach[gaps[0]])
    return int(reach[-1]) if reach[-1] < n else None


# --- the message ----------------------------------------------------------------

def _message(kernel: KernelIR, j: int, t: BlockTable, gap: Gap) -> str:
    m = t.mapping
    grid = tuple(t.grid)
    total = math.prod(m.array_shape)
    block = tuple(None if isinstance(d, Squeezed) else d.block_size
                  for d in m.block_dims)
    text = (f"Kernel {kernel.name_and_src_info}: {m.origin} (output {j}, shape "
            f"{tuple(m.array_shape)}) has {gap.count} of its {total} elements written by no "
            f"grid point, the first at index {gap.first}: grid {grid} with block shape "
            f"{block} (index_map at {m.index_map_source}) never reaches it.")
    d = gap.short_dim
    if t.num_points == 0:
        text += " The grid is empty, so no grid point runs."
    elif d is not None and isinstance(m.block_dims[d], Blocked):
        b, n = m.block_dims[d].block_size, m.array_shape[d]
        nb = -(-n // b)
        reached = len(np.unique(np.clip(t.starts[d].reshape(-1) // b, 0, nb - 1))) \
            if t.num_points <= _MAX_POINTS else None
        of = f"{reached} of its {nb}" if reached is not None else f"not all of its {nb}"
        text += f" Along dim {d} the grid reaches {of} blocks of {b}"
        text += (f": size the grid axis that moves dim {d} with pl.cdiv({n}, {b}) = {nb}, "
                 f"not {n} // {b} = {n // b}." if n % b else ".")
    text += (" Unwritten elements hold whatever the output buffer held (uninitialized "
             "memory on a device, padding in an interpreter). If the kernel leaves them "
             f"on purpose, pass pallas_call(..., allow_unwritten_outputs=True) (or "
             f"allow_unwritten_outputs=({j},) for this output only), or alias the output to "
             "an input (input_output_aliases) whose values it should keep.")
    return text
