"""Memory of the SparseCore CPU model: buffers and views of them.

A view (``ref.at[...]``, ``ref.reshape``, ``slice_subcore_vmem_from_shared``)
becomes integer index arrays into its buffer, so one read, write or atomic add
serves every view; each slice and index is checked against its dim first.
"""

from __future__ import annotations

import threading

import numpy as np

from pallas_tpu import _jax_private
from pallas_tpu import sc_primitives as scp
from pallas_tpu.view_parts import IndexView

# atomics (addupdate*, fetch_and_add) of every program hold it
ATOMIC = threading.Lock()


def poison(shape, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.inexact):
        return np.full(shape, np.nan, dtype)
    if np.issubdtype(dtype, np.integer):
        return np.full(shape, np.iinfo(dtype).min, dtype)
    return np.zeros(shape, dtype)


class Buf:
    """One memory buffer: ``data`` (NumPy), its space and, for per-program
    scratch, its position among the scratch operands."""

    def __init__(self, data: np.ndarray, space=None, scratch_index=None):
        self.data, self.space, self.scratch_index = data, space, scratch_index



def _index_arrays(buf: Buf, transforms, prog, op: str):
    """Integer index arrays into ``buf.data`` selecting the view ``transforms``
    make, and the rows an indirect DMA moves (``plsc.Indices`` skips the rows
    whose index is its ``ignored_value``; None: all)."""
    base = buf.data
    idx = tuple(np.indices(base.shape, sparse=True))
    keep = None
    for n, t in enumerate(transforms):
        shape = np.broadcast_shapes(*(a.shape for a in idx)) if idx else ()
        if hasattr(t, "dtype") and not hasattr(t, "indices"):     # ref.bitcast(dtype)
            if n:
                raise NotImplementedError(f"{op}: a bitcast after other view transforms is not "
                                          "modelled by the SparseCore CPU model.")
            base, idx = _bitcast_view(base, np.dtype(t.dtype), op)
            continue
        if isinstance(t, scp.SubcoreSlice):
            k = shape[-1] // t.num_subcores
            sel = (Ellipsis, slice(prog.subcore * k, (prog.subcore + 1) * k))
            idx = tuple(np.broadcast_to(a, shape)[sel] for a in idx)
            continue
        new_shape = _jax_private.reshape_view_shape(t)
        if new_shape is not None:
            idx = tuple(np.broadcast_to(a, shape).reshape(new_shape) for a in idx)
            continue
        if not hasattr(t, "indices"):
            raise NotImplementedError(f"{op}: the view transform {type(t).__name__} is not "
                                      "modelled by the SparseCore CPU model.")
        sel = []
        for d, i in enumerate(t.indices):
            if hasattr(i, "size") and hasattr(i, "stride") and hasattr(i, "start"):
                start, size, stride = int(np.asarray(i.start)), int(i.size), int(i.stride)
                last = start + (size - 1) * stride
                if size and (start < 0 or last >= shape[d]):
                    raise IndexError(f"{op}: slice [{start}:{start + size * stride}:{stride}] of "
                                     f"dim {d} is out of range for size {shape[d]}.")
                sel.append(np.arange(start, start + size * stride, stride)[:size]
                           if size else np.zeros((0,), int))
                sel[-1] = ("slice", sel[-1])
            else:
                a, rows = _offsets(i, prog, op)
                if rows is not None:
                    keep = rows if keep is None else keep & rows
                if np.any((a < 0) | (a >= shape[d])):
                    bad = a[(a < 0) | (a >= shape[d])]
                    raise IndexError(f"{op}: index {bad.tolist()} of dim {d} is out of range for "
                                     f"size {shape[d]}.")
                sel.append(("int", a))
        idx = tuple(np.broadcast_to(a, shape)[_outer(sel)] for a in idx)
    return base, idx, keep


def _bitcast_view(data, dtype, op):
    """``data`` seen as ``dtype`` as a TPU bitcasts a Ref: a narrower type
    multiplies the second-minor dim (row ``r * k + h`` holds part ``h`` of row
    ``r``, low bits first). Returns an array sharing ``data``'s memory and
    index arrays into it for the bitcast view's shape."""
    old, new = data.dtype.itemsize, dtype.itemsize
    if old == new:
        view = data.view(dtype)
        return view, tuple(np.indices(view.shape, sparse=True))
    if new > old or data.ndim < 2:
        raise NotImplementedError(f"{op}: a bitcast to a wider type (or of a 1-D Ref) is not "
                                  "modelled by the SparseCore CPU model.")
    k = old // new
    *lead, rows, cols = data.shape
    strides = data.strides
    parts = np.lib.stride_tricks.as_strided(      # [..., r, h, c]: part h of data[..., r, c]
        data.view(dtype), shape=(*lead, rows, k, cols), strides=(*strides[:-1], new, strides[-1]))
    grid = np.indices((*lead, rows * k, cols), sparse=True)
    return parts, (*grid[:-2], grid[-2] // k, grid[-2] % k, grid[-1])


def _offsets(i, prog, op):
    """An integer index (a value, an index Ref's buffer or a view of one, or
    ``Indices``) as an array, its ignored entries replaced by 0, and which
    rows to keep (or None)."""
    from pallas_tpu.sc_mesh import Indices
    ignored = None
    if isinstance(i, Indices):
        i, ignored = i.values, i.ignored_value
    if isinstance(i, IndexView):
        a = read(i.ref, i.transforms, prog, f"{op} (index Ref view)")
    else:
        a = np.array(i.data if isinstance(i, Buf) else i)
    if ignored is None:
        return a, None
    rows = a != ignored
    return np.where(rows, a, 0), rows


def _outer(sel):
    """NumPy indexing: slices as outer-product ranges, integer arrays broadcast
    together (one gather) and placed first, as JAX's indexers do."""
    arrays = [a for kind, a in sel if kind == "int" and a.ndim]
    ranges = [a for kind, a in sel if kind == "slice"]
    n_arr = len(np.broadcast_shapes(*(a.shape for a in arrays))) if arrays else 0
    out, r = [], 0
    for kind, a in sel:
        if kind == "slice":
            shape = [1] * (n_arr + len(ranges))
            shape[n_arr + r] = a.size
            out.append(a.reshape(shape))
            r += 1
        elif a.ndim:
            out.append(a.reshape(a.shape + (1,) * len(ranges)))
        else:
            out.append(a)
    return tuple(out)


def read(buf, transforms, prog, op="read"):
    if not transforms:
        return buf.data.copy()
    base, idx, _ = _index_arrays(buf, transforms, prog, op)
    return base[idx]


def rows_moved(buf, transforms, prog, op="DMA"):
    """The rows of ``buf``'s view an indirect DMA moves (None: all)."""
    return _index_arrays(buf, transforms, prog, op)[2] if transforms else None


def write(buf, transforms, prog, value, op="write", add=False, rows=None):
    """Writes (adds) ``value`` to the view; with ``rows``, only those rows of it."""
    base, idx, _ = _index_arrays(buf, transforms, prog, op) if transforms else \
        (buf.data, (Ellipsis,), None)
    value = np.asarray(value).astype(base.dtype)
    if rows is not None:
        shape = np.broadcast_shapes(*(a.shape for a in idx)) if transforms else base.shape
        idx = tuple(np.broadcast_to(a, shape)[rows] for a in idx) if transforms else (rows,)
        value = np.broadcast_to(value, shape)[rows]
    if add:
        with ATOMIC:
            np.add.at(base, idx, value) if transforms or rows is not None \
                else base.__iadd__(value)
    else:
        base[idx] = value
