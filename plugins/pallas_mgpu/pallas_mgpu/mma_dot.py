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

def dot(invals, plan: dot_paths.DotPlan, out_dtype, rhs_transposed: bool = False):
    """``invals[0] @ invals[1]`` (``invals[1].T`` when ``rhs_transposed``: the
    right operand given as (n, k), loaded through a transposed SMEM view)."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu
    split = plan.dtype == "float32"
    op_dtype = jnp.bfloat16 if split else jnp.dtype(plan.dtype)
    warps = dot_paths.m_warps(plan.m, plan.n)
    step = int(np.gcd(plan.k, K_SLICE_SPLIT if split else K_SLICE))
    whole = [evaluate.ref_read_whole(v) for v in invals]
    # how each operand reaches the MMA: "ref" (its SMEM block, as is), "slice"
    # (from its SMEM block, converted one k slice at a time), "value" (staged once)
    how = ["slice" if split and r is not None else "ref" if r is not None else "value"
           for r in whole]
    pieces = 2 if split else 1
    scratch = []
    rhs_shape, rhs_slice = ((plan.n, plan.k), (plan.n, step)) if rhs_transposed else \
        ((plan.k, plan.n), (step, plan.n))
    for h, shape, sliced in zip(how, ((plan.m, plan.k), rhs_shape), ((plan.m, step), rhs_slice)):
        if h != "ref":
            scratch += [plgpu.SMEM(shape if h == "value" else sliced, op_dtype)] * pieces
    acc_layout = plgpu.Layout.MMA_ACC(op_dtype, m_warps=warps)
    tile = layouts.tile_layout((plan.m, plan.n))
    # the result goes through SMEM when the rest of the kernel lays the tile out otherwise
    park = tile is None or acc_layout.to_mgpu() != tile.to_mgpu()
    if park:
        scratch.append(plgpu.SMEM((plan.m, plan.n), jnp.float32))

    def scope(*bufs):
        bufs = list(bufs)
        parked = bufs.pop() if park else None
        parts = []                     # per operand: its SMEM pieces (hi[, lo])
        for value, h, source in zip(invals, how, whole):
            if h == "ref":
                parts.append([source])
                continue
            targets = [bufs.pop(0) for _ in range(pieces)]
            if h == "value":
                _convert(value, targets, (slice(None), slice(None)), op_dtype)
            parts.append(targets)
        lhs_layout = plgpu.Layout.MMA_LHS(op_dtype, m_warps=warps)
        rhs_layout = plgpu.Layout.MMA_RHS(op_dtype, m_warps=warps)
        acc = plgpu.layout_cast(jnp.zeros((plan.m, plan.n), jnp.float32), acc_layout)
        # float32: the small cross terms first, then hi * hi
        products = ((1, 0), (0, 1), (0, 0)) if split else ((0, 0),)
        for k0 in range(0, plan.k, step):
            window = ((slice(None), pl.ds(k0, step)),
                      (slice(None), pl.ds(k0, step)) if rhs_transposed else
                      (pl.ds(k0, step), slice(None)))
            for i, (h, source) in enumerate(zip(how, whole)):
                if h == "slice":
                    _convert(layouts.cast_tile(source[window[i]]), parts[i],
                             (slice(None), slice(None)), op_dtype)
            lhs = [plgpu.layout_cast(r[window[0] if how[0] != "slice" else ...], lhs_layout)
                   for r in parts[0]]
            rhs = [plgpu.layout_cast(_rhs_view(r, window[1] if how[1] != "slice" else None,
                                               rhs_transposed), rhs_layout) for r in parts[1]]
            for i, j in products:
                acc = plgpu.mma(acc, lhs[i], rhs[j])
        if parked is None:
            return acc
        parked[...] = acc
        return layouts.cast_tile(parked[...])

    result = pl.run_scoped(scope, *scratch)
    return result.astype(out_dtype) if result.dtype != out_dtype else result


K_SLICE = 64          # the k of the operand slices held in registers at once
K_SLICE_SPLIT = 32    # float32: the k of the slices converted to bfloat16 at once


def _convert(value, targets, window, op_dtype):
    """Writes ``value`` into ``targets[window]`` in ``op_dtype`` (two targets:
    its high and low bfloat16 parts)."""
    value = layouts.cast_tile(value)
    hi = value.astype(op_dtype)
    targets[0][window] = hi
    if len(targets) > 1:
        targets[1][window] = (value - hi.astype(jnp.float32)).astype(op_dtype)


def _rhs_view(ref, window, transposed: bool):
    """The right operand's (k, n) slice read from ``ref``: a window of it (or
    all of it), through a transposed view when ``ref`` holds (n, k)."""
    if window is not None:
        ref = ref.at[window]
    return ref.T[...] if transposed else ref[...]
