"""Cumulative products under Triton's interpreter, in the order XLA on CPU computes them.

JAX lowers ``cumprod`` to a reduce-window over the whole axis, and XLA's CPU
compiler rewrites a reduce-window longer than 16 into blocks of 16: a scan inside
each block, the scan of the blocks' totals (the same rewrite, recursively), and
one product of the two. Each output of a reduce-window folds its window from the
left, starting at 1. In XLA's denormal mode (flushed, ``denormal_mode``) the order
decides more than rounding: a running product that passes through the denormal
range becomes 0 for good, where XLA's blocked order may keep a normal result
(issue 39: 0 for XLA's 1.44e-38, whose float64 value is 1.4396e-38). Folded here
in XLA's order with NumPy, the results are XLA's bit for bit (float32, forward and
reverse, lengths 5 to 4100, measured).
"""

from __future__ import annotations

import numpy as np

BLOCK = 16          # XLA's CPU base length for its reduce-window rewrite


def _windows(x: np.ndarray, reverse: bool) -> np.ndarray:
    """Every output's window folded from its left end (last axis, length <= BLOCK)."""
    n = x.shape[-1]
    out = np.empty_like(x)
    for i in range(n):
        lo, hi = (i, n) if reverse else (0, i + 1)
        acc = np.ones(x.shape[:-1], x.dtype)
        for k in range(lo, hi):
            acc = acc * x[..., k]
        out[..., i] = acc
    return out


def _blocked(x: np.ndarray, reverse: bool) -> np.ndarray:
    n = x.shape[-1]
    if n <= BLOCK:
        return _windows(x, reverse)
    m = -(-n // BLOCK) * BLOCK                 # padded with ones at the end, as XLA does
    ones = np.ones(x.shape[:-1] + (m - n,), x.dtype)
    tiles = np.concatenate([x, ones], -1).reshape(x.shape[:-1] + (m // BLOCK, BLOCK))
    inner = _windows(tiles, reverse)
    totals = _blocked(inner[..., 0 if reverse else -1], reverse)
    one = np.ones(totals.shape[:-1] + (1,), x.dtype)
    # the blocks before (after, reversed) each block: the totals' scan shifted by one
    outer = (np.concatenate([totals[..., 1:], one], -1) if reverse
             else np.concatenate([one, totals[..., :-1]], -1))
    return (inner * outer[..., None]).reshape(x.shape[:-1] + (m,))[..., :n]


def cumprod(x, axis: int, length: int, reverse: bool):
    """The cumulative product of interpreter tensor ``x`` over the first ``length``
    lanes of ``axis`` (the rest is Triton's power-of-two padding, left as it is)."""
    from triton.runtime.interpreter import TensorHandle
    data = np.moveaxis(np.array(x.handle.data), axis, -1)
    with np.errstate(all="ignore"):
        data[..., :length] = _blocked(data[..., :length], reverse)
    out = np.ascontiguousarray(np.moveaxis(data, -1, axis))
    return type(x)(TensorHandle(out, x.handle.dtype), x.type)
