"""A kernel Ref as the generated code addresses it, and the indexers of its accesses.

``BlockRef``: a block in memory, a pointer to its whole array plus per-dim
element offsets (masked where the block may overhang). ``RegisterRef``: a Ref
held in a tensor variable (scratch; outputs that stay put across the loops).
``resolve_indexer``/``indexer_entries`` turn a Ref access's NDIndexer into
per-dim (kind, start, size, step) entries of Python expressions.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

import pallas_frontend as pl
from pallas_triton.errors import unsupported
from pallas_triton.jaxpr_text import is_pow2


@dataclasses.dataclass
class BlockRef:
    """A kernel Ref as pointer arithmetic: ``ptr`` + per-array-dim element offsets."""
    ptr: str
    array_shape: tuple[int, ...]
    dtype: np.dtype
    starts: list[str]               # element offset of the block, per array dim
    visible: list[int]              # array dims the kernel sees (squeezed dims dropped)
    block_sizes: list[int]          # per array dim
    masked: list[bool]              # per array dim: can the block overhang?
    fenced: bool = False            # other threads of the program may touch it in between
    # per array dim: can the block start before the array (Element padding)?
    low_masked: list[bool] = dataclasses.field(default_factory=list)
    # per array dim: the valid extent of a BoundedSlice block (an expression), else None
    limits: list = dataclasses.field(default_factory=list)
    origin: str = ""                # what messages call it (the BlockSpec's operand)
    index_map_source: str = ""


    @property
    def strides(self):
        out, acc = [], 1
        for n in reversed(self.array_shape):
            out.append(acc)
            acc *= n
        return out[::-1]


@dataclasses.dataclass
class RegisterRef:
    """A Ref held in registers: the tensor variable ``name``, rebound at every write."""
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    label: str                      # what messages call it (a BlockSpec or scratch buffer)


def join_masks(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return f"({a}) & ({b})"


def add_expr(a: str, b: str) -> str:
    if a == "0":
        return b
    if b == "0":
        return a
    return f"{a} + {b}"


def indexer_entries(ref: BlockRef, indexer):
    """One ``(kind, start, size, step)`` per visible dim; kind is "scalar" or "slice"."""
    block = [ref.block_sizes[d] for d in ref.visible]
    if indexer is None:
        return [("slice", "0", n, 1) for n in block]
    out = []
    for k, ix in enumerate(indexer.indices):
        if isinstance(ix, pl.Slice):
            start = ix.start if isinstance(ix.start, str) else str(int(ix.start))
            out.append(("slice", start, int(ix.size), int(ix.stride)))
        elif isinstance(ix, str):
            out.append(("scalar", ix, None, None))
        elif isinstance(ix, ArrayIndex):
            if not all(is_pow2(n) for n in ix.shape):
                raise unsupported(f"an integer-array index of shape {ix.shape} (Triton needs "
                                  "power-of-two dims for index arrays)")
            out.append(("array", ix.expr, ix.shape, None))
        else:
            raise unsupported("integer-array (gather) indexing of Refs")
    kinds = [e[0] for e in out]
    arrays = [k for k, kind in enumerate(kinds) if kind == "array"]
    slices = [k for k, kind in enumerate(kinds) if kind == "slice"]
    if arrays and slices and min(slices) < max(arrays):
        raise unsupported("a Ref access with a slice before an integer-array index (put the "
                          "array-indexed dims first, as JAX's paged attention does)")
    return out


@dataclasses.dataclass(frozen=True)
class ArrayIndex:
    """An integer-array index of a Ref access (gather/scatter): its tensor expression."""
    expr: str
    shape: tuple[int, ...]


def resolve_indexer(w, transforms):
    """The single NDIndexer of a Ref access with its dynamic parts as expressions."""
    if not transforms:
        return None
    if len(transforms) != 1 or not hasattr(transforms[0], "indices"):
        raise unsupported(f"Ref transforms {[type(t).__name__ for t in transforms]}")
    (nd,) = transforms
    gather = bool(getattr(nd, "int_indexer_shape", ()))
    if gather and not w.allow_gather:
        raise unsupported("integer-array (gather) indexing of plain Refs (use "
                          "pallas_triton.load/store with mask= for array offsets)")

    def res(x):
        if isinstance(x, pl.Slice):
            return pl.Slice(res(x.start), x.size, x.stride)
        if isinstance(x, (int, np.integer)):
            return str(int(x))
        shape = tuple(getattr(getattr(x, "aval", None), "shape", ()) or ())
        if shape:
            return ArrayIndex(w.read(x), shape)
        return w.read(x)
    return type("Indexer", (), {"indices": [res(i) for i in nd.indices]})()


def unflatten_transforms(eqn, leaves):
    return jax.tree_util.tree_unflatten(eqn.params["tree"], leaves)


def mul_expr(idx: str, k: int) -> str:
    if idx.lstrip("-").isdigit():
        return str(int(idx) * k)
    return idx if k == 1 else f"{idx} * {k}"
