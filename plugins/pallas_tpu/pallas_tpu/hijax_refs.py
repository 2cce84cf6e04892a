"""Hijax types (JAX's ``HiType``: one value of several arrays) in TPU kernels.

The frontend passes an operand of a hijax type to the kernel as one Ref of
that type (``pallas_frontend.hijax_operands``); the kernel is then lowered to
one over the arrays' Refs. Here the TPU side of that: ``emit_pipeline``
buffers such an operand's blocks in a buffer of the same hijax type
(``HijaxBuffer``), and a DMA between two hijax Refs is the type's own
``dma_start``/``dma_wait`` (which issue DMAs of its arrays), as in JAX.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

from pallas_tpu import _jax_private
from pallas_tpu.primitives import dma_start_p, dma_wait_p, join_view


def is_hijax_type(aval) -> bool:
    """Whether ``aval`` is a hijax type (JAX's ``HiType``: one value of several arrays)."""
    return bool(getattr(aval, "is_high", False))


def operand_type(ref) -> Any:
    """The hijax type of the operand ``ref`` (a Ref or a view of one), with the
    view's shape; None for an operand of plain arrays."""
    base = getattr(ref, "ref", ref)          # a view's Ref
    try:
        inner = getattr(jax.typeof(base), "inner_aval", None)
    except TypeError:
        return None
    if not is_hijax_type(inner):
        return None
    return inner.update(shape=tuple(ref.shape))


@dataclasses.dataclass(frozen=True)
class HijaxBuffer:
    """A scratch buffer of hijax type ``type`` in ``memory_space`` (a
    ``pl.run_scoped`` / scratch type, as ``VMEM(shape, dtype)`` is for arrays)."""
    type: Any
    memory_space: Any

    shape = property(lambda self: tuple(self.type.shape))
    dtype = property(lambda self: self.type.dtype)

    def get_ref_aval(self):
        return jax.ref.AbstractRef(self.type, memory_space=self.memory_space)


def _as_view(part):
    """A Ref or view as a view (JAX's ``TransformedRef``), as a hijax type's
    ``dma_start``/``dma_wait`` take them."""
    part = join_view(part)
    return part if hasattr(part, "transforms") else _jax_private.transformed_ref(part, ())


def _parts(args, tree):
    src, dst, dst_sem, src_sem, device_id = jax.tree.unflatten(tree, args)
    src, dst = _as_view(src), _as_view(dst)
    ty = jax.typeof(src.ref).inner_aval
    if not (is_hijax_type(ty) and is_hijax_type(jax.typeof(dst.ref).inner_aval)):
        raise NotImplementedError(
            "a DMA between a Ref of a hijax type and a Ref of plain arrays: copy between "
            "two Refs of the same hijax type, or between the arrays of its lo_ty().")
    sem = lambda s: None if s is None else join_view(s)
    return ty, src, dst, sem(dst_sem), sem(src_sem), device_id


def _dma_start(*args, tree, effect_spec, priority, add, device_id_type):
    ty, src, dst, dst_sem, src_sem, device_id = _parts(args, tree)
    ty.dma_start(src, dst, src_sem, dst_sem, device_id=device_id,
                 device_id_type=device_id_type, priority=priority, add=add)
    return []


def _dma_wait(*args, tree, effect_spec, wait_for, device_id_type):
    if wait_for != "all":
        raise NotImplementedError(
            f"wait_{wait_for}() on a DMA of a hijax type: JAX's hijax types define one "
            "dma_wait; use .wait().")
    ty, src, dst, dst_sem, src_sem, device_id = _parts(args, tree)
    ty.dma_wait(src, dst, src_sem, dst_sem, device_id=device_id, device_id_type=device_id_type)
    return []


# JAX's hijax lowering protocol (the same in JAX 0.10-0.12): a DMA with a hijax
# Ref operand is lowered by the rule when its kernel is lowered to its arrays
for _prim, _rule in ((dma_start_p, _dma_start), (dma_wait_p, _dma_wait)):
    _prim.is_high = lambda *avals, **_: any(is_hijax_type(a) for a in avals)
    _prim.to_lojax = _rule
