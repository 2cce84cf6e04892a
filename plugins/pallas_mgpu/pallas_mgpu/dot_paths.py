"""Which Hopper matmul instruction a compiled ``dot_general`` of two blocks
takes, decided from shapes and dtypes alone (``schedule.py`` lays the SMEM
operands out for it, ``check.py`` refuses what has none, ``matmul.py`` emits it).

- ``wgmma``: the warpgroup MMA, reading both operands from swizzled SMEM; tiles
  of 64 rows by a multiple of 8 columns; float16/bfloat16, or float32 (tf32)
  with the right operand K-major.
- ``mma``: the warp-level ``mma.sync`` (``plgpu.mma``) on register operands
  loaded from plain SMEM (the right one as (k, n) or (n, k)), for what WGMMA
  cannot tile: rows a multiple of 16
  (down to one warp per 16 rows), float16/bfloat16, and float32 as three
  bfloat16 products (hi*hi + hi*lo + lo*hi, about 16 mantissa bits: closer to
  float32 than tf32's 10).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pallas_mgpu import _jax_private

HALF = ("float16", "bfloat16")
MMA_K = 16                     # the k of one 16-bit mma.sync


@dataclasses.dataclass(frozen=True)
class DotPlan:
    path: str | None           # "wgmma", "mma", or None (no instruction maps it)
    m: int
    n: int
    k: int
    dtype: str
    reason: str = ""           # why nothing maps it (path None)


def m_warps(m: int, n: int) -> int | None:
    """Warps along m for an ``mma.sync`` accumulator of (m, n): the most of 4,
    2, 1 whose tile (16 * w rows, 8 * (4 // w) columns) divides it."""
    for w in (4, 2, 1):
        if m % (16 * w) == 0 and n % (8 * (4 // w)) == 0:
            return w
    return None


def plan(lhs_shape, rhs_shape, lhs_dtype, rhs_dtype, dimension_numbers) -> DotPlan:
    (lc, rc), (lb, rb) = dimension_numbers
    lhs_dtype, rhs_dtype = np.dtype(lhs_dtype).name, np.dtype(rhs_dtype).name
    if lb or rb or len(lhs_shape) != 2 or len(rhs_shape) != 2:
        return DotPlan(None, 0, 0, 0, lhs_dtype, "batched or non-2-D operands: loop over the "
                       "batch dim and multiply 2-D blocks")
    m, k = lhs_shape[1 - lc[0]], lhs_shape[lc[0]]
    n = rhs_shape[1 - rc[0]]
    if lhs_dtype != rhs_dtype or lhs_dtype not in HALF + ("float32",):
        return DotPlan(None, m, n, k, lhs_dtype, "operands must share one dtype of float16, "
                       "bfloat16 or float32")
    if m % 64 == 0 and n % 8 == 0 and (lhs_dtype in HALF or tuple(rc) == (1,)):
        return DotPlan("wgmma", m, n, k, lhs_dtype)
    if tuple(lc) != (1,):
        return DotPlan(None, m, n, k, lhs_dtype, "the warp-level MMA fallback takes the left "
                       "operand as (m, k) only (a transposed one needs WGMMA's 64-row tiles)")
    if not mma_fits(m, n, k):
        return DotPlan(None, m, n, k, lhs_dtype, f"WGMMA tiles are 64 rows by a multiple of 8 "
                       f"columns, and the warp-level MMA fallback needs m a multiple of 16, n of "
                       f"8 (32 for 16-row blocks) and k of {MMA_K}")
    if since := _jax_private.plgpu_lacks("mma"):
        return DotPlan(None, m, n, k, lhs_dtype, "WGMMA tiles are 64 rows by a multiple of 8 "
                       "columns, and " + _jax_private.needs_newer_jax(
                           "the warp-level MMA fallback (plgpu.mma)", since).rstrip("."))
    return DotPlan("mma", m, n, k, lhs_dtype)


def mma_fits(m: int, n: int, k: int) -> bool:
    return m_warps(m, n) is not None and k % MMA_K == 0


def plan_eqn(eqn) -> DotPlan:
    a, b = (v.aval for v in eqn.invars)
    return plan(a.shape, b.shape, a.dtype, b.dtype, eqn.params["dimension_numbers"])
