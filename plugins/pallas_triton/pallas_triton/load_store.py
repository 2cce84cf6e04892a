"""``pallas_triton.load``/``store``: ``tl.load``/``tl.store`` with masks, fill values,
cache hints and integer-array offsets, as kernel primitives with interpret rules."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from pallas_frontend.backend_api import kernel_primitive, ref_effects, register_interpret_rule
from pallas_triton.emitters import register
from pallas_triton.primitive_refs import (
    OWNER, array_indices, indexed_shape_of, indexer_of, read_indexed, split_ref,
    transform_leaves, write_indexed)
from pallas_triton.refs import resolve_indexer


load_p = kernel_primitive("triton_load", owner=OWNER)


def load(ref, *, mask=None, other=None, cache_modifier=None, eviction_policy=None,
         volatile=False):
    """``tl.load`` of ``ref`` (or ``ref.at[...]``) with an optional mask and fill value."""
    if other is not None and mask is None:
        raise ValueError("pallas_triton.load: other= requires mask=")
    base, transforms = split_ref(ref)
    leaves, tree = transform_leaves(transforms)
    extra = [x for x in (mask, other) if x is not None]
    return load_p.bind(base, *leaves, *extra, tree=tree, has_mask=mask is not None,
                       has_other=other is not None, cache_modifier=cache_modifier,
                       eviction_policy=eviction_policy, volatile=volatile)


def _load_abstract(ref, *rest, tree, **_):
    n = tree.num_leaves
    nd = indexer_of(tree, list(rest[:n]))
    shape = ref.shape if nd is None else indexed_shape_of(nd)
    return jax.core.ShapedArray(shape, ref.dtype)


load_p.def_effectful_abstract_eval(lambda *a, **p: (_load_abstract(*a, **p), ref_effects(reads=[0])))


def _load_rule(ctx, x, *rest, tree, has_mask, has_other, **_):
    n = tree.num_leaves
    nd = indexer_of(tree, list(rest[:n]))
    value = read_indexed(x, nd)
    if has_mask:
        mask = rest[n]
        other = rest[n + 1] if has_other else jnp.zeros((), x.dtype)
        value = jnp.where(mask, value, other)
    return (None,) * (1 + len(rest)), value


register_interpret_rule(load_p, _load_rule)


def _hints(cache_modifier=None, eviction_policy=None, volatile=False, **_):
    text = ""
    if cache_modifier:
        text += f", cache_modifier={cache_modifier!r}"
    if eviction_policy:
        text += f", eviction_policy={eviction_policy!r}"
    if volatile:
        text += ", volatile=True"
    return text


def _gather_indexer(w, transforms):
    """The indexer of a pallas_triton.load/store: integer-array offsets allowed."""
    w.allow_gather = True
    try:
        return resolve_indexer(w, transforms)
    finally:
        w.allow_gather = False


@register("triton_load")
def _emit_load(w, eqn, ins):
    p = eqn.params
    n = p["tree"].num_leaves
    nd = _gather_indexer(w, jax.tree_util.tree_unflatten(p["tree"], eqn.invars[1:1 + n]))
    rest = ins[1 + n:]
    mask = rest[0] if p["has_mask"] else None
    other = rest[1] if p["has_other"] else None
    return [w.load(ins[0], nd, mask=mask, other=other, extra=_hints(**p))]


store_p = kernel_primitive("triton_store", owner=OWNER, multiple_results=True)


def store(ref, val, *, mask=None, eviction_policy=None):
    """``tl.store`` of ``val`` into ``ref`` (or ``ref.at[...]``), where ``mask`` holds."""
    base, transforms = split_ref(ref)
    leaves, tree = transform_leaves(transforms)
    extra = [mask] if mask is not None else []
    store_p.bind(base, *leaves, jnp.asarray(val), *extra, tree=tree,
                 has_mask=mask is not None, eviction_policy=eviction_policy)


store_p.def_effectful_abstract_eval(lambda *args, **params: ([], ref_effects(writes=[0])))


def _store_rule(ctx, x, *rest, tree, has_mask, eviction_policy):
    n = tree.num_leaves
    nd = indexer_of(tree, list(rest[:n]))
    val = rest[n]
    idx = array_indices(nd)
    if idx is not None:
        if has_mask:        # masked-off lanes write nowhere (their index is sent out of range)
            shape = jnp.broadcast_shapes(*(i.shape for i in idx), jnp.shape(rest[n + 1]))
            idx = (jnp.where(rest[n + 1], jnp.broadcast_to(idx[0], shape), x.shape[0]),
                   *(jnp.broadcast_to(i, shape) for i in idx[1:]))
        return (x.at[idx].set(jnp.asarray(val).astype(x.dtype), mode="drop"),) + \
            (None,) * len(rest), []
    if has_mask:
        val = jnp.where(rest[n + 1], val, read_indexed(x, nd))
    return (write_indexed(x, nd, val),) + (None,) * len(rest), []


register_interpret_rule(store_p, _store_rule)


@register("triton_store")
def _emit_store(w, eqn, ins):
    p = eqn.params
    n = p["tree"].num_leaves
    nd = _gather_indexer(w, jax.tree_util.tree_unflatten(p["tree"], eqn.invars[1:1 + n]))
    val = ins[1 + n]
    mask = ins[2 + n] if p["has_mask"] else None
    w.store(ins[0], nd, val, mask=mask, extra=_hints(eviction_policy=p["eviction_policy"]))
    return []
