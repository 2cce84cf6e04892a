"""What JAX's SparseCore lowering refuses, refused by the CPU model too.

A kernel the chip's compiler path would not take must not run on CPU and
seem fine. Before the model runs a vector-subcore kernel, its jaxpr is
walked (nested bodies included) and each refusal of JAX's SparseCore
lowering (``jax/_src/pallas/mosaic/sc_lowering.py``, ``sc_primitives.py``)
that a kernel's types decide is raised with JAX's words:

- a load or store (``ref[...]``) of HBM or VMEM_SHARED (copy it to VMEM);
- a scalar load or store outside SMEM, an array load or store in SMEM;
- a load or store whose indexer has a stride, or an integer index after a
  dim sliced to more than one element (``ref[:n, i]``);
- ``cumsum`` / ``cummax`` / ``cummin`` of an array that is not 1-D;
- an indirect DMA (``src.at[idx]``, ``dst.at[idx]``, ``plsc.Indices``): the
  indexed side must be the HBM/VMEM_SHARED one, its indices a 1-D array or a
  Ref in VMEM, with nothing applied after the indexer; HBM to HBM refused.
"""

from __future__ import annotations

import jax

from pallas_tpu import sc_primitives as scp
from pallas_tpu.view_parts import IndexView, Selection

_CUMULATIVE = ("cumsum", "cummax", "cummin")
_REMOTE = ("HBM", "VMEM_SHARED")


def _space(aval, transforms=()) -> str | None:
    space = getattr(aval, "memory_space", None)
    if space is None:
        return None
    name = str(getattr(space, "name", space)).upper()
    if name.startswith("MEMORYSPACE."):
        name = name.split(".", 1)[1]
    if any(isinstance(t, scp.SubcoreSlice) for t in transforms):
        return "VMEM"     # this subcore's slice of VMEM_SHARED is its VMEM
    return name


def check(kernel) -> None:
    """Raises JAX's error for the first construct its SparseCore lowering refuses."""
    if kernel.compiler_params.kernel_type.name != "SC_VECTOR_SUBCORE":
        return
    _walk(kernel.jaxpr)


def _subjaxprs(params):
    for p in params.values():
        for q in (p if isinstance(p, (tuple, list)) else (p,)):
            if hasattr(q, "eqns") or hasattr(getattr(q, "jaxpr", None), "eqns"):
                yield getattr(q, "jaxpr", q)


def _walk(jaxpr) -> None:
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name in ("get", "swap", "addupdate"):
            _check_access(eqn)
        elif name in _CUMULATIVE:
            aval = eqn.invars[0].aval
            if aval.ndim != 1:
                raise NotImplementedError(f"{name}: x={aval} must be rank 1 on a SparseCore "
                                          "vector subcore; reshape it to 1-D first.")
        elif name == "tpu_dma_start":
            _check_dma(eqn)
        params = eqn.params
        if name == "tpu_emit_pipeline" and params.get("schedule") is not None:
            params = {"schedule": params["schedule"]}     # what the CPU model runs
        for sub in _subjaxprs(params):
            _walk(sub)


def _transforms(eqn, first_leaf: int):
    tree = eqn.params.get("tree")
    if tree is None:
        return ()
    return tuple(jax.tree.unflatten(tree, list(eqn.invars[first_leaf:])))


def _check_access(eqn) -> None:
    name = eqn.primitive.name
    ref = eqn.invars[0]
    space = _space(ref.aval, _transforms(eqn, 1 if name == "get" else 2))
    what = "Get" if name == "get" else "Swap"
    if space in _REMOTE:
        verb = "loading from" if name == "get" else "storing to"
        raise NotImplementedError(f"{what} does not support {verb} {space}. Copy the data to a "
                                  "core-local memory space, e.g. VMEM, via `pltpu.async_copy`.")
    _check_indexer(what, _transforms(eqn, 1 if name == "get" else 2))
    value = eqn.outvars[0].aval if name == "get" else eqn.invars[1].aval
    if space not in ("VMEM", "SMEM") or (value.ndim == 0) == (space == "SMEM"):
        return
    if name == "get":
        msg = "Get only supports loading scalars from SMEM."
        msg += (f" Trying to load an array of shape {value.shape}." if space == "SMEM" else
                " To load a scalar from VMEM, load an array first and then extract a "
                "particular element, e.g. ``v = ref[pl.ds(idx, ...)]; v[0]``.")
    else:
        msg = "Swap only supports scalars in SMEM."
        msg += (f" Trying to swap an array of shape {value.shape}." if space == "SMEM" else
                f" Trying to swap a scalar in {space}.")
    raise NotImplementedError(msg)


