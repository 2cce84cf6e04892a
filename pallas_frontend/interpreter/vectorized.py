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
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from pallas_frontend import _jax_compat as jc
from pallas_frontend.backend_api import KernelIR
from pallas_frontend.interpreter import execute
from pallas_frontend.interpreter.batched_blocks import BatchedAccess, batched_access
from pallas_frontend.grid_analysis import GridAnalysis, analyze_grid, coverage_report

# Batches are never smaller than this, whatever the operands weigh.
_MIN_BATCH_BUDGET = 1 << 20
# A sequential loop this short is unrolled: static slices, no loop-carried copies.
_MAX_UNROLLED_STEPS = 8
# Batched blocks may occupy at most this multiple of the operands' bytes.
_BATCH_BYTES_FACTOR = 2


@dataclasses.dataclass(frozen=True)
class VectorizedPlan:
    """The sequential plan plus the batched schedule chosen for it."""
    base: execute.InterpreterPlan
    analysis: GridAnalysis
    batch_axes: tuple[int, ...]              # run batched (may be none)
    step_axes: tuple[int, ...]               # looped, row-major
    step_coords: np.ndarray                  # (num_steps, len(step_axes)) int32
    accesses: tuple[BatchedAccess, ...]      # inputs then outputs
    note: str = ""                           # why batching was narrowed, if it was

    @property
    def kernel(self) -> KernelIR:
        return self.base.kernel

    @property
    def num_steps(self) -> int:
        return self.step_coords.shape[0]


def make_plan(kernel: KernelIR) -> VectorizedPlan:
    base = execute.make_plan(kernel)
    kernel = base.kernel          # with pl.get_global Refs lifted to scratch
    tables = tuple(lay.table for lay in base.layouts)
    analysis = analyze_grid(kernel, tables, base.body)
    if kernel.debug:
        print(analysis.describe(), file=sys.stdout)
        print(coverage_report(kernel, tables), file=sys.stdout)
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
    why = _unbatchable(plan)
    if why:
        return _schedule(base, analysis, (), f"kernel body cannot be vmapped: {why}")
    return plan


def _operand_bytes(kernel: KernelIR) -> int:
    return sum(int(np.prod(m.array_shape, dtype=np.int64)) * np.dtype(m.dtype).itemsize
               for m in kernel.mappings)


def _schedule(base, analysis, batch_axes, note="") -> VectorizedPlan:
    grid = tuple(base.kernel.grid)
    step_axes = tuple(a for a in range(len(grid)) if a not in batch_axes)
    n_in = len(base.kernel.in_mappings)
    accesses = tuple(batched_access(lay, step_axes, batch_axes, grid, is_output=k >= n_in)
                     for k, lay in enumerate(base.layouts)) if all(grid) else ()
    step_grid = [grid[a] for a in step_axes]
    coords = [c.reshape(-1) for c in np.indices(step_grid)] if step_grid else []
    step_coords = (np.stack(coords, -1) if coords else np.zeros((1, 0))).astype(np.int32)
    return VectorizedPlan(base, analysis, batch_axes, step_axes, step_coords, accesses, note)


def _unbatchable(plan: VectorizedPlan) -> str:
    """'' if the batched body traces; else the error (e.g. a primitive without a vmap rule)."""
    kernel = plan.kernel
    fn = _batched_body(plan)
    args = _abstract_args(plan)
    try:
        jax.eval_shape(fn, *args)
    except Exception as e:  # noqa: BLE001 - any failure means: run sequentially
        return f"{type(e).__name__}: {e}"[:200] or kernel.name
    return ""


def _abstract_args(plan: VectorizedPlan):
    kernel, n_in = plan.kernel, len(plan.kernel.in_mappings)
    args = []
    for a in range(len(kernel.grid)):
        shape = (kernel.grid[a],) if a in plan.batch_axes else ()
        args.append(jax.ShapeDtypeStruct(shape, jnp.int32))
    for k, acc in enumerate(plan.accesses):
        m = acc.layout.table.mapping
        lead = tuple(g for g, on in zip(acc.batch_shape, acc.batch_levels) if on or k >= n_in)
        args.append(jax.ShapeDtypeStruct(lead + m.block_shape, m.dtype))
    for s in kernel.scratch_avals:
        args.append(jax.ShapeDtypeStruct(s.inner_aval.shape, s.inner_aval.dtype))
    return args


def _batched_body(plan: VectorizedPlan):
    """The discharged body under one vmap per batch axis.

    Returns the new output blocks, and when nothing is batched also the new
    scratch values (batched points never observe scratch state, see grid_analysis).
    """
    kernel = plan.kernel
    n_grid, n_in, n_out = len(kernel.grid), len(kernel.in_mappings), len(kernel.out_mappings)
    body = plan.base.body
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
    if not plan.accesses and plan.base.layouts:   # an empty grid
        return execute.run_sequential(plan.base, *inputs)
    base, kernel = plan.base, plan.kernel
    n_in = len(kernel.in_mappings)
    in_acc, out_acc = plan.accesses[:n_in], plan.accesses[n_in:]
    padded_in = [acc.layout.pad(x) for acc, x in zip(in_acc, inputs)]
    scratch = execute.initial_scratch(kernel, inputs)
    body = _batched_body(plan)
    carried = [not acc.per_step for acc in out_acc]

    step_sizes = [kernel.grid[a] for a in plan.step_axes]

    def grid_indices(s):
        idx, k = [], 0
        for a in range(len(kernel.grid)):
            if a in plan.batch_axes:
                idx.append(jnp.arange(kernel.grid[a], dtype=jnp.int32))
            else:
                idx.append(jnp.int32(plan.step_coords[s, k]) if isinstance(s, int) else
                           _unravel(s, step_sizes, k))
                k += 1
        return idx

    def step(s, state):
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

    outs = execute.initial_outputs(base, inputs)
    held = [acc.read(buf, 0) if c else None for acc, buf, c in zip(out_acc, outs, carried)]
    state = (outs, held, scratch)
    if plan.num_steps <= _MAX_UNROLLED_STEPS:
        for s in range(plan.num_steps):
            state = step(s, state)
    else:
        state = lax.fori_loop(0, plan.num_steps, step, state)
    outs, held, _ = state
    outs = [acc.write(buf, 0, h) if c else buf
            for acc, buf, h, c in zip(out_acc, outs, held, carried)]
    return [acc.layout.unpad(o) for acc, o in zip(out_acc, outs)]


def _unravel(s, sizes, k):
    """Coordinate ``k`` of step ``s`` (>= 0) unravelled row-major over ``sizes``."""
    inner = int(np.prod(sizes[k + 1:], dtype=np.int64))
    c = s if inner == 1 else lax.div(s, np.int32(inner))
    return c if k == 0 else lax.rem(c, np.int32(sizes[k]))
