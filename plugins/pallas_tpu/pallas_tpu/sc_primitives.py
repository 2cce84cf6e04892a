"""SparseCore memory primitives (JAX's ``tpu_sc`` loads, stores, gathers,
scatters, atomics and the subcore barrier), owned by backend ``tpu``.

Each records in the kernel jaxpr what the user asked for; Ref operands may be
views (``ref.at[...]``), flattened as pytrees with the tree as a static param,
as in ``primitives.py``. Their meaning on CPU is ``sc_interpret``'s; the
SparseCore lowering maps each onto JAX's primitive of the same name (see
docs/sparsecore.md and the table ``JAX_EQUIVALENT``).

Semantics (from JAX's SparseCore lowering; the CPU model implements these):
- ``load_expanded(ref, mask=m)``: lane ``i`` with ``m[i]`` gets
  ``ref[popcount(m[:i])]``; other lanes are undefined (the model fills NaN,
  or the lowest integer).
- ``store_compressed(ref, x, mask=m)``: the selected lanes of ``x``, in lane
  order, land in ``ref[0:popcount(m)]``; the rest of ``ref`` is unchanged.
  ``addupdate_compressed`` adds them instead; ``addupdate`` adds all of ``x``.
- ``load_gather(ref, [i0, i1, ...])``: lane ``k`` reads ``ref[i0[k], i1[k], ...]``;
  masked-off lanes are undefined (filled as above) and their indices unread.
- ``store_scatter`` / ``addupdate_scatter``: lane ``k`` writes (adds) ``x[k]``
  at ``ref[i0[k], ...]`` where the mask holds. Duplicate indices: an add sums
  every lane (the hardware's adds are atomic); a store with two active lanes
  naming one element and different values is refused by the model (which
  lane lands is not defined).
- An active lane whose index is out of range of the Ref is refused by the
  model with the lane and the bounds (the chip does not check).
- ``fetch_and_add(ref, v, subcore_id=s)``: atomically adds ``v`` to the SMEM
  scalar ``ref`` of vector subcore ``s`` (same SparseCore), returning its old value.
- ``subcore_barrier()``: every subcore of the SparseCore waits for the others.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from pallas_frontend.backend_api import kernel_primitive

from pallas_tpu import _jax_private
from pallas_tpu.primitives import OWNER, _effects, _flatten_with_effects, _view_shape_dtype

load_expanded_p = kernel_primitive("sc_load_expanded", owner=OWNER)
store_p = kernel_primitive("sc_store", owner=OWNER, multiple_results=True)
gather_p = kernel_primitive("sc_gather", owner=OWNER)
scatter_p = kernel_primitive("sc_scatter", owner=OWNER, multiple_results=True)
fetch_and_add_p = kernel_primitive("sc_fetch_and_add", owner=OWNER)
barrier_p = kernel_primitive("sc_subcore_barrier", owner=OWNER, multiple_results=True)

# Ours' primitive -> JAX's SparseCore primitive of Mosaic Pallas, for the rebuild.
JAX_EQUIVALENT = {
    "sc_load_expanded": "load_p (has_mask=True): plsc.load_expanded",
    "sc_store": "swap_p (add, compress, has_mask): store_compressed / addupdate / "
                "addupdate_compressed",
    "sc_gather": "gather_p: plsc.load_gather",
    "sc_scatter": "scatter_p (add): plsc.store_scatter / plsc.addupdate_scatter",
    "sc_fetch_and_add": "fetch_and_add_p: plsc.fetch_and_add",
    "sc_subcore_barrier": "barrier_p: plsc.subcore_barrier",
}

_GATHER_DTYPES = (jnp.dtype(jnp.int32), jnp.dtype(jnp.float32))


def _is_bool(aval) -> bool:
    return jnp.dtype(aval.dtype) == jnp.bool_


def _check_mask(op: str, mask, shape):
    if mask is None:
        return
    if not _is_bool(mask):
        raise TypeError(f"plsc.{op}: Mask must be a boolean array, got {mask.dtype}; "
                        "pass a comparison (x > 0) or .astype(bool).")
    if tuple(mask.shape) != tuple(shape):
        raise ValueError(f"plsc.{op}: mask has shape {tuple(mask.shape)}, expected "
                         f"{tuple(shape)} (one lane per element).")


# --- load_expanded / store_compressed / addupdate ---------------------------------

load_expanded_p.def_effectful_abstract_eval(
    lambda *avals, tree, effect_spec, shape, dtype: (jax.core.ShapedArray(shape, dtype),
                                                     _effects(effect_spec)))
store_p.def_effectful_abstract_eval(
    lambda *avals, tree, effect_spec, add, compress, has_mask: ([], _effects(effect_spec)))


def _ref_shape(op: str, ref):
    if not hasattr(ref, "transforms") and not isinstance(jax.typeof(ref), jax.ref.AbstractRef):
        raise TypeError(f"plsc.{op}: ref must be a Ref or a view of one (ref.at[...]), got "
                        f"{type(ref).__name__}.")
    return _view_shape_dtype(ref)


def load_expanded(ref, *, mask):
    """Expanding load: lane ``i`` where ``mask[i]`` reads ``ref[k]``, ``k`` the
    number of set lanes before ``i``; other lanes are undefined."""
    shape, dtype = _ref_shape("load_expanded", ref)
    _check_mask("load_expanded", jax.typeof(mask), shape)
    flat, tree, spec = _flatten_with_effects((ref, mask), ("r", None))
    return load_expanded_p.bind(*flat, tree=tree, effect_spec=spec, shape=tuple(shape),
                                dtype=jnp.dtype(dtype))


def _store(op, ref, x, mask, *, add, compress):
    shape, dtype = _ref_shape(op, ref)
    x = jnp.asarray(x)
    if jnp.dtype(x.dtype) != jnp.dtype(dtype):
        raise TypeError(f"plsc.{op}: x has dtype {x.dtype}, the ref {jnp.dtype(dtype)}; "
                        "cast x to the ref's dtype.")
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"plsc.{op}: x has shape {tuple(x.shape)}, the ref {tuple(shape)}; "
                         "they must match.")
    _check_mask(op, None if mask is None else jax.typeof(mask), shape)
    kinds = ("r" if add else "w", None, None)
    flat, tree, spec = _flatten_with_effects((ref, x, mask), kinds)
    # an add reads the ref too
    spec = spec + tuple((i, "w") for i, k in spec if k == "r")
    store_p.bind(*flat, tree=tree, effect_spec=spec, add=add, compress=compress,
                 has_mask=mask is not None)


def store_compressed(ref, x, *, mask) -> None:
    """Writes the lanes of ``x`` where ``mask`` holds, in order, to ``ref[0:n]``."""
    _store("store_compressed", ref, x, mask, add=False, compress=True)


def addupdate(ref, x) -> None:
    """Atomically adds ``x`` to ``ref`` (same shape)."""
    _store("addupdate", ref, x, None, add=True, compress=False)


def addupdate_compressed(ref, x, *, mask) -> None:
    """Adds the lanes of ``x`` where ``mask`` holds, in order, to ``ref[0:n]``."""
    _store("addupdate_compressed", ref, x, mask, add=True, compress=True)


# --- gathers and scatters --------------------------------------------------------

gather_p.def_effectful_abstract_eval(
    lambda *avals, tree, effect_spec, shape, dtype: (jax.core.ShapedArray(shape, dtype),
                                                     _effects(effect_spec)))
scatter_p.def_effectful_abstract_eval(
    lambda *avals, tree, effect_spec, add: ([], _effects(effect_spec)))


def _indexed_shape(op: str, ref_shape, indices) -> tuple[int]:
    if isinstance(indices, (jax.Array, jax.core.Tracer)) or not isinstance(indices, (list, tuple)):
        raise TypeError(f"plsc.{op}: indices must be a sequence with one 1-D index array per "
                        f"dim of the ref, got {type(indices).__name__}; wrap it: [idx].")
    if len(indices) != len(ref_shape):
        raise ValueError(f"plsc.{op}: {len(indices)} index array(s) for a ref of rank "
                         f"{len(ref_shape)}; pass one per dim.")
    sizes = set()
    for k, idx in enumerate(indices):
        aval = jax.typeof(idx)
        if aval.ndim != 1:
            raise ValueError(f"plsc.{op}: index array {k} has shape {aval.shape}; each must be 1-D.")
        if not jnp.issubdtype(aval.dtype, jnp.integer):
            raise TypeError(f"plsc.{op}: index array {k} has dtype {aval.dtype}; use int32.")
        sizes.add(aval.shape[0])
    if len(sizes) != 1:
        raise ValueError(f"plsc.{op}: the index arrays differ in size ({sorted(sizes)}); "
                         "all must have one entry per lane.")
    return (sizes.pop(),)


def _gather_operands(op, ref, indices):
    shape, dtype = _ref_shape(op, ref)
    if jnp.dtype(dtype) not in _GATHER_DTYPES:
        raise TypeError(f"plsc.{op}: the ref has dtype {jnp.dtype(dtype)}; SparseCore "
                        "gathers and scatters take int32 or float32.")
    out_shape = _indexed_shape(op, shape, indices)
    return tuple(jnp.asarray(i, jnp.int32) for i in indices), out_shape, jnp.dtype(dtype)


def load_gather(ref, indices, *, mask=None):
    """Lane ``k`` reads ``ref[indices[0][k], indices[1][k], ...]`` (VMEM)."""
    indices, out_shape, dtype = _gather_operands("load_gather", ref, indices)
    _check_mask("load_gather", None if mask is None else jax.typeof(mask), out_shape)
    flat, tree, spec = _flatten_with_effects((ref, indices, mask), ("r", None, None))
    return gather_p.bind(*flat, tree=tree, effect_spec=spec, shape=out_shape, dtype=dtype)


def _scatter(op, ref, indices, x, mask, add):
    if not indices:
        raise ValueError(f"plsc.{op}: indices must not be empty; pass one array per ref dim.")
    indices, shape, dtype = _gather_operands(op, ref, indices)
    x = jnp.asarray(x)
    if tuple(x.shape) != shape:
        raise ValueError(f"plsc.{op}: x has shape {tuple(x.shape)}, the indices {shape}; "
                         "one value per lane.")
    if jnp.dtype(x.dtype) != dtype:
        raise TypeError(f"plsc.{op}: x has dtype {x.dtype}, the ref {dtype}; cast x.")
    _check_mask(op, None if mask is None else jax.typeof(mask), shape)
    flat, tree, spec = _flatten_with_effects((ref, indices, x, mask),
                                             ("r" if add else "w", None, None, None))
    spec = spec + tuple((i, "w") for i, k in spec if k == "r")
    scatter_p.bind(*flat, tree=tree, effect_spec=spec, add=add)


def store_scatter(ref, indices, x, *, mask=None) -> None:
    """Lane ``k`` writes ``x[k]`` to ``ref[indices[0][k], ...]`` where ``mask`` holds."""
    _scatter("store_scatter", ref, indices, x, mask, False)


def addupdate_scatter(ref, indices, x, *, mask=None) -> None:
    """Lane ``k`` atomically adds ``x[k]`` to ``ref[indices[0][k], ...]``."""
    _scatter("addupdate_scatter", ref, indices, x, mask, True)


# --- cross-subcore atomics and the barrier ---------------------------------------

fetch_and_add_p.def_effectful_abstract_eval(
    lambda *avals, tree, effect_spec: (jax.core.ShapedArray((), jnp.int32),
                                       _effects(effect_spec)))
# an effect keeps the barrier in the jaxpr, where nothing depends on it
barrier_p.def_effectful_abstract_eval(lambda: ([], {_jax_private.debug_effect()}))


def fetch_and_add(x_ref, value, *, subcore_id):
    """Atomically adds ``value`` to the int32 SMEM scalar ``x_ref`` as held by
    vector subcore ``subcore_id``; returns the value before the add."""
    shape, dtype = _ref_shape("fetch_and_add", x_ref)
    if jnp.dtype(dtype) != jnp.int32:
        raise NotImplementedError(f"plsc.fetch_and_add: only int32 refs, got {jnp.dtype(dtype)}.")
    if math.prod(shape) != 1:
        raise ValueError(f"plsc.fetch_and_add: x_ref must hold one element, got shape "
                         f"{tuple(shape)}; index it down: x_ref.at[i].")
    value = jnp.asarray(value, jnp.int32)
    subcore_id = jnp.asarray(subcore_id, jnp.int32)
    for what, v in (("value", value), ("subcore_id", subcore_id)):
        if v.shape != ():
            raise ValueError(f"plsc.fetch_and_add: {what} must be a scalar, got shape {v.shape}.")
    flat, tree, spec = _flatten_with_effects((x_ref, value, subcore_id), ("r", None, None))
    spec = spec + tuple((i, "w") for i, k in spec if k == "r")
    return fetch_and_add_p.bind(*flat, tree=tree, effect_spec=spec)


def subcore_barrier() -> None:
    """Waits until every vector subcore of this SparseCore reaches this barrier."""
    barrier_p.bind()


# --- VMEM_SHARED -> this subcore's VMEM -------------------------------------------

@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SubcoreSlice:
    """A view transform: the part of a VMEM_SHARED Ref that the running vector
    subcore sees as its VMEM. The minor dim is cut into ``num_subcores`` equal
    runs (all the chip's subcores, active or not); subcore ``s`` sees run ``s``.
    (JAX's ``SharedMemRefSliceTransform``; the rebuild maps one to the other.)"""
    num_subcores: int = dataclasses.field(metadata=dict(static=True))

    def transform_shape(self, shape):
        return None if shape is None else (*shape[:-1], shape[-1] // self.num_subcores)

    def transform_dtype(self, dtype):
        return dtype

    def transform_sharding(self, sharding):
        return sharding

    def transform_type(self, aval):
        inner = getattr(aval, "inner_aval", None)
        if inner is not None:
            from pallas_tpu.memory import MemorySpace
            return aval.update(inner_aval=self.transform_type(inner),
                               memory_space=MemorySpace.VMEM)
        return aval.update(shape=self.transform_shape(aval.shape))

    def pretty_print(self, context):
        return _jax_private.pretty_text("{subcore_slice}")


def slice_subcore_vmem_from_shared(ref):
    """The running vector subcore's slice (its VMEM) of a VMEM_SHARED Ref: the
    minor dim divided by the chip's subcore count, run ``subcore`` of it."""
    from pallas_tpu.memory import MemorySpace
    if not _jax_private.jax_has_shared_slice():
        raise NotImplementedError(_jax_private.needs_newer_jax(
            "plsc.slice_subcore_vmem_from_shared", "0.12"))
    base = getattr(ref, "ref", ref)
    space = getattr(jax.typeof(base), "memory_space", None)
    if space is not MemorySpace.VMEM_SHARED:
        raise ValueError(f"plsc.slice_subcore_vmem_from_shared: takes a VMEM_SHARED Ref, got "
                         f"one in {space}; allocate it with pltpu.VMEM_SHARED(...).")
    shape, _ = _view_shape_dtype(ref)
    from pallas_tpu import sc_mesh
    n = sc_mesh.get_sparse_core_info().num_subcores
    if not shape or shape[-1] % n:
        raise ValueError(f"plsc.slice_subcore_vmem_from_shared: the minor dim of shape "
                         f"{tuple(shape)} must divide by the chip's {n} subcores.")
    transforms = tuple(getattr(ref, "transforms", ()))
    return _jax_private.transformed_ref(base, (*transforms, SubcoreSlice(n)))
