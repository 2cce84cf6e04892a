"""Reading and writing the blocks of all parallel grid points at once.

For one sequential step ``s`` the parallel axes ``P`` form a batch of shape
``gP``. Each operand's blocks for that batch are moved in one of two ways:

- *view*: every dim's start is either independent of ``P`` (a "fixed" dim) or
  ``base[s] + coordinate_j * block`` for exactly one parallel axis ``j`` (a
  "tiled" dim). Then all blocks together are one slice of the padded array,
  reshaped ``(g_j * b) -> (g_j, b)`` and transposed so the batch axes lead.
  Writing back is the inverse. No gather, no scatter.
- *gather*: anything else; one ``dynamic_slice`` per point under ``vmap`` (an
  XLA gather), and a scatter of element indices to write back.

A view operand carries only the batch axes it depends on, so an input block
shared by a whole row of points is passed unbatched (``vmap`` ``in_axes=None``)
instead of being copied once per point.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from pallas_frontend.affine_maps import Affine
from pallas_frontend.interpreter.execute import OperandLayout, int32_table, read_block
from pallas_frontend.specs import BoundedSlice, Squeezed, value_dtype


@dataclasses.dataclass(frozen=True)
class BatchedAccess:
    """How one operand's blocks are read and written for a whole batch."""
    layout: OperandLayout
    batch_shape: tuple[int, ...]        # gP
    starts: np.ndarray                  # view: (NS, ndim); gather: (NS, NP, ndim)
    sizes: np.ndarray | None            # gather only: (NS, NP, ndim) valid extents
    tiled: tuple[int | None, ...] | None  # view only: per dim, the parallel axis it tiles
    per_step: bool                      # whether the block position depends on the step
    # An affine view: per dim, the start as an affine function of the step
    # coordinates (over ``step_grid``); ``starts`` is then unused.
    step_maps: tuple[Affine, ...] | None = None
    step_grid: tuple[int, ...] = ()

    @property
    def is_view(self) -> bool:
        return self.tiled is not None

    @property
    def batch_levels(self) -> tuple[bool, ...]:
        """Per parallel axis: whether this operand's blocks differ along it."""
        if self.is_view:
            return tuple(j in self.tiled for j in range(len(self.batch_shape)))
        return (True,) * len(self.batch_shape)

    def blocks_aval(self, *, every_batch_axis: bool) -> jax.ShapeDtypeStruct:
        """The shape and dtype ``read`` returns: the batch axes this operand varies
        along (all of them with ``every_batch_axis``, as for outputs), then the
        kernel-visible block."""
        m = self.layout.table.mapping
        lead = tuple(g for g, on in zip(self.batch_shape, self.batch_levels)
                     if on or every_batch_axis)
        return jax.ShapeDtypeStruct(lead + tuple(m.block_shape), m.dtype)

    def covers(self, shape) -> bool:
        """Whether one step's blocks are the whole (padded) buffer of ``shape``:
        ``write`` then ignores what the buffer held."""
        return self.is_view and list(shape) == self._view_sizes()

    def batched_bytes(self) -> int:
        """Bytes one step's batch of blocks occupies."""
        item = value_dtype(self.layout.table.mapping.dtype).itemsize
        blk = int(np.prod(self.layout.block_sizes, dtype=np.int64))
        used = [g for g, on in zip(self.batch_shape, self.batch_levels) if on]
        return int(np.prod(used, dtype=np.int64)) * blk * item

    # --- reading -------------------------------------------------------------

    def _step_starts(self, s):
        """Start indices at step ``s``: Python ints where they do not vary."""
        if self.step_maps is not None:
            return self._affine_step_starts(s)
        if isinstance(s, int) and self.is_view:   # an unrolled step: all static
            return [int(v) for v in self.starts[s if self.per_step else 0]]
        if not self.per_step:
            return [int(v) for v in self.starts[0]] if self.is_view else None
        if self.is_view:
            return [_affine_or_lookup(self.starts[:, d], s) for d in range(self.starts.shape[1])]
        return None

    def _affine_step_starts(self, s):
        if isinstance(s, int) or not self.per_step:
            point = np.unravel_index(s if isinstance(s, int) else 0, self.step_grid) \
                if self.step_grid else ()
            return [m.const + sum(c * int(i) for c, i in zip(m.coefs, point))
                    for m in self.step_maps]
        coords = [unravel_step(s, self.step_grid, k) for k in range(len(self.step_grid))]
        out = []
        for m in self.step_maps:
            v = m.const
            for c, x in zip(m.coefs, coords):
                if c:
                    v = v + x * np.int32(c)
            out.append(v)
        return out

    def _gather_table(self, table, s):
        if not self.per_step:
            return jnp.asarray(table[0])
        return jnp.asarray(table[s]) if isinstance(s, int) else jnp.asarray(table)[s]

    def _view_sizes(self):
        return [self.batch_shape[j] * b if j is not None else b
                for j, b in zip(self.tiled, self.layout.block_sizes)]

    def _view_order(self):
        """Axes of the (g, b)-split view: batch axes by parallel axis, then block axes."""
        pos = 0
        batch_pos, block_pos = {}, []
        for j in self.tiled:
            if j is not None:
                batch_pos[j] = pos
                pos += 1
            block_pos.append(pos)
            pos += 1
        return [batch_pos[j] for j in sorted(batch_pos)] + block_pos

    def slab(self, buf, s):
        """A view operand's blocks at step ``s`` as one slice of the buffer (unsplit)."""
        sizes = self._view_sizes()
        start = self._step_starts(s)
        if list(buf.shape) == sizes:
            return buf
        if all(isinstance(v, int) for v in start):
            return lax.slice(buf, start, [a + n for a, n in zip(start, sizes)])
        return lax.dynamic_slice(buf, start, sizes, allow_negative_indices=False)

    def split(self, view):
        """A slab (see ``slab``) as the batch of kernel-visible blocks; batch axes lead."""
        split = []
        for j, b in zip(self.tiled, self.layout.block_sizes):
            split += [self.batch_shape[j], b] if j is not None else [b]
        view = view.reshape(split)
        order = self._view_order()
        if order != sorted(order):
            view = view.transpose(order)
        n_batch = sum(j is not None for j in self.tiled)
        squeezed = [n_batch + d for d in self.layout.squeezed_axes]
        return lax.squeeze(view, squeezed) if squeezed else view

    def tile(self, block):
        """One kernel-visible block repeated over the batch, as a slab (see ``slab``)."""
        if self.layout.squeezed_axes:
            block = lax.expand_dims(block, self.layout.squeezed_axes)
        return jnp.tile(block, [self.batch_shape[j] if j is not None else 1 for j in self.tiled])

    def read(self, buf, s):
        """The batch of kernel-visible blocks at step ``s``; batch axes lead."""
        if self.is_view:
            return self.split(self.slab(buf, s))
        starts = self._gather_table(self.starts, s)
        blocks = jax.vmap(lambda st: read_block(buf, self.layout, st))(starts)
        return blocks.reshape(self.batch_shape + blocks.shape[1:])

    # --- writing -------------------------------------------------------------

    def write(self, buf, s, blocks):
        """Writes a full batch of blocks (all batch axes leading) back into ``buf``."""
        if self.layout.squeezed_axes:
            nb = len(self.batch_shape)
            blocks = lax.expand_dims(blocks, [nb + d for d in self.layout.squeezed_axes])
        if self.is_view:
            order = self._view_order()
            if order != sorted(order):
                blocks = blocks.transpose(np.argsort(order))
            sizes = self._view_sizes()
            blocks = blocks.reshape(sizes)
            if list(buf.shape) == sizes:
                return blocks
            return lax.dynamic_update_slice(buf, blocks, self._step_starts(s),
                                            allow_negative_indices=False)
        nb = len(self.batch_shape)
        blocks = blocks.reshape((-1,) + blocks.shape[nb:])
        starts = self._gather_table(self.starts, s)
        bsizes = self.layout.block_sizes
        index = []
        for d, b in enumerate(bsizes):
            shape = [1] * (len(bsizes) + 1)
            shape[d + 1] = b
            index.append(starts[:, d].reshape([-1] + [1] * len(bsizes))
                         + jnp.arange(b, dtype=starts.dtype).reshape(shape))
        if self.layout.bounded_axes:
            sizes = self._gather_table(self.sizes, s)
            keep = jnp.ones(blocks.shape, bool)
            for d in self.layout.bounded_axes:
                keep &= (index[d] - starts[:, d].reshape([-1] + [1] * len(bsizes))
                         < sizes[:, d].reshape([-1] + [1] * len(bsizes)))
            blocks = jnp.where(keep, blocks, buf[tuple(index)])
        return buf.at[tuple(index)].set(blocks, unique_indices=True)


