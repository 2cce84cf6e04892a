"""A compiled ``dot_general`` that WGMMA cannot tile, as warp-level
``mma.sync`` products (``plgpu.mma``): blocks of 16 or 32 rows, float32
blocks (three bfloat16 products) and operands computed in registers.

The operands are loaded from SMEM in the MMA register layouts, ``k`` a slice
at a time (so only one slice of each operand is in registers); an operand
that is not a block read whole from SMEM, and every float32 operand (split
into bfloat16 high and low parts), is staged through a scoped SMEM buffer
first. The accumulator goes back through SMEM so that the result has the
tile layout the rest of the kernel's arithmetic uses (``layouts.py``).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from pallas_mgpu import dot_paths, evaluate, layouts

K_SLICE = 64     # the k of the operand slices held in registers at once


def dot(invals, plan: dot_paths.DotPlan, out_dtype):
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu
    split = plan.dtype == "float32"
    op_dtype = jnp.bfloat16 if split else jnp.dtype(plan.dtype)
    warps = dot_paths.m_warps(plan.m, plan.n)
    shapes = ((plan.m, plan.k), (plan.k, plan.n))
    whole = [evaluate.ref_read_whole(v) for v in invals]
    refs = [None if split else r for r in whole]
    scratch = []
    for shape, ref in zip(shapes, refs):
        if ref is None:
            scratch += [plgpu.SMEM(shape, op_dtype)] * (2 if split else 1)
    scratch.append(plgpu.SMEM((plan.m, plan.n), jnp.float32))

    def scope(*bufs):
        bufs = list(bufs)
        result_buf = bufs.pop()
        parts = []                     # per operand: its SMEM pieces (hi[, lo])
        for value, ref, source in zip(invals, refs, whole):
            if ref is not None:
                parts.append([ref])
                continue
            targets = [bufs.pop(0) for _ in range(2 if split else 1)]
            _stage(value, source, targets, op_dtype)
            parts.append(targets)
        lhs_layout = plgpu.Layout.MMA_LHS(op_dtype, m_warps=warps)
        rhs_layout = plgpu.Layout.MMA_RHS(op_dtype, m_warps=warps)
        acc = plgpu.layout_cast(jnp.zeros((plan.m, plan.n), jnp.float32),
                                plgpu.Layout.MMA_ACC(op_dtype, m_warps=warps))
        # float32: the small cross terms first, then hi * hi
        products = ((1, 0), (0, 1), (0, 0)) if split else ((0, 0),)
        step = int(np.gcd(plan.k, K_SLICE))
        for k0 in range(0, plan.k, step):
            lhs = [plgpu.layout_cast(r[:, pl.ds(k0, step)], lhs_layout) for r in parts[0]]
            rhs = [plgpu.layout_cast(r[pl.ds(k0, step), :], rhs_layout) for r in parts[1]]
            for i, j in products:
                acc = plgpu.mma(acc, lhs[i], rhs[j])
        result_buf[...] = acc
        return layouts.cast_tile(result_buf[...])

    result = pl.run_scoped(scope, *scratch)
    return result.astype(out_dtype) if result.dtype != out_dtype else result


STAGE_ROWS = 32      # rows of a float32 operand converted at once (register pressure)


def _stage(value, source, targets, op_dtype):
    """Writes ``value`` into ``targets`` in ``op_dtype`` (float32: its high
    and low bfloat16 parts); from its SMEM ``source`` a few rows at a time
    when it was read whole from one (then only those rows are in registers)."""
    from jax.experimental import pallas as pl
    rows = value.shape[0]
    step = int(np.gcd(rows, STAGE_ROWS)) if source is not None else rows
    for r0 in range(0, rows, step):
        window = (pl.ds(r0, step), slice(None))
        part = layouts.cast_tile(source[window] if source is not None else value)
        hi = part.astype(op_dtype)
        targets[0][window] = hi
        if len(targets) > 1:
            targets[1][window] = (part - hi.astype(jnp.float32)).astype(op_dtype)
