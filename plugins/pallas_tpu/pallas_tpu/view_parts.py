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


@dataclasses.dataclass(frozen=True)
class Selection:
    """A ``pl.select_ref`` view (JAX's ``TransformedRef`` over a tuple of Refs)
    as parts: its choices, each a Ref or a view's parts, and JAX's select
    transform, whose index (chosen when the kernel runs) is a leaf. A DMA of a
    SparseCore kernel takes it whole, as JAX's does (``split_view``)."""
    choices: tuple
    select: object

    def chosen(self, idx: int):
        """The choice JAX's lowering takes for ``idx``: the one at ``idx``, and
        the last for an ``idx`` out of range."""
        return self.choices[idx if 0 <= idx < len(self.choices) else -1]


jax.tree_util.register_pytree_node(
    Selection, lambda s: ((s.choices, s.select), None), lambda _, c: Selection(*c))


def _is_view(x) -> bool:
    return hasattr(x, "transforms") and hasattr(x, "ref")


def _is_selection(x) -> bool:
    return _is_view(x) and isinstance(x.ref, tuple)


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
    is a view becoming an ``IndexView``, a selection (``pl.select_ref``) a
    ``Selection`` (viewed further: ``(Selection, transforms)``); anything else
    is returned as it is."""
    if _is_selection(x):
        return Selection(tuple(split_view(c) for c in x.ref), x.transforms[0])
    if _is_view(x):
        ref = split_view(x.ref) if _is_selection(x.ref) else x.ref
        return (ref, _map_indices(tuple(x.transforms), _split_index))
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
    if isinstance(part, Selection):         # JAX's select view
        choices = tuple(join_view(c, fn) for c in part.choices)
        return _jax_private.transformed_ref(choices, (part.select,))
    if isinstance(part, tuple) and len(part) == 2 and isinstance(part[1], tuple):
        ref, transforms = part
        transforms = _map_indices(transforms, lambda i: join_index(i, fn))
        transforms = fn(transforms) if fn else transforms
        if isinstance(ref, Selection):      # a selection viewed further wraps, as in JAX
            selection = join_view(ref, fn)
            return type(selection)(selection, tuple(transforms))
        return _jax_private.transformed_ref(ref, transforms)
    return part


def is_selection_part(part) -> bool:
    """Whether a part (as ``split_view`` made it) is a selection or a view of one."""
    return isinstance(part, Selection) or (
        isinstance(part, tuple) and len(part) == 2 and isinstance(part[0], Selection))


def part_refs(part) -> list:
    """The Refs a part (as ``split_view`` made it) views: its Ref, or each
    choice's of a selection."""
    if isinstance(part, Selection):
        return [r for c in part.choices for r in part_refs(c)]
    if isinstance(part, tuple) and len(part) == 2 and isinstance(part[1], tuple):
        return part_refs(part[0])
    return [part]


def nested_views(transforms) -> list:
    """The ``IndexView`` indices among ``transforms``' indexers."""
    return [i for t in transforms for i in getattr(t, "indices", ()) if isinstance(i, IndexView)]
