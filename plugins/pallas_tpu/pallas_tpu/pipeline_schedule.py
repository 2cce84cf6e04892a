"""The software pipeline over ``BufferedRef`` allocations, traced in the kernel.

``emit_pipeline(...)(*refs, allocations=brefs)`` and
``emit_pipeline_with_allocations`` land here. Unlike the recorded
``tpu_emit_pipeline`` equation (``pipeline.py``), this pipeline is built
while the kernel is traced, from the allocations' own methods, so a
``BufferedRef`` subclass that moves its blocks its own way is honoured. The
kernel jaxpr then holds plain loops, conditionals and DMAs, which every
execution path (built-in interpreter, TPU interpret mode, Mosaic) runs.

Schedule per step ``s`` of the flattened grid (as JAX's, without lookahead,
which only changes timing): an input's block for step ``s + in_count - 1``
is fetched when its block index changes, the block of step ``s`` is awaited
when it changed on entering ``s``; the body runs; an output's block is
written back when its index is about to change (or at the last step) and
that write-back is awaited ``max(out_count - 1, 1)`` steps later (the last
ones after the loop). An operand whose block is all of it at every step (JAX's
trivial windowing, ``has_trivial_windowing``) has one unsliced buffer instead,
copied in before the loop and out after it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

import pallas_frontend as pf
from pallas_frontend.backend_api import nested_grid
from pallas_tpu import hijax_refs
from pallas_tpu.buffered_ref import BufferedRef, BufferType, source_space

_SLOTS = ("copy_in_slot", "wait_in_slot", "copy_out_slot", "wait_out_slot", "next_fetch")


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True, eq=False)
class PipelineStep:
    """What a body made with ``_explicit_indices=True`` gets first: the grid
    indices of this step and its position in the (per-core) loop."""
    index: tuple
    local_index: object


def _or(a, b):
    if a is True or b is True:
        return True
    if a is False:
        return b
    if b is False:
        return a
    return a | b


def _differ(xs, ys):
    """Whether two index-map results name different blocks (a bool or a traced bool)."""
    out = False
    for x, y in zip(xs, ys, strict=True):
        pairs = ([(x.start, y.start), (x.size, y.size)] if isinstance(x, pf.Slice)
                 else [(x, y)])
        for a, b in pairs:
            if a is b:
                continue
            if isinstance(a, (int, np.integer)) and isinstance(b, (int, np.integer)):
                out = _or(out, bool(a != b))
            else:
                out = _or(out, jnp.asarray(a) != jnp.asarray(b))
    return out


class _Grid:
    """Grid indices of a linear step (the last axis fastest) and block changes;
    ``offsets`` (this core's start, when the grid is split across cores) are
    added to every index."""

    def __init__(self, grid, offsets=None):
        self.grid = tuple(grid)
        self.offsets = (0,) * len(self.grid) if offsets is None else tuple(offsets)
        self.num_steps = math.prod(self.grid) if self.grid else 1

    def indices(self, step):
        if isinstance(step, (int, np.integer)):
            step = max(int(step), 0)
        else:
            step = jnp.maximum(step, 0)
        out, stride = [], 1
        for g in reversed(self.grid):
            if isinstance(g, int) and g == 1:
                out.append(jnp.int32(0))
            else:
                out.append(jnp.asarray((step // stride) % g, jnp.int32))
            stride = stride * g
        return tuple(i if isinstance(o, int) and o == 0 else i + jnp.asarray(o, jnp.int32)
                     for i, o in zip(reversed(out), self.offsets))

    def changed(self, bref, a, b):
        """Whether ``bref``'s block differs between steps ``a`` and ``b``."""
        if bref.has_indirect:
            return True
        return _differ(bref.compute_index(*self.indices(a)), bref.compute_index(*self.indices(b)))


def _when(pred, f):
    if pred is False:
        return
    if pred is True:
        f()
    else:
        jax.lax.cond(pred, lambda: (f(), None)[1], lambda: None)


def _active(bref) -> bool:
    return bref.is_buffered and not bref.is_trivial_windowing


def _step(grid: _Grid, s, brefs, refs, body, scratches, no_pipelining, explicit_indices):
    """One pipeline step; returns the brefs with their slot counters advanced.
    As in JAX, every fetch is started before any wait, and every write-back
    before waiting on earlier ones."""
    n, last, first = grid.num_steps, s == grid.num_steps - 1, s == 0
    idx = grid.indices(s)
    brefs = [b.bind_existing_ref(r, idx) for b, r in zip(brefs, refs)]
    ins = [k for k, b in enumerate(brefs) if b.is_input and _active(b)]
    outs = [k for k, b in enumerate(brefs) if b.is_output and _active(b)]
    for k in ins:
        b, r = brefs[k], refs[k]
        if no_pipelining:
            b.copy_in(r, idx)
            continue
        ahead = max(b.in_buffer_count - 1, 0)
        t = s + ahead
        fetch = (_or(first, grid.changed(b, s - 1, s)) if ahead == 0
                 else grid.changed(b, t - 1, t) & (t < n))
        _when(fetch & (t >= b.prefetched_count), functools.partial(b.copy_in, r, grid.indices(t)))
        brefs[k] = b.advance_copy_in_slot(fetch)
    for k in ins:
        b, r = brefs[k], refs[k]
        arrived = True if no_pipelining else \
            _or(first, grid.changed(b, s - 1, s)) & (s >= b.prefetched_count)
        _when(arrived, functools.partial(b.wait_in, r, idx))
    blocks = [b.current_ref for b in brefs]
    if explicit_indices:     # as in JAX, pl.program_id then stays the kernel's
        body(PipelineStep(idx, jnp.asarray(s, jnp.int32)), *blocks, *scratches)
    else:
        body(*blocks, *scratches)
    moving = {k: _or(last, grid.changed(brefs[k], s, s + 1)) for k in set(ins) | set(outs)}
    for k in outs:
        b, r = brefs[k], refs[k]
        if no_pipelining:
            b.copy_out(r, idx)
            continue
        _when(moving[k], functools.partial(b.copy_out, r, idx))
        brefs[k] = b.advance_copy_out_slot(moving[k])
    for k in outs:
        b, r = brefs[k], refs[k]
        if no_pipelining:
            b.wait_out(r, idx)
            continue
        lag = max(b.out_buffer_count - 1, 1)
        done = (s >= lag) & grid.changed(b, s - lag, s - lag + 1)
        _when(done, functools.partial(b.wait_out, r, grid.indices(s - lag)))
        brefs[k] = b.advance_wait_out_slot(done)
    if not no_pipelining:
        for k in ins:
            brefs[k] = brefs[k].advance_wait_in_slot(moving[k])
    return [b.unbind_refs() for b in brefs]


def _grid_env(grid: _Grid, step, explicit_indices):
    """Where ``pl.program_id``/``pl.num_programs`` (in the body and in index maps)
    are the pipeline's at ``step``, as JAX's scheduler sets them; with explicit
    indices they stay the kernel's."""
    if explicit_indices:
        return contextlib.nullcontext()
    return nested_grid(grid.indices(step), grid.grid)


def _prologue(grid: _Grid, brefs, refs, no_pipelining):
    """Starts the first ``in_count - 1`` fetches of every input."""
    out = []
    for b, r in zip(brefs, refs):
        if b.is_input and _active(b) and not no_pipelining:
            for t in range(max(b.in_buffer_count - 1, 0)):
                fetch = (t < grid.num_steps) & _or(t == 0, t > 0 and grid.changed(b, t - 1, t))
                if t >= b.prefetched_count:
                    _when(fetch, functools.partial(b.copy_in, r, grid.indices(t)))
                b = b.advance_copy_in_slot(fetch)
        elif (b.is_input and b.is_trivial_windowing and b.window_ref is not None
              and b.prefetched_count < 1):
            pf_sync_copy(r, b.window_ref)     # the whole operand, once, before the loop
        out.append(b)
    return out


def _epilogue(grid: _Grid, brefs, refs):
    """Awaits the write-backs still in flight after the last step."""
    n = grid.num_steps
    for b, r in zip(brefs, refs):
        if b.is_output and _active(b):
            for lag in range(max(b.out_buffer_count - 1, 1) - 1, -1, -1):
                done = (lag < n) & _or(lag == 0, lag > 0 and grid.changed(b, n - 1 - lag, n - lag))
                _when(done, functools.partial(b.wait_out, r, grid.indices(n - 1 - lag)))
                b = b.advance_wait_out_slot(done)
        elif b.is_output and b.is_trivial_windowing and b.window_ref is not None:
            pf_sync_copy(b.window_ref, r)     # the whole operand, once, after the loop


def pf_sync_copy(src, dst):
    from pallas_tpu.primitives import sync_copy
    sync_copy(src, dst)


def run_pipeline(body, grid, refs, allocations, *, scratches=(), no_pipelining=False,
                 explicit_indices=False, grid_offsets=None):
    """Runs ``body`` over ``grid`` with ``allocations`` (BufferedRefs, one per ref);
    ``grid_offsets`` shift the indices (one core's share of a split grid)."""
    alloc_leaves, tree = jax.tree.flatten(
        tuple(allocations), is_leaf=lambda x: isinstance(x, BufferedRef) or x is None)
    ref_leaves = tree.flatten_up_to(tuple(refs))
    for i, b in enumerate(alloc_leaves):
        if not isinstance(b, BufferedRef):
            raise TypeError(f"emit_pipeline: allocations[{i}] is {b!r}, not a "
                            "pltpu.BufferedRef (make them with make_allocations or "
                            "BufferedRef.input/output/input_output).")
    g = _Grid(grid, grid_offsets)
    brefs = [b.initialize_slots() for b in alloc_leaves]

    def run():
        with _grid_env(g, 0, explicit_indices):
            bs = _prologue(g, brefs, ref_leaves, no_pipelining)

        def loop(s, slots):
            cur = [dataclasses.replace(b, **dict(zip(_SLOTS, st))) for b, st in zip(bs, slots)]
            with _grid_env(g, s, explicit_indices):
                cur = _step(g, s, cur, ref_leaves, body, scratches, no_pipelining,
                            explicit_indices)
            return [tuple(getattr(b, f) for f in _SLOTS) for b in cur]
        slots = [tuple(getattr(b, f) for f in _SLOTS) for b in bs]
        slots = jax.lax.fori_loop(0, g.num_steps, loop, slots)
        done = [dataclasses.replace(b, **dict(zip(_SLOTS, st))) for b, st in zip(bs, slots)]
        if not no_pipelining:
            with _grid_env(g, g.num_steps - 1, explicit_indices):
                _epilogue(g, done, ref_leaves)
        else:
            for b, r in zip(done, ref_leaves):
                if b.is_output and b.is_trivial_windowing and b.window_ref is not None:
                    pf_sync_copy(b.window_ref, r)
    n = g.num_steps
    _when(bool(n > 0) if isinstance(n, (int, np.integer)) else jnp.asarray(n > 0), run)


def has_trivial_windowing(spec, grid, shape) -> bool:
    """JAX's trivial-windowing rule: ``spec``'s block is the whole operand of
    ``shape`` at every step of ``grid``. The block covers every dim (each an
    int or ``pl.Blocked`` equal to the operand's size; no squeezed, Element,
    BoundedSlice or Indirect dim) and the index map reads no grid index whose
    size is not a static 1, and no Ref. Such an operand gets one unsliced
    buffer, copied in before the pipeline's loop and out after it."""
    if spec is None or spec.block_shape is None:
        return True
    if len(spec.block_shape) != len(shape):
        return False
    for d, n in zip(spec.block_shape, shape):
        if isinstance(d, pf.Blocked):
            size = d.block_size
        elif isinstance(d, (int, np.integer)) and not isinstance(d, bool):
            size = int(d)
        else:
            return False
        if size != n:
            return False
    if spec.index_map is None:
        return True
    grid = tuple(grid)
    varying = [k for k, g in enumerate(grid) if not (isinstance(g, (int, np.integer)) and g == 1)]
    if not varying:
        return True
    sizes = tuple(int(g) if isinstance(g, (int, np.integer)) else 2 for g in grid)

    def index_map(*idx):
        with nested_grid(idx, sizes):      # pl.program_id in the map is a grid index
            return spec.index_map(*idx)
    closed = jax.make_jaxpr(index_map)(*[jnp.int32(0)] * len(grid))
    jaxpr = closed.jaxpr
    if any(isinstance(v.aval, jax.ref.AbstractRef) for v in jaxpr.constvars):
        return False                       # a Ref may change while the pipeline runs
    read = {id(jaxpr.invars[k]) for k in varying}
    used = [v for e in jaxpr.eqns for v in e.invars] + list(jaxpr.outvars)
    return not any(id(v) in read for v in used)


def make_allocations(*refs, in_specs=(), out_specs=(), grid=(), tiling=None):
    """One BufferedRef per operand, for ``pl.run_scoped`` (JAX's make_allocations).
    An operand whose block is all of it at every step (``has_trivial_windowing``)
    gets one buffer of its own shape (unless its spec asks for a buffer count)."""
    in_specs = _as_tuple(in_specs)
    out_specs = _as_tuple(out_specs)
    if len(refs) != len(in_specs) + len(out_specs):
        raise TypeError(f"make_allocations: {len(in_specs) + len(out_specs)} BlockSpecs but "
                        f"{len(refs)} operands given.")

    def one(spec, ref, kind):
        mode = spec.pipeline_mode
        trivial = has_trivial_windowing(spec, grid, tuple(ref.shape))
        count = (1 if trivial else 2) if mode is None else mode.buffer_count
        if kind is BufferType.OUTPUT and mode is not None and mode.use_lookahead:
            raise ValueError("make_allocations: outputs do not take use_lookahead.")
        ty = hijax_refs.operand_type(ref) or jax.ShapeDtypeStruct(tuple(ref.shape), ref.dtype)
        return BufferedRef.create(
            spec, ty, kind, count,
            grid_rank=len(grid),
            use_lookahead=kind is BufferType.INPUT and mode is not None and mode.use_lookahead,
            source_memory_space=source_space(ref), tiling=tiling, is_trivial_windowing=trivial,
            prefetched_count=0 if mode is None or kind is BufferType.OUTPUT
            else mode.prefetched_count)
    n_in = len(in_specs)
    return (*(one(s, r, BufferType.INPUT) for s, r in zip(in_specs, refs[:n_in])),
            *(one(s, r, BufferType.OUTPUT) for s, r in zip(out_specs, refs[n_in:])))


def _as_tuple(specs):
    return tuple(specs) if isinstance(specs, (list, tuple)) else (specs,)
