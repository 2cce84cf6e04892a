"""Typed PRNG key arrays (``jax.random.key``, ``to_pallas_key``) as operands of
a rebuilt kernel.

Compiled for TPU, a key operand goes to JAX's ``pallas_call`` as a key array:
JAX's Mosaic lowering keeps its data in memory and loads a Pallas key from
SMEM as its two words. A Pallas key of this plugin's implementation
(``keyed_random.PALLAS_KEY_IMPL``, which the interpreters run) is handed over
as a key of JAX's ``pallas_tpu`` implementation, the same two words, whose
``random_bits`` seeds the core's PRNG with them.

JAX's TPU interpreter cannot hold key arrays (it fills buffers with NaN), so
in TPU interpret mode a key operand travels as its key data (uint32, the
key's shape followed by the implementation's key shape) and the kernel sees
a ``KeyRefView`` of that buffer: ``evaluate.py`` reads and writes keys
through it (``key_access``).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import pallas_frontend as pf


def is_key(dtype) -> bool:
    """Whether ``dtype`` is a typed PRNG key's dtype."""
    try:
        return jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
    except TypeError:
        return False


_PALLAS_IMPL = []     # this plugin's Pallas key implementation (keyed_random registers it)


def register_pallas_impl(impl) -> None:
    _PALLAS_IMPL[:] = [impl]
    _our_pallas_key_dtype.cache_clear()


@functools.cache
def _our_pallas_key_dtype():
    if not _PALLAS_IMPL:
        return None
    return jax.eval_shape(lambda: jax.random.wrap_key_data(
        jnp.zeros((1, 2), jnp.uint32), impl=_PALLAS_IMPL[0])).dtype


def _impl(dtype):
    if dtype == _our_pallas_key_dtype():
        return _PALLAS_IMPL[0]
    return jax.random.key_impl(jnp.zeros((), dtype))


def key_shape(dtype) -> tuple[int, ...]:
    """The trailing dims a key of ``dtype`` adds to its key data."""
    return tuple(jax.eval_shape(lambda: jax.random.key_data(jnp.zeros((), dtype))).shape)


def wrap(data, dtype):
    """Keys of ``dtype`` from their key data."""
    return jax.random.wrap_key_data(data, impl=_impl(dtype))


# --- compiled for TPU ---------------------------------------------------------------------

@functools.cache
def _jax_pallas_key_dtype():
    from jax.experimental.pallas import tpu as _jax_pltpu  # noqa: F401  (registers it)
    return jax.eval_shape(lambda: jax.random.wrap_key_data(
        jnp.zeros((1, 2), jnp.uint32), impl="pallas_tpu")).dtype


def for_mosaic_dtype(dtype):
    """The key dtype JAX's Mosaic lowering gets for keys of ``dtype``: JAX's
    ``pallas_tpu`` implementation for this plugin's Pallas keys."""
    if dtype == _our_pallas_key_dtype():
        return _jax_pallas_key_dtype()
    return dtype


def is_pallas_key(dtype) -> bool:
    """Whether keys of ``dtype`` are Pallas keys (ours or JAX's ``pallas_tpu``)."""
    return is_key(dtype) and dtype in (_our_pallas_key_dtype(), _jax_pallas_key_dtype())


def to_mosaic(x):
    """An operand as JAX's Mosaic lowering takes it (see ``for_mosaic_dtype``)."""
    if is_key(x.dtype) and for_mosaic_dtype(x.dtype) != x.dtype:
        return jax.random.wrap_key_data(jax.random.key_data(x), impl="pallas_tpu")
    return x


def from_mosaic(x, dtype):
    """A result of JAX's call as the frontend's output type ``dtype``."""
    if is_key(dtype) and x.dtype != dtype:
        return wrap(jax.random.key_data(x), dtype)
    return x


# --- TPU interpret mode ---------------------------------------------------------------------

