"""The fast interpreter: parallel grid axes batched, the rest looped in order.

``grid_analysis`` picks the axes ``P`` whose points are independent. The
remaining axes ``S`` run as a loop in row-major order; each step evaluates the
discharged kernel body once, under one ``vmap`` per parallel axis, on all of
that step's blocks (``batched_blocks`` moves them). The result equals
``execute.run_sequential`` exactly: along ``S`` the order of every reduction
is the sequential one, and the points of one step never touch each other's
output elements.

An output whose block does not move along ``S`` (a matmul accumulator over
``k``) stays in the loop carry as its batch of blocks and is written back once.
"""

from __future__ import annotations

import dataclasses
import functools
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from pallas_frontend import _jax_compat as jc
from pallas_frontend.backend_api import KernelIR
from pallas_frontend.grid_analysis import (GridAnalysis, analyze_grid, coverage_report,
                                           written_inputs)
from pallas_frontend.interpreter import accumulate, execute, rowwise
from pallas_frontend.interpreter.batched_blocks import BatchedAccess, batched_access, unravel_step
from pallas_frontend.interpreter.specialize import Filled, body_for_steps
from pallas_frontend.specs import value_dtype

# Batches are never smaller than this, whatever the operands weigh.
_MIN_BATCH_BUDGET = 1 << 20
# A sequential loop this short is unrolled: static slices, no loop-carried copies.
# Longer ones are loops (each unrolled step is one more fusion for XLA to compile).
_MAX_UNROLLED_STEPS = 2
# Batched blocks may occupy at most this multiple of the operands' bytes.
_BATCH_BYTES_FACTOR = 2


@dataclasses.dataclass(frozen=True)
class VectorizedPlan:
    """The sequential plan plus the batched schedule chosen for it."""
    base: execute.InterpreterPlan
    analysis: GridAnalysis
    batch_axes: tuple[int, ...]              # run batched (may be none)
    step_axes: tuple[int, ...]               # looped, row-major
    accesses: tuple[BatchedAccess, ...]      # inputs then outputs
    note: str = ""                           # why batching was narrowed, if it was
    # Per output, (X, t) of ``o = X + t`` when the looped axis is an accumulation
    # (``accumulate``); the body's vmap is then checked only if that path fails.
    accumulation: tuple | None = dataclasses.field(default=None, compare=False)
    # Rows per block when the one batched axis tiles whole rows of a body that
    # never mixes rows (``rowwise``): run on the merged 2-D slab instead.
    merged_rows: int = 0

    @property
    def kernel(self) -> KernelIR:
        return self.base.kernel

    @property
    def step_grid(self) -> tuple[int, ...]:
        return tuple(self.kernel.grid[a] for a in self.step_axes)

    @property
    def num_steps(self) -> int:
        return int(np.prod(self.step_grid, dtype=np.int64))

    def step_coordinate(self, s: int, k: int) -> int:
        """Coordinate ``k`` of the static step ``s``."""
        return int(np.unravel_index(s, self.step_grid)[k])


def make_plan(kernel: KernelIR, *, trial_trace: bool = True) -> VectorizedPlan:
    """``trial_trace=False`` skips the trial trace of the batched body where only a
    trace could fail: the caller then retries with it if tracing the plan raises."""
    base = execute.make_plan(kernel)
    kernel = base.kernel          # with pl.get_global Refs lifted to scratch
    tables = tuple(lay.table for lay in base.layouts)
    analysis = analyze_grid(kernel, tables, base.body)
    if kernel.debug:
        print(analysis.describe(), file=sys.stdout)
        print(coverage_report(kernel, tables), file=sys.stdout)
    written = written_inputs(kernel.jaxpr, len(kernel.grid), len(kernel.in_mappings))
    if written and base.num_points > 1:
        # Batching assumes inputs carry nothing from one point to the next.
        return VectorizedPlan(base, analysis, (), tuple(range(len(kernel.grid))), (),
                              f"the kernel writes input(s) {list(written)}: run sequentially")
    if base.num_points > execute.MAX_TABLE_POINTS and not all(t.is_affine for t in tables):
        # Per-point tables would not fit: the plain loop evaluates index maps as it goes.
        return VectorizedPlan(base, analysis, (), tuple(range(len(kernel.grid))), (),
                              "non-affine index maps on a large grid: run sequentially")
    batch, note = list(analysis.parallel_axes), ""
    budget = max(_MIN_BATCH_BUDGET, _BATCH_BYTES_FACTOR * _operand_bytes(kernel))
    while batch:
        plan = _schedule(base, analysis, tuple(batch))
        if sum(acc.batched_bytes() for acc in plan.accesses) <= budget:
            break
        # Too much at once: loop over the outermost batched axis instead.
        note = f"axis {batch[0]} looped to stay within {budget} bytes of batched blocks"
        batch = batch[1:]
    if not batch:
        return _schedule(base, analysis, (), note)
    plan = dataclasses.replace(plan, note=note)
    terms = _accumulation_terms(plan)
    if terms is not None:
        return dataclasses.replace(plan, accumulation=tuple(terms))
    rows = _merged_rows(plan)
    if rows:
        return dataclasses.replace(plan, merged_rows=rows)
    if not trial_trace and not _lowering_may_refuse(plan.base.body):
        return plan
    return _checked_batchable(plan)