def batched_access(layout: OperandLayout, step_axes, batch_axes, grid,
                   *, is_output: bool) -> BatchedAccess:
    """Chooses view or gather for one operand and lays out its start tables."""
    table = layout.table
    if table.is_affine:
        access = _affine_view(layout, step_axes, batch_axes, grid, is_output=is_output)
        if access is not None:
            return access
    perm = list(step_axes) + list(batch_axes)
    batch_shape = tuple(grid[a] for a in batch_axes)
    ns = int(np.prod([grid[a] for a in step_axes], dtype=np.int64))
    np_ = int(np.prod(batch_shape, dtype=np.int64))
    ndim = len(layout.block_sizes)

    def arrange(arr):  # grid-shaped -> (NS, gP...)
        return np.asarray(arr).transpose(perm).reshape((ns,) + batch_shape)

    starts = [arrange(st) for st in table.starts]  # padded coordinates already
    sizes = [arrange(sz) for sz in table.sizes]
    tiled = _tiling(layout, starts, batch_shape, is_output=is_output)
    if tiled is not None:
        flat = np.stack([st.reshape(ns, -1)[:, 0] for st in starts], -1) if ndim else \
            np.zeros((ns, 0), np.int64)
        return BatchedAccess(layout, batch_shape, int32_table(flat), None, tuple(tiled),
                             per_step=bool(ns > 1 and (flat != flat[:1]).any()))
    full = np.stack([st.reshape(ns, np_) for st in starts], -1) if ndim else \
        np.zeros((ns, np_, 0), np.int64)
    valid = np.stack([sz.reshape(ns, np_) for sz in sizes], -1) if ndim else full
    return BatchedAccess(layout, batch_shape, int32_table(full), int32_table(valid), None,
                         per_step=bool(ns > 1 and (full != full[:1]).any()))


