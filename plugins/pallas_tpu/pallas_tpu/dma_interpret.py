"""Local DMAs in the frontend's reference interpreter (``interpret=True``).

The interpreter runs one program at a time, so a copy lands when it starts:
``start`` writes the destination (or adds to it, ``add=True``) and raises the
destination semaphore by the number of elements copied, capped at 32767, as
JAX's ``interpret=True`` counts; ``wait`` lowers it by the size of the
destination (``wait_send``: the source semaphore by the size of the source).
A semaphore read between the two sees the count, as in JAX's tests.

Remote copies name other devices' programs, which this interpreter does not
run; they are refused with the way to run them (TPU interpret mode).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from pallas_frontend.backend_api import register_interpret_rule

from pallas_tpu import _jax_private
from pallas_tpu import primitives as tpu_prims

_SEMAPHORE_CAP = 32767   # JAX's interpreter keeps semaphores as int16


def _base_positions(tree, n_args):
    """Per part (src, dst, dst_sem, src_sem, device_id): the operand position
    of its base Ref (the first leaf of a view), or None for an absent part."""
    parts = jax.tree.unflatten(tree, list(range(n_args)))
    return [None if p is None else jax.tree.leaves(p)[0] if jax.tree.leaves(p) else None
            for p in parts]


def _transforms(tree, args, k):
    part = jax.tree.unflatten(tree, list(args))[k]
    return part[1] if isinstance(part, tuple) and len(part) == 2 else ()


def _view_index(shape, transforms):
    """Integer index arrays into the base array, one per base dim, each of
    the view's shape: reads are ``x[idx]``, writes ``x.at[idx].set``."""
    idx = tuple(jnp.asarray(a) for a in np.indices(shape, sparse=True))
    for t in transforms:
        new_shape = _jax_private.reshape_view_shape(t)
        if new_shape is not None:      # ref.reshape(...): the same elements, row-major
            view_shape = np.broadcast_shapes(*(jnp.shape(a) for a in idx))
            idx = tuple(jnp.broadcast_to(a, view_shape).reshape(new_shape) for a in idx)
            continue
        if not hasattr(t, "indices"):
            raise NotImplementedError(f"pallas_tpu: a DMA through the view transform {t} does "
                                      "not run in the reference interpreter.")
        vectors = []
        for i in t.indices:
            if hasattr(i, "size") and hasattr(i, "stride") and hasattr(i, "start"):
                vectors.append(jnp.asarray(i.start) + i.stride * jnp.arange(i.size))
            else:
                vectors.append(jnp.asarray(i))
        arrays = [v for v in vectors if v.ndim]
        k, sel = 0, []
        for v in vectors:            # an outer product over the sliced dims
            if v.ndim:
                sel.append(v.reshape([-1 if j == k else 1 for j in range(len(arrays))]))
                k += 1
            else:
                sel.append(v)
        view_shape = np.broadcast_shapes(*(jnp.shape(a) for a in idx))
        idx = tuple(jnp.broadcast_to(a, view_shape)[tuple(sel)] for a in idx)
    return idx


def _read(x, transforms):
    return x[_view_index(x.shape, transforms)] if transforms else x


def _write(x, transforms, value):
    if not transforms:
        return jnp.broadcast_to(value, x.shape).astype(x.dtype)
    return x.at[_view_index(x.shape, transforms)].set(value.astype(x.dtype))


def _count(n):
    return jnp.int32(min(int(n), _SEMAPHORE_CAP))


def _refuse_remote(device_id):
    if device_id is not None:
        raise NotImplementedError(
            "pallas_tpu: a remote DMA (make_async_remote_copy) does not run in the frontend's "
            "interpreter (interpret=True runs one device's program); run the kernel under "
            "shard_map with interpret=pallas_tpu.InterpretParams().")


def _start_rule(ctx, *args, tree, effect_spec, priority, add, device_id_type):
    src, dst, dst_sem = _base_positions(tree, len(args))[:3]
    _refuse_remote(jax.tree.unflatten(tree, list(args))[4])
    new = [None] * len(args)
    value = _read(args[src], _transforms(tree, args, 0))
    dst_t = _transforms(tree, args, 1)
    if add:
        value = _read(args[dst], dst_t) + value
    new[dst] = _write(args[dst], dst_t, value)
    if dst_sem is not None:
        sem_t = _transforms(tree, args, 2)
        new[dst_sem] = _write(args[dst_sem], sem_t,
                              _read(args[dst_sem], sem_t) + _count(value.size))
    return new, []


def _wait_rule(ctx, *args, tree, effect_spec, wait_for, device_id_type):
    dst, dst_sem = _base_positions(tree, len(args))[1:3]
    _refuse_remote(jax.tree.unflatten(tree, list(args))[4])
    new = [None] * len(args)
    if dst_sem is None:
        return new, []
    size = int(np.prod(np.shape(_read(args[dst], _transforms(tree, args, 1)))))
    sem_t = _transforms(tree, args, 2)
    new[dst_sem] = _write(args[dst_sem], sem_t, _read(args[dst_sem], sem_t) - _count(size))
    return new, []


register_interpret_rule(tpu_prims.dma_start_p, _start_rule)
register_interpret_rule(tpu_prims.dma_wait_p, _wait_rule)