def _merged_rows(plan: VectorizedPlan) -> int:
    """Rows per block if the kernel may run on merged rows (see ``rowwise``), else 0."""
    kernel = plan.kernel
    if plan.num_steps != 1 or len(plan.batch_axes) != 1 or kernel.scratch_avals:
        return 0
    rows, rowful = set(), []
    for k, acc in enumerate(plan.accesses):
        if not acc.is_view or acc.layout.squeezed_axes:
            return 0
        tiled = acc.tiled
        if not any(t is not None for t in tiled) and k < len(kernel.in_mappings):
            rowful.append(False)
            continue
        if tiled[0] != 0 or any(t is not None for t in tiled[1:]):
            return 0
        rows.add(acc.layout.block_sizes[0])
        if k < len(kernel.in_mappings):
            rowful.append(True)
    if len(rows) != 1:
        return 0
    (r,) = rows
    ok = rowwise.rowwise_plan(plan.base.body, len(kernel.grid), plan.batch_axes[0], rowful,
                              len(kernel.out_mappings), r)
    return r if ok else 0


def _checked_batchable(plan: VectorizedPlan) -> VectorizedPlan:
    why = _unbatchable(plan)
    if why:
        return _schedule(plan.base, plan.analysis, (), f"kernel body cannot be vmapped: {why}")
    return plan


def _operand_bytes(kernel: KernelIR) -> int:
    return sum(int(np.prod(m.array_shape, dtype=np.int64)) * value_dtype(m.dtype).itemsize
               for m in kernel.mappings)


def _schedule(base, analysis, batch_axes, note="") -> VectorizedPlan:
    grid = tuple(base.kernel.grid)
    step_axes = tuple(a for a in range(len(grid)) if a not in batch_axes)
    n_in = len(base.kernel.in_mappings)
    accesses = tuple(batched_access(lay, step_axes, batch_axes, grid, is_output=k >= n_in)
                     for k, lay in enumerate(base.layouts)) if all(grid) else ()
    return VectorizedPlan(base, analysis, batch_axes, step_axes, accesses, note)


def _unbatchable(plan: VectorizedPlan) -> str:
    """'' if the batched body traces; else the error (e.g. a primitive without a vmap rule)."""
    kernel = plan.kernel
    fn = _batched_body(plan)
    args = _abstract_args(plan)
    try:
        jax.eval_shape(fn, *args)
        # A lowering that traces Python may still refuse the batched operands
        # (threefry2x32 with (1, 1) keys and batched counts): lower it here,
        # apart, so that the kernel falls back to the sequential loop.
        if _lowering_may_refuse(plan.base.body):
            jax.jit(fn).trace(*args).lower()
    except Exception as e:  # noqa: BLE001 - any failure means: run sequentially
        return f"{type(e).__name__}: {e}"[:200] or kernel.name
    return ""


def _lowering_may_refuse(body) -> bool:
    # A loop or cond lowered by tracing (scan) only re-lowers its body, whose
    # equations are visited on their own: only leaf primitives count.
    return any(jc.lowering_traces_python(e.primitive) and not jc.sub_jaxprs(e)
               for e in _iter_eqns(body))


def _iter_eqns(jaxpr):
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in jc.sub_jaxprs(eqn):
            yield from _iter_eqns(sub)


def _abstract_args(plan: VectorizedPlan):
    kernel, n_in = plan.kernel, len(plan.kernel.in_mappings)
    args = []
    for a in range(len(kernel.grid)):
        shape = (kernel.grid[a],) if a in plan.batch_axes else ()
        args.append(jax.ShapeDtypeStruct(shape, jnp.int32))
    args += [acc.blocks_aval(every_batch_axis=k >= n_in) for k, acc in enumerate(plan.accesses)]
    for s in kernel.scratch_avals:
        args.append(jax.ShapeDtypeStruct(s.inner_aval.shape, s.inner_aval.dtype))
    return args