def _tiling(layout: OperandLayout, starts, batch_shape, *, is_output: bool):
    """Per dim, the parallel axis it tiles (None if fixed); None if not a view."""
    dims = layout.table.mapping.block_dims
    nb = len(batch_shape)
    tiled, used = [], set()
    for d, (dim, st) in enumerate(zip(dims, starts)):
        base = st[(slice(None),) + (slice(0, 1),) * nb]
        rel = st - base
        if not rel.any():
            tiled.append(None)
            continue
        if isinstance(dim, BoundedSlice):
            return None
        b = 1 if isinstance(dim, Squeezed) else dim.block_size
        hit = None
        for j in range(nb):
            shape = [1] * (nb + 1)
            shape[j + 1] = batch_shape[j]
            if np.array_equal(rel, np.broadcast_to(np.arange(batch_shape[j]).reshape(shape) * b,
                                                   rel.shape)):
                hit = j
                break
        if hit is None or hit in used:
            return None
        used.add(hit)
        tiled.append(hit)
    if is_output and (len(used) != nb or layout.bounded_axes):
        return None
    return tiled


def _affine_view(layout: OperandLayout, step_axes, batch_axes, grid, *, is_output: bool):
    """The view access of an affine operand, decided in closed form; None if its
    blocks are not a view (the caller then builds gather tables)."""
    table = layout.table
    dims = table.mapping.block_dims
    batch_shape = tuple(grid[a] for a in batch_axes)
    tiled, used = [], set()
    for dim, m in zip(dims, table.start_maps):
        moves = [j for j, a in enumerate(batch_axes) if m.coefs[a] and grid[a] > 1]
        if not moves:
            tiled.append(None)
            continue
        b = 1 if isinstance(dim, Squeezed) else dim.block_size
        if isinstance(dim, BoundedSlice) or len(moves) > 1 or moves[0] in used or \
                m.coefs[batch_axes[moves[0]]] != b:
            return None
        used.add(moves[0])
        tiled.append(moves[0])
    live = {j for j, a in enumerate(batch_axes) if grid[a] > 1}
    if is_output and (not live <= used or layout.bounded_axes):
        return None
    tiled = [t if t is None or t in live else None for t in tiled]
    if is_output and any(grid[a] == 1 for a in batch_axes):
        return None  # size-1 batch axes: let the table path handle the corner case
    step_grid = tuple(grid[a] for a in step_axes)
    step_maps = tuple(Affine(m.const, tuple(m.coefs[a] if grid[a] > 1 else 0 for a in step_axes))
                      for m in table.start_maps)
    per_step = any(any(m.coefs) for m in step_maps)
    return BatchedAccess(layout, batch_shape, np.zeros((1, len(dims)), np.int32), None,
                         tuple(tiled), per_step=per_step, step_maps=step_maps,
                         step_grid=step_grid)


def unravel_step(s, sizes, k):
    """Coordinate ``k`` of step ``s`` (>= 0) unravelled row-major over ``sizes``."""
    inner = int(np.prod(sizes[k + 1:], dtype=np.int64))
    c = s if inner == 1 else lax.div(s, np.int32(inner))
    return c if k == 0 else lax.rem(c, np.int32(sizes[k]))


def _affine_or_lookup(column: np.ndarray, s):
    """``column[s]`` for a traced step ``s``: a constant, ``c0 + s * delta`` when
    the column is affine in the step (the common case, and cheaper to compile
    than a table lookup), else a lookup in the table."""
    c0 = int(column[0])
    delta = int(column[1] - column[0]) if column.shape[0] > 1 else 0
    if (column == c0 + delta * np.arange(column.shape[0])).all():
        return c0 if delta == 0 else c0 + s * delta
    return jnp.asarray(column)[s]
