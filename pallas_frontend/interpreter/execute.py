"""The reference interpreter: runs a ``KernelIR`` as a plain JAX computation.

Semantics (the frontend's definition of a kernel's meaning):
- grid points run in row-major order, the last axis fastest; an output block's
  contents carry from one grid point to the next, so accumulation over a grid
  axis works;
- a block that overhangs its array reads padding (NaN for floats, the lowest
  value for ints) and writes back only its in-bounds part;
- scratch buffers persist across grid points and start as padding values;
- an aliased output starts as its input's values.

Block offsets come from the index maps evaluated over the whole grid at trace
time (``block_indices``), so out-of-range blocks are rejected before running.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from pallas_frontend import _jax_compat as jc
from pallas_frontend.discharge import discharge_kernel_body
from pallas_frontend.backend_api import KernelIR
from pallas_frontend.block_indices import (BlockTable, block_positions, check_block_ranges,
                                           grid_coordinates)
from pallas_frontend.grid_analysis import written_inputs
from pallas_frontend.interpreter.globals import lift_globals
from pallas_frontend.primitives import semaphore_ref_positions
from pallas_frontend.specs import BoundedSlice, Squeezed, value_dtype


def padding_value(dtype) -> jax.Array:
    """What unwritten or overhanging memory reads as in the interpreter (a typed
    PRNG key's: the key of all-zero data)."""
    dtype = value_dtype(dtype)
    if not isinstance(dtype, np.dtype):
        return jnp.zeros((), dtype)
    if jnp.issubdtype(dtype, jnp.inexact):
        return jnp.array(jnp.nan, dtype)
    if jnp.issubdtype(dtype, jnp.integer):
        return jnp.array(jnp.iinfo(dtype).min, dtype)
    return jnp.zeros((), dtype)


@dataclasses.dataclass(frozen=True)
class OperandLayout:
    """How one operand is padded and where its block sits at each grid point."""
    table: BlockTable
    pad_low: tuple[int, ...]
    pad_high: tuple[int, ...]

    @property
    def padded_aval(self) -> jax.ShapeDtypeStruct:
        """The padded buffer's shape and dtype."""
        m = self.table.mapping
        shape = tuple(lo + n + hi for lo, n, hi in zip(self.pad_low, m.array_shape, self.pad_high))
        return jax.ShapeDtypeStruct(shape, m.dtype)

    @functools.cached_property
    def starts(self) -> np.ndarray:
        """(num_points, ndim) int32 block starts in padded coordinates (built on demand)."""
        return _stacked(self.table.starts, self.table.num_points)

    @functools.cached_property
    def sizes(self) -> np.ndarray:
        """(num_points, ndim) int32: valid extent (BoundedSlice) per dim."""
        return _stacked(self.table.sizes, self.table.num_points)

    @property
    def block_sizes(self):
        return self.table.block_sizes

    @property
    def squeezed_axes(self):
        return tuple(i for i, d in enumerate(self.table.mapping.block_dims) if isinstance(d, Squeezed))

    @property
    def bounded_axes(self):
        return tuple(i for i, d in enumerate(self.table.mapping.block_dims)
                     if isinstance(d, BoundedSlice))

    def pad(self, x):
        if not any(self.pad_low) and not any(self.pad_high):
            return x
        cfg = [(lo, hi, 0) for lo, hi in zip(self.pad_low, self.pad_high)]
        return lax.pad(x, padding_value(x.dtype), cfg)

    def unpad(self, x):
        shape = self.table.mapping.array_shape
        if tuple(x.shape) == tuple(shape):
            return x
        return lax.slice(x, list(self.pad_low), [lo + n for lo, n in zip(self.pad_low, shape)])


def _stacked(columns, num: int) -> np.ndarray:
    if not columns:
        return np.zeros((num, 0), np.int32)
    return int32_table(np.stack([c.reshape(-1) for c in columns], -1))


def int32_table(a: np.ndarray) -> np.ndarray:
    """``a`` as int32 block offsets; a value that would wrap is an internal error
    (``wide_dims`` splits dims whose offsets pass int32 before planning)."""
    if a.size and (a.max() > np.iinfo(np.int32).max or a.min() < np.iinfo(np.int32).min):
        raise OverflowError(f"block offset {int(a.max())} does not fit int32; the interpreter "
                            "should have split this dim (interpreter/wide_dims.py)")
    return a.astype(np.int32)


def operand_layout(table: BlockTable) -> OperandLayout:
    m = table.mapping
    pad_low = tuple(table.pad_low)
    bounds = table.start_bounds() if table.num_points else None
    pad_high = []
    for d, n in enumerate(m.array_shape):
        need = bounds[d][1] + table.block_sizes[d] if bounds else 0
        pad_high.append(max(0, need - (pad_low[d] + n)))
    return OperandLayout(table, pad_low, tuple(pad_high))


@dataclasses.dataclass(frozen=True)
class InterpreterPlan:
    """Everything about a kernel that is computed once, at trace time."""
    kernel: KernelIR
    layouts: tuple[OperandLayout, ...]      # inputs then outputs
    body: jc.Jaxpr                          # the discharged kernel: (idx, values) -> new values

    @property
    def num_points(self) -> int:
        return int(np.prod(self.kernel.grid, dtype=np.int64))

    @functools.cached_property
    def coords(self) -> np.ndarray:
        """(num_points, num_grid_axes) int32 (built on demand)."""
        coords = grid_coordinates(tuple(self.kernel.grid))
        if not coords:
            return np.zeros((1, 0), np.int32)
        return np.stack([c.reshape(-1) for c in coords], -1).astype(np.int32)


def make_plan(kernel: KernelIR) -> InterpreterPlan:
    if kernel.num_scalar_prefetch:
        raise NotImplementedError(
            "The frontend interpreter does not run scalar-prefetch kernels; use a backend "
            "that provides them (e.g. interpret=pallas_tpu.InterpretParams()).")
    kernel = lift_globals(kernel)
    tables = check_block_ranges(kernel)
    layouts = tuple(operand_layout(t) for t in tables)
    body = discharge_kernel_body(kernel.jaxpr, len(kernel.grid))
    return InterpreterPlan(kernel, layouts, body)


def read_block(buf, layout: OperandLayout, starts):
    """The kernel-visible block of a padded buffer at dynamic ``starts``.

    Starts are never negative (padded coordinates, range-checked at trace
    time), so the slices skip JAX's negative-index normalisation."""
    block = lax.dynamic_slice(buf, list(starts), layout.block_sizes,
                              allow_negative_indices=False)
    return lax.squeeze(block, layout.squeezed_axes) if layout.squeezed_axes else block


def write_block(buf, layout: OperandLayout, starts, sizes, block):
    """Writes a kernel block back; a BoundedSlice dim writes only its valid prefix."""
    if layout.squeezed_axes:
        block = lax.expand_dims(block, layout.squeezed_axes)
    if layout.bounded_axes:
        old = lax.dynamic_slice(buf, list(starts), layout.block_sizes,
                                allow_negative_indices=False)
        keep = jnp.ones(block.shape, bool)
        for ax in layout.bounded_axes:
            keep &= lax.broadcasted_iota(jnp.int32, block.shape, ax) < sizes[ax]
        block = jnp.where(keep, block, old)
    return lax.dynamic_update_slice(buf, block, list(starts), allow_negative_indices=False)


def varying_like(x, inputs):
    """Marks ``x`` as varying over the manual mesh axes the inputs vary over
    (inside shard_map), so loop carries built from constants type-check."""
    axes = frozenset().union(*(jc.varying_axes(jax.typeof(a)) for a in inputs))
    return lax.pcast(x, tuple(sorted(axes)), to="varying") if axes else x


def initial_outputs(plan: InterpreterPlan, inputs):
    kernel = plan.kernel
    aliased = {o: i for i, o in kernel.input_output_aliases}
    outs = []
    for k, m in enumerate(kernel.out_mappings):
        if k in aliased:
            base = inputs[aliased[k]]
        else:
            base = jnp.full(m.array_shape, padding_value(m.dtype), m.dtype)
        outs.append(varying_like(plan.layouts[len(kernel.in_mappings) + k].pad(base), inputs))
    return outs


def initial_scratch(kernel: KernelIR, inputs):
    """Scratch starts as padding values, except semaphores, which start at 0."""
    first = len(kernel.jaxpr.invars) - len(kernel.scratch_avals)
    semaphores = semaphore_ref_positions(kernel.jaxpr)
    return [varying_like(jnp.full(a.inner_aval.shape,
                                  0 if first + k in semaphores else padding_value(a.inner_aval.dtype),
                                  a.inner_aval.dtype), inputs)
            for k, a in enumerate(kernel.scratch_avals)]


def run_sequential(plan: InterpreterPlan, *inputs):
    """Runs every grid point in order; returns the unpadded outputs."""
    kernel = plan.kernel
    n_in = len(kernel.in_mappings)
    in_layouts, out_layouts = plan.layouts[:n_in], plan.layouts[n_in:]
    padded_in = [lay.pad(x) for lay, x in zip(in_layouts, inputs)]
    grid = tuple(kernel.grid)
    if plan.num_points > MAX_TABLE_POINTS:
        # Too many points for per-point tables: evaluate the index maps in the loop.
        def indices(p):
            return [_unravel(p, grid, a) for a in range(len(grid))]

        def positions(k, idx, p):
            st, sz = block_positions(plan.layouts[k].table.mapping,
                                     jc.eval_jaxpr(plan.layouts[k].table.mapping.index_map, *idx),
                                     lambda v, n: jnp.int32(n))
            return [jnp.asarray(v, jnp.int32) for v in st], [jnp.asarray(v, jnp.int32) for v in sz]
    else:
        coords = jnp.asarray(plan.coords)
        start_tables = [jnp.asarray(lay.starts) for lay in plan.layouts]
        size_tables = [jnp.asarray(lay.sizes) for lay in plan.layouts]

        def indices(p):
            return [coords[p, a] for a in range(coords.shape[1])]

        def positions(k, idx, p):
            return start_tables[k][p], size_tables[k][p]

    written = written_inputs(kernel.jaxpr, len(grid), n_in)

    def step(p, carry):
        (outs, ins), scratch = carry
        idx = indices(p)
        where = [positions(k, idx, p) for k in range(len(plan.layouts))]
        starts = [w[0] for w in where]
        sizes = [w[1] for w in where]
        in_blocks = [read_block(x, lay, starts[k]) for k, (x, lay) in
                     enumerate(zip(ins, in_layouts))]
        out_blocks = [read_block(x, lay, starts[n_in + k]) for k, (x, lay) in
                      enumerate(zip(outs, out_layouts))]
        new = jc.eval_jaxpr(plan.body, *idx, *in_blocks, *out_blocks, *scratch)
        new_outs = new[n_in:n_in + len(outs)]
        outs = [write_block(buf, lay, starts[n_in + k], sizes[n_in + k], blk)
                for k, (buf, lay, blk) in enumerate(zip(outs, out_layouts, new_outs))]
        ins = [write_block(buf, in_layouts[k], starts[k], sizes[k], new[k]) if k in written
               else buf for k, buf in enumerate(ins)]
        return (outs, ins), list(new[n_in + len(outs):])

    carry = ((initial_outputs(plan, inputs), padded_in), initial_scratch(kernel, inputs))
    if plan.num_points == 0:   # a grid axis of size 0: nothing runs, outputs stay as they are
        return [lay.unpad(o) for lay, o in zip(out_layouts, carry[0][0])]
    if plan.num_points == 1:
        (outs, _), _ = step(0, carry)
    else:
        (outs, _), _ = lax.fori_loop(0, plan.num_points, step, carry)
    return [lay.unpad(o) for lay, o in zip(out_layouts, outs)]



# Above this many grid points the sequential interpreter keeps no per-point tables.
MAX_TABLE_POINTS = 1 << 20


def _unravel(p, grid, a):
    inner = int(np.prod(grid[a + 1:], dtype=np.int64))
    c = p if inner == 1 else lax.div(p, np.int32(inner))
    return c if a == 0 else lax.rem(c, np.int32(grid[a]))