def _batched_body(plan: VectorizedPlan, body=None):
    """The discharged body (``plan.base.body`` unless given) under one vmap per batch axis.

    Returns the new output blocks, and when nothing is batched also the new
    scratch values (batched points never observe scratch state, see grid_analysis).
    """
    kernel = plan.kernel
    n_grid, n_in, n_out = len(kernel.grid), len(kernel.in_mappings), len(kernel.out_mappings)
    body = plan.base.body if body is None else body
    end = None if not plan.batch_axes else n_in + n_out

    def fn(*args):
        return jc.eval_jaxpr(body, *args)[n_in:end]

    for j in reversed(range(len(plan.batch_axes))):
        axes = [0 if a == plan.batch_axes[j] else None for a in range(n_grid)]
        axes += [0 if acc.batch_levels[j] else None for acc in plan.accesses[:n_in]]
        axes += [0] * n_out + [None] * len(kernel.scratch_avals)
        fn = jax.vmap(fn, in_axes=axes)
    return fn


def run(plan: VectorizedPlan, *inputs):
    """Runs a planned kernel; returns the unpadded outputs."""
    if not plan.accesses and plan.base.layouts:   # empty, large non-affine, or input-writing
        return execute.run_sequential(plan.base, *inputs)
    base, kernel = plan.base, plan.kernel
    n_in = len(kernel.in_mappings)
    in_acc, out_acc = plan.accesses[:n_in], plan.accesses[n_in:]
    padded_in = [acc.layout.pad(x) for acc, x in zip(in_acc, inputs)]
    scratch = execute.initial_scratch(kernel, inputs)
    carried = [not acc.per_step for acc in out_acc]

    step_sizes = [kernel.grid[a] for a in plan.step_axes]

    def grid_indices(s):
        idx, k = [], 0
        for a in range(len(kernel.grid)):
            if a in plan.batch_axes:
                idx.append(jnp.arange(kernel.grid[a], dtype=jnp.int32))
            else:
                idx.append(jnp.int32(plan.step_coordinate(s, k)) if isinstance(s, int) else
                           unravel_step(s, step_sizes, k))
                k += 1
        return idx

    def step(s, state, body):
        outs, held, scr = state
        in_blocks = [acc.read(x, s) for acc, x in zip(in_acc, padded_in)]
        out_blocks = [h if c else acc.read(buf, s)
                      for acc, buf, h, c in zip(out_acc, outs, held, carried)]
        new = body(*grid_indices(s), *in_blocks, *out_blocks, *scr)
        new, scr = new[:len(out_acc)], (new[len(out_acc):] if not plan.batch_axes else scr)
        outs = [buf if c else acc.write(buf, s, blk)
                for acc, buf, blk, c in zip(out_acc, outs, new, carried)]
        held = [blk if c else None for blk, c in zip(new, carried)]
        return outs, held, list(scr)

    if plan.accumulation is not None:
        try:
            outs = _accumulated(plan, padded_in, inputs)
        except Exception:  # noqa: BLE001 - e.g. no vmap rule: the checked loop decides
            outs = None
        if outs is not None:
            return outs
        return run(_checked_batchable(dataclasses.replace(plan, accumulation=None)), *inputs)
    outs = execute.initial_outputs(base, inputs)
    held = [acc.read(buf, 0) if c else None for acc, buf, c in zip(out_acc, outs, carried)]
    state = (outs, held, scratch)
    n = plan.num_steps
    if plan.merged_rows:
        outs = _run_merged(plan, padded_in, outs)
        return [acc.layout.unpad(o) for acc, o in zip(out_acc, outs)]
    axis = _single_step_axis(plan)
    if axis is not None:
        # Peel the first step; the loop body then knows its index is >= 1, which
        # removes `pl.when(program_id == 0)` initialisations from it.
        unrolled = n if n <= _MAX_UNROLLED_STEPS else 1
        for s in range(unrolled):
            body = body_for_steps(base.body, _step_ranges(plan, axis, s, s))
            state = step(s, state, _batched_body(plan, body))
        if unrolled < n:
            rest = body_for_steps(base.body, _step_ranges(plan, axis, 1, n - 1))
            state = lax.fori_loop(1, n, functools.partial(step, body=_batched_body(plan, rest)),
                                  state)
    elif n <= _MAX_UNROLLED_STEPS:
        for s in range(n):
            state = step(s, state, _batched_body(plan))
    else:
        state = lax.fori_loop(0, n, functools.partial(step, body=_batched_body(plan)), state)
    outs, held, _ = state
    outs = [acc.write(buf, 0, h) if c else buf
            for acc, buf, h, c in zip(out_acc, outs, held, carried)]
    return [acc.layout.unpad(o) for acc, o in zip(out_acc, outs)]


