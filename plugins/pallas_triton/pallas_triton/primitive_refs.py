"""What Triton's Ref primitives (``load``/``store``, the atomics) share: their owner
tag, a Ref view split into its base and transforms, and the indexed reads and
writes of whole arrays that their interpret rules (the frontend's interpreter) use."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import pallas_frontend as pl

OWNER = "triton"


def split_ref(ref):
    """(underlying ref, transforms) of a Ref or ``ref.at[...]`` view."""
    if hasattr(ref, "transforms") and hasattr(ref, "ref"):
        return ref.ref, tuple(ref.transforms)
    return ref, ()


def _indexed_shape(ref_aval_shape, transforms):
    if not transforms:
        return tuple(ref_aval_shape)
    return tuple(transforms[-1].get_indexer_shape())


def array_indices(nd):
    """The indices of a gather/scatter access (every index an array or scalar), or None."""
    if nd is None or not getattr(nd, "int_indexer_shape", ()):
        return None
    if any(isinstance(ix, pl.Slice) for ix in nd.indices):
        raise NotImplementedError("pallas_triton.load/store mixing integer-array indices with "
                                  "slices: index every dim with an array (they broadcast)")
    return tuple(jnp.asarray(ix, jnp.int32) for ix in nd.indices)


def read_indexed(x, nd):
    if nd is None:
        return x
    idx = array_indices(nd)
    if idx is not None:     # masked-off lanes may point outside: clip, the mask discards them
        return x.at[idx].get(mode="clip")
    for axis in range(len(nd.indices) - 1, -1, -1):
        ix = nd.indices[axis]
        if isinstance(ix, pl.Slice):
            span = (ix.size - 1) * ix.stride + 1
            x = _window(x, axis, ix.start, span)
            if ix.stride != 1:
                x = lax.slice_in_dim(x, 0, span, ix.stride, axis)
        else:
            x = lax.dynamic_index_in_dim(x, ix, axis, keepdims=False)
    return x


def _fill(dtype):
    """What a lane outside the Ref reads (NaN or the lowest int: visible if a mask misses)."""
    if jnp.issubdtype(dtype, jnp.inexact):
        return jnp.array(jnp.nan, dtype)
    if jnp.issubdtype(dtype, jnp.integer):
        return jnp.array(jnp.iinfo(dtype).min, dtype)
    return jnp.zeros((), dtype)


def _in_range(start, span, n) -> bool:
    return isinstance(start, (int, np.integer)) and 0 <= start and start + span <= n


def _window(x, axis, start, span):
    """``span`` elements of ``x`` from ``start`` along ``axis``; the part outside ``x``
    reads ``_fill`` (a masked-off lane). lax.dynamic_slice would instead clamp the
    window into ``x``, shifting every lane (JAX's issue #21143)."""
    if _in_range(start, span, x.shape[axis]):
        return lax.slice_in_dim(x, int(start), int(start) + span, axis=axis)
    cfg = [(0, 0, 0)] * x.ndim
    cfg[axis] = (span, span, 0)
    padded = lax.pad(x, _fill(x.dtype), cfg)     # exact for starts in [-span, n]
    return lax.dynamic_slice_in_dim(padded, start + span, span, axis)


def write_indexed(x, nd, value):
    if nd is None:
        return jnp.broadcast_to(value, x.shape).astype(x.dtype)
    idx = array_indices(nd)
    if idx is not None:
        return x.at[idx].set(value.astype(x.dtype), mode="drop")
    starts, shape = [], []
    for ix in nd.indices:
        if isinstance(ix, pl.Slice):
            if ix.stride != 1:
                raise NotImplementedError("strided Ref writes in the interpret rule")
            starts.append(ix.start)
            shape.append(ix.size)
        else:
            starts.append(ix)
            shape.append(1)
    value = jnp.broadcast_to(value, indexed_shape_of(nd)).reshape(shape).astype(x.dtype)
    # Lanes past the Ref land in padding that is cut off again (never clamped into it).
    pads = [ix.size if isinstance(ix, pl.Slice) and not _in_range(ix.start, ix.size, n) else 0
            for ix, n in zip(nd.indices, x.shape)]
    if not any(pads):
        return lax.dynamic_update_slice(x, value, starts)
    padded = lax.pad(x, jnp.zeros((), x.dtype), [(p, p, 0) for p in pads])
    out = lax.dynamic_update_slice(padded, value, [st + p for st, p in zip(starts, pads)])
    return lax.slice(out, pads, [p + n for p, n in zip(pads, x.shape)])


def indexed_shape_of(nd):
    if getattr(nd, "int_indexer_shape", ()):       # gather: the broadcast index shape leads
        return tuple(nd.get_indexer_shape())
    return tuple(ix.size for ix in nd.indices if isinstance(ix, pl.Slice))


def indexer_of(tree, leaves):
    transforms = jax.tree_util.tree_unflatten(tree, leaves)
    return transforms[0] if transforms else None


def transform_leaves(transforms):
    leaves, tree = jax.tree_util.tree_flatten(transforms)
    return leaves, tree