class KeyRefView:
    """A Ref of keys of ``dtype`` stored as their key data in ``ref`` (uint32).
    It has ``ref`` and ``transforms`` as a view has, so the evaluator replays
    the control flow that holds it instead of re-binding it."""

    transforms = ()

    def __init__(self, ref, dtype):
        self.ref, self.dtype = ref, dtype
        self.shape = tuple(ref.shape)[:len(ref.shape) - len(key_shape(dtype))]

    def read(self):
        return wrap(self.ref[...], self.dtype)

    def write(self, keys):
        self.ref[...] = jax.random.key_data(keys)


def physical_type(dtype, shape):
    """(shape, dtype) of the key data of a ``shape`` array of keys of ``dtype``."""
    return tuple(shape) + key_shape(dtype), jnp.dtype(jnp.uint32)


def _index(keys, indexer):
    """``keys[indexer]`` for one of JAX's ``NDIndexer``s (slices and scalar indices)."""
    axis = 0
    for idx in indexer.indices:
        if hasattr(idx, "start") and hasattr(idx, "size"):
            if getattr(idx, "stride", 1) != 1:
                raise NotImplementedError("pallas_tpu interpret mode: a strided read of keys.")
            keys = lax.dynamic_slice_in_dim(keys, idx.start, idx.size, axis)
            axis += 1
        elif np.shape(idx) == ():
            keys = lax.dynamic_index_in_dim(keys, idx, axis, keepdims=False)
        else:
            raise NotImplementedError("pallas_tpu interpret mode: keys gathered by an array "
                                      "of indices.")
    return keys


def key_access(eqn, invals):
    """A ``get``/``swap`` of a ``KeyRefView`` (JAX's state primitives: operands
    (ref, [value,] *transform leaves), param ``tree``)."""
    name = eqn.primitive.name
    view = invals[0]
    n_lead = {"get": 1, "swap": 2}.get(name)
    if n_lead is None:
        raise NotImplementedError(f"pallas_tpu interpret mode: '{name}' on a Ref of PRNG keys.")
    transforms = jax.tree.unflatten(eqn.params["tree"], invals[n_lead:])
    keys = view.read()
    whole = True
    for t in transforms:
        if not hasattr(t, "indices"):
            raise NotImplementedError(f"pallas_tpu interpret mode: {type(t).__name__} of a "
                                      "Ref of PRNG keys.")
        whole = whole and all(hasattr(i, "size") and i.size == n and np.shape(i.start) == ()
                              and isinstance(i.start, (int, np.integer)) and i.start == 0
                              for i, n in zip(t.indices, keys.shape))
        keys = _index(keys, t)
    if name == "get":
        return keys
    if not whole:
        raise NotImplementedError("pallas_tpu interpret mode: a write to part of a Ref of "
                                  "PRNG keys (write the whole Ref).")
    view.write(invals[1])
    return keys


def _data_transforms(transforms, dtype):
    """A view's ``ref.at[...]`` indexers over keys, extended to their key data:
    each also takes every word of the key's trailing dims."""
    trailing = key_shape(dtype)
    out = []
    for t in transforms:
        if not (hasattr(t, "indices") and hasattr(t, "shape")) or any(
                np.shape(i) != () and not hasattr(i, "size") for i in t.indices):
            raise NotImplementedError(f"pallas_tpu interpret mode: a copy of PRNG keys "
                                      f"through {type(t).__name__} (slice the keys instead).")
        out.append(dataclasses.replace(
            t, indices=(*t.indices, *(pf.ds(0, k) for k in trailing)),
            shape=(*t.shape, *trailing)))
    return tuple(out)


def as_key_data(eqn, invals):
    """(eqn, invals) of a copy (a DMA) between Refs of keys, with each
    ``KeyRefView`` and view of one replaced by its key data and the view's
    indexers extended to it; the equation's ``tree`` param is rebuilt."""
    def data(part):
        if isinstance(part, KeyRefView):
            return part.ref
        if isinstance(part, tuple) and len(part) == 2 and isinstance(part[0], KeyRefView):
            return (part[0].ref, _data_transforms(part[1], part[0].dtype))
        return part
    parts = jax.tree.unflatten(eqn.params["tree"], invals)
    flat, tree = jax.tree.flatten([data(p) for p in parts])
    return eqn.replace(params={**eqn.params, "tree": tree}), flat