def _accumulation_terms(plan: VectorizedPlan):
    """(X, t) per output when the one looped axis accumulates ``o = X + t``, else None."""
    kernel = plan.kernel
    axis = _single_step_axis(plan)
    if axis is None or plan.num_steps < 2 or kernel.scratch_avals or \
            any(acc.per_step for acc in plan.accesses[len(kernel.in_mappings):]) or \
            not all(jnp.issubdtype(m.dtype, np.floating) or
                    jnp.issubdtype(m.dtype, np.integer) for m in kernel.out_mappings):
        return None
    return accumulate.accumulation_terms(plan.base.body, len(kernel.grid),
                                         len(kernel.in_mappings), len(kernel.out_mappings),
                                         _step_ranges(plan, axis, 1, plan.num_steps - 1))


def _accumulated(plan: VectorizedPlan, padded_in, inputs):
    """The unpadded outputs when the looped axis is a sum of contractions (see
    ``accumulate``), else None. Nothing that XLA would only discard is emitted
    (the first call pays for every traced op): the first step's input blocks and
    the outputs' initial buffers are built only when needed."""
    terms, n_in = plan.accumulation, len(plan.kernel.in_mappings)
    out_acc = plan.accesses[n_in:]
    axis = _single_step_axis(plan)
    slabs = accumulate.slab_contraction(plan, padded_in, terms, axis)
    total = slabs if slabs is not None else \
        accumulate.summed_terms(plan, plan.base.layouts, padded_in, terms, axis)
    if total is None:
        return None
    initial = functools.cache(lambda: execute.initial_outputs(plan.base, inputs))
    blocks = [acc.blocks_aval(every_batch_axis=True) for acc in out_acc]
    start = accumulate.initial_parts(
        plan, terms, blocks,
        first_blocks=lambda: [acc.read(x, 0) for acc, x in zip(plan.accesses[:n_in], padded_in)],
        held_blocks=lambda: [acc.read(buf, 0) for acc, buf in zip(out_acc, initial())])
    outs = []
    for k, (acc, x, t, b) in enumerate(zip(out_acc, start, total, blocks)):
        aval = acc.layout.padded_aval
        if isinstance(x, Filled):
            # X + t with X all +0 is t (XLA drops such an add too): the zeros are not built
            x = None if x.is_zero() else x.array()
        t = t.astype(aval.dtype)      # X is of the output's dtype already (initial_parts)
        covered = acc.covers(aval.shape)
        if slabs is not None and covered and (x is None or x.ndim < b.ndim):
            # One block (or none) for every batch point: add it in the slab's layout
            # (no split and merge of the result).
            outs.append(acc.layout.unpad(t if x is None else lax.add(acc.tile(x), t)))
            continue
        buf = aval if covered else initial()[k]     # write reads only aval's shape
        if slabs is not None:
            t = acc.split(t)
        if x is not None:
            # lax.add, not `+`: jnp's operators are jitted, a trace of their own per first call
            t = lax.add(jnp.broadcast_to(x, b.shape), t)
        outs.append(acc.layout.unpad(acc.write(buf, 0, t)))
    return outs


def _single_step_axis(plan: VectorizedPlan):
    """The one looped axis of size > 1, or None (several, or none)."""
    live = [a for a in plan.step_axes if plan.kernel.grid[a] > 1]
    return live[0] if len(live) == 1 else None


def _step_ranges(plan: VectorizedPlan, axis: int, lo: int, hi: int):
    """Known index ranges of the looped axes for steps ``lo..hi`` (the others have size 1)."""
    return {a: ((lo, hi) if a == axis else (0, 0)) for a in plan.step_axes}


def _run_merged(plan: VectorizedPlan, padded_in, outs):
    """One evaluation of the body on the (blocks * rows, ...) slabs (``rowwise``)."""
    kernel, rows = plan.kernel, plan.merged_rows
    n_in = len(kernel.in_mappings)
    total = kernel.grid[plan.batch_axes[0]] * rows

    def slab(acc, buf):
        blocks = acc.read(buf, 0)
        return blocks.reshape((total,) + blocks.shape[2:]) if acc.batch_levels[0] else blocks

    ins = [slab(acc, x) for acc, x in zip(plan.accesses[:n_in], padded_in)]
    olds = [slab(acc, buf) for acc, buf in zip(plan.accesses[n_in:], outs)]
    idx = [jnp.int32(0)] * len(kernel.grid)
    new = rowwise.evaluate_merged(plan.base.body, [*idx, *ins, *olds], total, rows)
    new = new[n_in:n_in + len(olds)]
    g = kernel.grid[plan.batch_axes[0]]
    return [acc.write(buf, 0, blk.reshape((g, rows) + blk.shape[1:]))
            for acc, buf, blk in zip(plan.accesses[n_in:], outs, new)]
