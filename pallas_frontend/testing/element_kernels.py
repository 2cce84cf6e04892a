"""Conformance kernels over ``pl.Element`` block dims whose answer depends on
where each window starts: halo stencils over padded arrays (the index map's
offset counts from the start of the padding, ``padding[0]`` elements before
the array) and windows at offsets that are not multiples of 8 or of the block.
A backend that pads at the wrong end, or rounds offsets, reads shifted data.

Padding reads are unspecified (NaN in the interpreter), so the kernels mask
every element that lies outside the array by its position before using it.
Each builder has a NumPy float64 reference."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import pallas_frontend as pl


def _zero_padded(x, lo: int, hi: int, axis: int = 0):
    pad = [(0, 0)] * x.ndim
    pad[axis] = (lo, hi)
    return np.pad(np.asarray(x, np.float64), pad)


def stencil_1d(n: int, block: int, weights: tuple[float, ...], lo: int, **call):
    """``y[j] = sum_k weights[k] * x[j + k - lo]`` with zeros outside ``x``;
    the input window of each output block is ``pl.Element(block + halo)``
    with padding ``(lo, len(weights) - 1 - lo)``, at offset ``i * block``."""
    hi = len(weights) - 1 - lo
    window = block + lo + hi

    def body(x_ref, o_ref):
        # element t of the window sits at array position i * block - lo + t
        pos = pl.program_id(0) * block - lo + jax.lax.iota(jnp.int32, window)
        x = jnp.where((pos >= 0) & (pos < n), x_ref[...], 0.0)
        acc = jnp.zeros((block,), jnp.float32)
        for k, w in enumerate(weights):
            acc = acc + w * x[k:k + block]
        o_ref[...] = acc
    return pl.pallas_call(
        body, jax.ShapeDtypeStruct((n,), jnp.float32), grid=(n // block,),
        in_specs=[pl.BlockSpec((pl.Element(window, (lo, hi)),), lambda i: (i * block,))],
        out_specs=pl.BlockSpec((block,), lambda i: (i,)), name="stencil_1d", **call)


def stencil_1d_ref(x, weights, lo: int):
    n, hi = len(x), len(weights) - 1 - lo
    xp = _zero_padded(x, lo, hi)
    return sum(w * xp[k:k + n] for k, w in enumerate(weights))


def stencil_rows(rows: int, cols: int, br: int, lo: int, hi: int, **call):
    """A 2-D stencil down the rows: ``y[r] = x[r - lo] - 2 x[r] + 3 x[r + hi]``
    (zeros outside), rows windowed by ``pl.Element(br + lo + hi, (lo, hi))``
    at offset ``i * br``, columns in 128-wide blocks on a second grid axis."""
    window = br + lo + hi

    def body(x_ref, o_ref):
        pos = pl.program_id(0) * br - lo + jax.lax.broadcasted_iota(jnp.int32, (window, 128), 0)
        x = jnp.where((pos >= 0) & (pos < rows), x_ref[...], 0.0)
        o_ref[...] = x[0:br] - 2.0 * x[lo:lo + br] + 3.0 * x[lo + hi:lo + hi + br]
    return pl.pallas_call(
        body, jax.ShapeDtypeStruct((rows, cols), jnp.float32), grid=(rows // br, cols // 128),
        in_specs=[pl.BlockSpec((pl.Element(window, (lo, hi)), 128),
                               lambda i, j: (i * br, j))],
        out_specs=pl.BlockSpec((br, 128), lambda i, j: (i, j)), name="stencil_rows", **call)


def stencil_rows_ref(x, lo: int, hi: int):
    rows = x.shape[0]
    xp = _zero_padded(x, lo, hi)
    return xp[0:rows] - 2.0 * xp[lo:lo + rows] + 3.0 * xp[lo + hi:lo + hi + rows]


def shifted_window(n: int, block: int, shift: int, **call):
    """``y = 2 * x[shift:shift + n]``: unpadded ``pl.Element(block)`` windows at
    offsets ``i * block + shift`` (``shift`` not a multiple of 8)."""
    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0
    return pl.pallas_call(
        body, jax.ShapeDtypeStruct((n,), jnp.float32), grid=(n // block,),
        in_specs=[pl.BlockSpec((pl.Element(block),), lambda i: (i * block + shift,))],
        out_specs=pl.BlockSpec((block,), lambda i: (i,)), name="shifted_window", **call)


def shifted_window_ref(x, n: int, shift: int):
    return 2.0 * np.asarray(x, np.float64)[shift:shift + n]


def overlapping_windows(n_out: int, block: int, stride: int, start: int, **call):
    """Row ``i`` of the output is ``2 * x[start + i * stride:][:block] + i``:
    windows overlap (``stride < block``) and start unaligned."""
    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0 + pl.program_id(0).astype(jnp.float32)
    return pl.pallas_call(
        body, jax.ShapeDtypeStruct((n_out, block), jnp.float32), grid=(n_out,),
        in_specs=[pl.BlockSpec((pl.Element(block),), lambda i: (start + i * stride,))],
        out_specs=pl.BlockSpec((None, block), lambda i: (i, 0)),
        name="overlapping_windows", **call)


def overlapping_windows_ref(x, n_out: int, block: int, stride: int, start: int):
    x = np.asarray(x, np.float64)
    return np.stack([2.0 * x[start + i * stride:start + i * stride + block] + i
                     for i in range(n_out)])