def _check_indexer(what: str, transforms) -> None:
    """The last indexer of a load or store: unit strides, and no integer
    index after the first dim taken by a slice longer than 1."""
    if not transforms or not hasattr(transforms[-1], "indices"):
        return
    sliced = False
    for i in transforms[-1].indices:
        if hasattr(i, "size") and hasattr(i, "stride"):
            if int(i.stride) != 1:
                raise NotImplementedError(f"{what} only supports slices with stride 1, got "
                                          f"{int(i.stride)}")
            sliced = sliced or int(i.size) != 1
        elif not getattr(getattr(i, "aval", None), "shape", ()) and sliced:
            raise NotImplementedError("Integer indexing of refs that follows a non-trivial "
                                      "slice is not supported on SC")


def _indirect(transforms):
    """(position of the indexer with indirect offsets, the offsets) or None."""
    from pallas_tpu.sc_mesh import Indices
    for k, t in enumerate(transforms):
        for i in getattr(t, "indices", ()):
            if isinstance(i, Indices):
                return k, i.values
            if isinstance(i, IndexView):
                return k, i
            aval = getattr(i, "aval", None)
            if aval is not None and (isinstance(aval, jax.ref.AbstractRef) or aval.ndim):
                return k, i
    return None


def _first_choice(part):
    """A DMA part as (Ref, transforms); a selection (``pl.select_ref``) as its
    first choice (its choices share one type)."""
    if isinstance(part, Selection):
        return _first_choice(part.choices[0])
    if isinstance(part, tuple):
        ref, transforms = part
        if isinstance(ref, Selection):
            ref, first = _first_choice(ref)
            return ref, (*first, *transforms)
        return ref, transforms
    return part, ()


def _check_dma(eqn) -> None:
    src, dst, *_ = jax.tree.unflatten(eqn.params["tree"], list(eqn.invars))
    (sref, st), (dref, dt) = _first_choice(src), _first_choice(dst)
    s_space, d_space = _space(sref.aval, st), _space(dref.aval, dt)
    s_ind, d_ind = _indirect(st), _indirect(dt)
    if s_ind is None and d_ind is None:
        return
    if s_space in _REMOTE and d_space == "VMEM":
        if d_ind is not None:
            raise ValueError("Only the source ref can be indexed when doing a gather via "
                             "`pltpu.async_copy`")
        indexed, transforms = s_ind, st
    elif s_space == "VMEM" and d_space in _REMOTE:
        if s_ind is not None:
            raise ValueError("Only the destination ref can be indexed when doing a scatter "
                             "via `pltpu.async_copy`")
        indexed, transforms = d_ind, dt
    else:
        raise NotImplementedError(f"Scatter/gather via `pltpu.async_copy` from {s_space} to "
                                  f"{d_space} is not supported")
    k, offsets = indexed
    aval = offsets.ref.aval if isinstance(offsets, IndexView) else offsets.aval
    if isinstance(offsets, IndexView):        # part of an index Ref: JAX checks its dtype only
        if aval.inner_aval.dtype != jax.numpy.int32:
            raise NotImplementedError("Only int32 indices are supported by scatter/gather via "
                                      "`pltpu.async_copy` with a dynamically-shaped indexer")
    elif len(aval.shape) != 1:
        raise NotImplementedError("Only 1D indices are supported by scatter/gather via "
                                  f"`pltpu.async_copy` on SparseCore, got rank {len(aval.shape)}")
    if isinstance(aval, jax.ref.AbstractRef) and _space(aval) != "VMEM":
        raise NotImplementedError("Indices for scatter/gather via `pltpu.async_copy` must be "
                                  f"in VMEM, got {_space(aval)}")
    if k != len(transforms) - 1:
        raise NotImplementedError("The indexed ref in scatter/gather via `pltpu.async_copy` "
                                  "cannot have any transforms following the indexer")
