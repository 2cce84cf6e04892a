"""``plgpu.RefUnion(group, group, ...)``: scratch buffers (SMEM, or TMEM) whose
groups may share one memory region, because the kernel never uses two
groups at the same time. The body gets the union and unpacks it into its
groups: ``(q_smem, k_smem), (o_smem,) = union``.

The frontend traces each member as a scratch Ref of its own (its memory
space a ``UnionMember``, which remembers its union); ``pallas_mgpu.kernel``
expands the unions of its ``scratch_types`` (``expand``) and ``regroup``
turns the members back into one JAX ``plgpu.RefUnion`` when the kernel is
rebuilt, so the memory is shared there, as in JAX. Anywhere else a member
is just its own buffer (more memory, the same results).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import jax
import numpy as np

from pallas_mgpu.memory import SMEM, TMEM, GPUMemoryRef

_SMEM_ALIGNMENT = 1024     # bytes; JAX pads each member of a group to this


class RefUnion:
    """Groups (pytrees of ``plgpu.SMEM``/``plgpu.TMEM`` buffers) that reuse
    the same memory; never read a buffer through a group other than the one
    that wrote it."""

    def __init__(self, *refs):
        leaves = jax.tree.leaves(refs)
        if not leaves:
            raise ValueError("plgpu.RefUnion: give at least one group of buffers.")
        for leaf in leaves:
            if not isinstance(leaf, GPUMemoryRef) or isinstance(leaf, UnionMember):
                raise TypeError(f"plgpu.RefUnion: members must be plgpu.SMEM(...) or "
                                f"plgpu.TMEM(...) buffers, got {leaf!r}.")
        spaces = {leaf.memory_space for leaf in leaves}
        if len(spaces) != 1 or spaces.pop() not in (SMEM, TMEM):
            raise NotImplementedError(
                "plgpu.RefUnion: all members must be in the same memory space, SMEM or TMEM; got "
                f"{[str(leaf.memory_space) for leaf in leaves]}.")
        self.refs = tuple(refs)
        self.memory_space = leaves[0].memory_space

    @property
    def shape(self) -> tuple[int, ...]:
        """SMEM: ``(bytes,)`` of the largest group (members padded to 1 KiB, as
        JAX lays them out). TMEM: refused (JAX counts TMEM columns)."""
        if self.memory_space is not SMEM:
            raise NotImplementedError(
                "plgpu.RefUnion.shape: only SMEM unions have a byte size here.")
        return (max(_group_bytes(g) for g in self.refs),)

    @property
    def dtype(self):
        """``int8``: the union is sized in bytes, as JAX's."""
        return np.dtype(np.int8)

    def get_ref_aval(self):
        """Reached only when a union is used outside ``pallas_mgpu.kernel``."""
        raise NotImplementedError(
            "plgpu.RefUnion is supported in the scratch_types of pallas_mgpu.kernel; for "
            "pallas_call scratch_shapes or pl.run_scoped pass its groups' buffers separately.")

    def __repr__(self):
        return f"RefUnion{self.refs!r}"


def _group_bytes(group) -> int:
    total = 0
    for ref in jax.tree.leaves(group):
        total = -(-total // _SMEM_ALIGNMENT) * _SMEM_ALIGNMENT
        total += math.prod(ref.shape) * _bits(ref.dtype) // 8
    return total


def _bits(dtype) -> int:
    import jax.numpy as jnp
    info = jnp.iinfo if jnp.issubdtype(dtype, jnp.integer) else jnp.finfo
    return info(dtype).bits


@dataclasses.dataclass(frozen=True)
class UnionMember(GPUMemoryRef):
    """The memory space (and scratch type) of one member of a ``RefUnion``:
    the member's buffer, plus which union and where in it."""
    union_key: int = -1
    groups_tree: Any = None     # the treedef of the union's groups tuple
    position: int = 0           # leaf index in that tree

    def get_ref_aval(self):
        return jax.ref.AbstractRef(jax.core.ShapedArray(self.shape, self.dtype), memory_space=self)

    def plain(self) -> GPUMemoryRef:
        """The member's buffer as a plain scratch type."""
        return GPUMemoryRef(self.shape, self.dtype, self.memory_space, self.transforms,
                            packed=self.packed, collective=self.collective, layout=self.layout)

    def to_jax(self):
        return self.plain().to_jax()


class BoundUnion:
    """What the kernel body gets for a ``RefUnion``: its groups of Refs."""

    def __init__(self, groups: tuple):
        self.groups = tuple(groups)

    def __iter__(self):
        return iter(self.groups)

    def __len__(self):
        return len(self.groups)

    def __getitem__(self, i):
        return self.groups[i]


class _Expanded:
    """A ``RefUnion`` as a pytree node whose leaves are its ``UnionMember``s."""

    def __init__(self, groups: tuple):
        self.groups = groups


jax.tree_util.register_pytree_node(
    _Expanded, lambda e: (e.groups, None), lambda _, groups: BoundUnion(groups))

_keys = itertools.count()


def _expand_one(union: RefUnion) -> _Expanded:
    leaves, tree = jax.tree.flatten(union.refs)
    key = next(_keys)
    members = [UnionMember(r.shape, r.dtype, r.memory_space, r.transforms, packed=r.packed,
                           collective=r.collective, layout=r.layout, union_key=key,
                           groups_tree=tree, position=k) for k, r in enumerate(leaves)]
    return _Expanded(jax.tree.unflatten(tree, members))


def expand(scratch_types):
    """``scratch_types`` with each ``RefUnion`` replaced by its members (the
    body then gets a ``BoundUnion`` of Refs in its place)."""
    is_union = lambda x: isinstance(x, RefUnion)
    return jax.tree.map(lambda x: _expand_one(x) if is_union(x) else x, scratch_types,
                        is_leaf=is_union)


def regroup(spaces, jax_types: list):
    """For the rebuilt kernel: ``jax_types`` (one JAX scratch type per scratch
    Ref, their memory spaces ``spaces``) with each union's members replaced
    by one JAX ``plgpu.RefUnion``; and ``split(refs)``, which turns the
    rebuilt kernel's scratch Refs back into one Ref per member."""
    from jax.experimental.pallas import mosaic_gpu as plgpu
    out, plan, k = [], [], 0
    while k < len(spaces):
        space = spaces[k]
        if not isinstance(space, UnionMember):
            out.append(jax_types[k])
            plan.append(None)
            k += 1
            continue
        n = space.groups_tree.num_leaves
        members = spaces[k:k + n]
        if [m.union_key for m in members] != [space.union_key] * n or \
                [m.position for m in members] != list(range(n)):
            raise ValueError("pallas_mgpu: the members of a plgpu.RefUnion reached the backend "
                             "out of order; this is a bug in pallas_mgpu.")
        groups = jax.tree.unflatten(space.groups_tree, [m.to_jax() for m in members])
        out.append(plgpu.RefUnion(*groups))
        plan.append(space.groups_tree)
        k += n

    def split(refs):
        flat = []
        for ref, tree in zip(refs, plan):
            if tree is None:
                flat.append(ref)
            else:
                flat.extend(tree.flatten_up_to(tuple(ref)))
        return flat
    return out, split
