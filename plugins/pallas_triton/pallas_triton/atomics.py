"""The atomics (``atomic_add`` ... ``atomic_xchg``, ``atomic_cas``): ``tl.atomic_*`` as
kernel primitives, with interpret rules that read-modify-write the whole array."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from pallas_frontend.backend_api import kernel_primitive, ref_effects, register_interpret_rule
from pallas_triton.emitters import register
from pallas_triton.errors import unsupported
from pallas_triton.primitive_refs import (
    OWNER, indexed_shape_of, indexer_of, read_indexed, split_ref, transform_leaves,
    write_indexed)
from pallas_triton.refs import resolve_indexer


atomic_rmw_p = kernel_primitive("triton_atomic_rmw", owner=OWNER)
_ATOMIC_OPS = {
    "add": jnp.add, "sub": jnp.subtract, "max": jnp.maximum, "min": jnp.minimum,
    "and": jnp.bitwise_and, "or": jnp.bitwise_or, "xor": jnp.bitwise_xor,
    "xchg": lambda old, new: new,
}


def _atomic(op):
    def atomic(ref, idx, val, *, mask=None):
        f"""Atomically applies {op} at ``ref[idx]``; returns the old values."""
        view = ref.at[idx] if idx is not None else ref
        base, transforms = split_ref(view)
        leaves, tree = transform_leaves(transforms)
        if op == "sub":   # Triton has no atomic_sub: add the negation
            val = -jnp.asarray(val)
        extra = [mask] if mask is not None else []
        return atomic_rmw_p.bind(base, *leaves, jnp.asarray(val), *extra, tree=tree,
                                 op="add" if op == "sub" else op, has_mask=mask is not None)
    atomic.__name__ = f"atomic_{op}"
    atomic.__doc__ = f"Atomic {op} at ``ref[idx]`` (where ``mask`` holds); returns the old values."
    return atomic


atomic_add, atomic_sub, atomic_max, atomic_min = (_atomic(o) for o in ("add", "sub", "max", "min"))
atomic_and, atomic_or, atomic_xor, atomic_xchg = (_atomic(o) for o in ("and", "or", "xor", "xchg"))


def _atomic_effectful(*args, **params):
    return _atomic_abstract(*args, **params), ref_effects(reads=[0], writes=[0])


def _atomic_abstract(ref, *rest, tree, **_):
    nd = indexer_of(tree, list(rest[:tree.num_leaves]))
    shape = ref.shape if nd is None else indexed_shape_of(nd)
    return jax.core.ShapedArray(shape, ref.dtype)


atomic_rmw_p.def_effectful_abstract_eval(_atomic_effectful)


def _atomic_rule(ctx, x, *rest, tree, op, has_mask):
    n = tree.num_leaves
    nd = indexer_of(tree, list(rest[:n]))
    old = read_indexed(x, nd)
    new = _ATOMIC_OPS[op](old, rest[n]).astype(x.dtype)
    if has_mask:
        new = jnp.where(rest[n + 1], new, old)
    return (write_indexed(x, nd, new),) + (None,) * len(rest), old


register_interpret_rule(atomic_rmw_p, _atomic_rule)


@register("triton_atomic_rmw")
def _emit_atomic(w, eqn, ins):
    p = eqn.params
    n = p["tree"].num_leaves
    nd = resolve_indexer(w, jax.tree_util.tree_unflatten(p["tree"], eqn.invars[1:1 + n]))
    ptr, bounds, _ = w.address(ins[0], nd)
    mask = ins[2 + n] if p["has_mask"] else None
    if bounds and mask:
        mask = f"({bounds}) & ({mask})"
    mask = mask or bounds
    tail = (f", mask={mask}" if mask else "") + ")"
    dtype = np.dtype(eqn.invars[0].aval.dtype)
    if p["op"] == "xchg" and w.target == "interpret" and dtype.itemsize in (4, 8) and \
            np.issubdtype(dtype, np.floating):
        # Triton's interpreter exchanges integers only; a float exchange is the same
        # bits moved, so exchange them as an integer of the same width.
        from pallas_triton.emitters import tl_dtype
        bits = "tl.int32" if dtype.itemsize == 4 else "tl.int64"
        old = (f"tl.atomic_xchg({ptr}.to(tl.pointer_type({bits})), "
               f"{ins[1 + n]}.to({bits}, bitcast=True)" + tail)
        return [f"{old}.to({tl_dtype(dtype)}, bitcast=True)"]
    return [f"tl.atomic_{p['op']}({ptr}, {ins[1 + n]}" + tail]


atomic_cas_p = kernel_primitive("triton_atomic_cas", owner=OWNER)


def atomic_cas(ref, cmp, val):
    """Compare-and-swap at ``ref`` (a Ref or ``ref.at[...]``): stores ``val`` where the
    current value equals ``cmp``; returns the old values."""
    base, transforms = split_ref(ref)
    leaves, tree = transform_leaves(transforms)
    return atomic_cas_p.bind(base, *leaves, jnp.asarray(cmp), jnp.asarray(val), tree=tree)


atomic_cas_p.def_effectful_abstract_eval(_atomic_effectful)


def _cas_rule(ctx, x, *rest, tree):
    n = tree.num_leaves
    nd = indexer_of(tree, list(rest[:n]))
    old = read_indexed(x, nd)
    new = jnp.where(old == rest[n], rest[n + 1], old)
    return (write_indexed(x, nd, new),) + (None,) * len(rest), old


register_interpret_rule(atomic_cas_p, _cas_rule)


@register("triton_atomic_cas")
def _emit_cas(w, eqn, ins):
    n = eqn.params["tree"].num_leaves
    nd = resolve_indexer(w, jax.tree_util.tree_unflatten(eqn.params["tree"], eqn.invars[1:1 + n]))
    ptr, bounds, _ = w.address(ins[0], nd)
    if bounds:
        raise unsupported("atomic_cas on a block that may overhang its array")
    return [f"tl.atomic_cas({ptr}, {ins[1 + n]}, {ins[2 + n]})"]
