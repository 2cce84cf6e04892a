"""A Ref or a view of one as pytree parts, for primitives that take views.

A view (``ref.at[...]``) is not a pytree in user code, so a primitive's
operands hold it as ``(ref, transforms)``; its indexers are pytrees whose
leaves become operands. An indexer may itself be a view of another Ref, as
in an indirect DMA through part of an index Ref, ``x.at[idx_ref.at[:n]]``
(JAX takes that too): such an index travels as an ``IndexView`` node, so
its Ref and its own indexers are operands as well, and ``join_view`` makes
the nested view again over whatever the leaves were replaced by (JAX's
Refs when rebuilding for JAX, buffers in the CPU model).
"""

from __future__ import annotations

import dataclasses

import jax

from pallas_tpu import _jax_private


@dataclasses.dataclass(frozen=True)
class IndexView:
    """A view of a Ref used as an index: its Ref and its transforms."""
    ref: object
    transforms: tuple

    @property
    def shape(self) -> tuple:
        """The view's shape (a dynamic size stays as its value or variable)."""
        if self.transforms and hasattr(self.transforms[-1], "get_indexer_shape"):
            return tuple(self.transforms[-1].get_indexer_shape())
        aval = getattr(self.ref, "aval", None) or jax.typeof(self.ref)
        return tuple(getattr(aval, "inner_aval", aval).shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)


jax.tree_util.register_pytree_node(
    IndexView, lambda v: ((v.ref, v.transforms), None),
    lambda _, children: IndexView(*children))


def _is_view(x) -> bool:
    return hasattr(x, "transforms") and hasattr(x, "ref")


def _map_indices(transforms, fn) -> tuple:
    """``transforms`` with ``fn`` applied to every index of every indexer;
    unchanged (the same objects) where ``fn`` changes nothing."""
    ndindexer = _jax_private.ndindexer_type()
    out = []
    for t in transforms:
        if isinstance(t, ndindexer):
            new = tuple(fn(i) for i in t.indices)
            if any(a is not b for a, b in zip(new, t.indices)):
                # no validation: the indexer was validated when the view was made
                t = ndindexer(new, t.shape, t.int_indexer_shape)
        out.append(t)
    return tuple(out)


def _split_index(i):
    if _is_view(i):
        return IndexView(i.ref, _map_indices(tuple(i.transforms), _split_index))
    return i


def split_view(x):
    """A Ref or a view ``ref.at[...]`` -> ``(ref, transforms)``, an index that
    is a view becoming an ``IndexView``; anything else is returned as it is."""
    if _is_view(x):
        return (x.ref, _map_indices(tuple(x.transforms), _split_index))
    return x


def join_index(i, fn=None):
    """An ``IndexView`` index as a view again (its transforms passed through
    ``fn`` first, if given); any other index as it is."""
    if isinstance(i, IndexView):
        transforms = _map_indices(i.transforms, lambda j: join_index(j, fn))
        return _jax_private.transformed_ref(i.ref, fn(transforms) if fn else transforms)
    return i


def join_view(part, fn=None):
    """Inverse of ``split_view`` over the kernel's actual Refs; ``fn`` maps
    each transforms tuple (the outer view's and nested ones) first."""
    if isinstance(part, tuple) and len(part) == 2 and isinstance(part[1], tuple):
        ref, transforms = part
        transforms = _map_indices(transforms, lambda i: join_index(i, fn))
        return _jax_private.transformed_ref(ref, fn(transforms) if fn else transforms)
    return part


def nested_views(transforms) -> list:
    """The ``IndexView`` indices among ``transforms``' indexers."""
    return [i for t in transforms for i in getattr(t, "indices", ()) if isinstance(i, IndexView)]
