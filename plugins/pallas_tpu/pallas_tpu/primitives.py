"""TPU-only kernel primitives (owned by backend ``tpu``) and their user API.

Each primitive records, in the kernel jaxpr, what the user asked for; the
evaluator (``evaluate.py``) replays it with JAX's ``pltpu`` function of the
same meaning. Ref operands may be views (``ref.at[...]``): they are flattened
as pytrees, and the tree travels as a static parameter.

The frontend's reference interpreter runs ``load``/``store`` and local DMAs
(``ref_io_interpret``, ``dma_interpret``); for the rest, run such kernels with
``interpret=InterpretParams()``.
"""

from __future__ import annotations

import copy
import functools
import logging
import os
import sys

import jax
import jax.numpy as jnp

from pallas_frontend.backend_api import kernel_primitive

from pallas_frontend import backend_api
from pallas_tpu import _jax_private
from pallas_tpu.memory import SemaphoreKind
from pallas_tpu.view_parts import (is_selection_part, join_view,  # noqa: F401 (join_view:
                                   part_refs, split_view)          # used by other modules)

OWNER = "tpu"

dma_start_p = kernel_primitive("tpu_dma_start", owner=OWNER, multiple_results=True)
dma_wait_p = kernel_primitive("tpu_dma_wait", owner=OWNER, multiple_results=True)
load_p = kernel_primitive("tpu_load", owner=OWNER)
store_p = kernel_primitive("tpu_store", owner=OWNER, multiple_results=True)
prng_seed_p = kernel_primitive("tpu_prng_seed", owner=OWNER, multiple_results=True)
prng_random_bits_p = kernel_primitive("tpu_prng_random_bits", owner=OWNER)


def _is_ref(x) -> bool:
    return isinstance(jax.typeof(x), jax.ref.AbstractRef)


def _flatten_with_effects(parts, kinds):
    """Flattens ``parts`` (Refs, views, values or None); ``kinds[i]`` is "r",
    "w" or None for the role of part i. Returns (flat, tree, effect spec)."""
    parts = tuple(split_view(p) for p in parts)
    flat, spec = [], []
    for part, kind in zip(parts, kinds):
        leaves = jax.tree.leaves(part)
        if kind is not None and leaves and _is_ref(leaves[0]):
            spec.append((len(flat), kind))
        if kind is not None and is_selection_part(part):   # every Ref it may pick
            chosen = {id(r) for r in part_refs(part)}
            spec.extend((len(flat) + i, kind) for i, leaf in enumerate(leaves)
                        if i and id(leaf) in chosen and _is_ref(leaf))
        flat.extend(leaves)
    _, tree = jax.tree.flatten(parts)
    return flat, tree, tuple(spec)


def _effects(spec):
    return backend_api.ref_effects(reads=[i for i, k in spec if k == "r"],
                                   writes=[i for i, k in spec if k != "r"])


# --- DMAs ----------------------------------------------------------------------

dma_start_p.def_effectful_abstract_eval(
    lambda *avals, tree, effect_spec, priority, add, device_id_type: ([], _effects(effect_spec)))
dma_wait_p.def_effectful_abstract_eval(
    lambda *avals, tree, effect_spec, wait_for, device_id_type: ([], _effects(effect_spec)))


def _dma_parts(eqn):
    """(src, dst, dst_sem, src_sem, device_id) of a DMA equation; a view as
    its (Ref, transforms)."""
    return jax.tree.unflatten(eqn.params["tree"], eqn.invars)


def _shown(part, show):
    return show(*part) if isinstance(part, tuple) else show(part)


def _dma_start_pieces(eqn, show):
    """``dma_start(p0, add) src[...] -> dst[...] sem[...]``, as JAX writes a
    local copy (a remote one keeps the generic form, as in JAX)."""
    src, dst, sem, src_sem, device_id = _dma_parts(eqn)
    if src_sem is not None or device_id is not None or \
            any(map(is_selection_part, (src, dst, sem))):
        return None
    head = f"dma_start(p{eqn.params['priority']}{', add' if eqn.params['add'] else ''}) "
    return [head, _shown(src, show), " -> ", _shown(dst, show), " ", _shown(sem, show)]


def _dma_wait_pieces(eqn, show):
    """``dma_wait dst[...] sem[...]`` for a local copy, as JAX writes it."""
    _, dst, sem, src_sem, device_id = _dma_parts(eqn)
    if src_sem is not None or device_id is not None or \
            any(map(is_selection_part, (dst, sem))):
        return None
    return ["dma_wait ", _shown(dst, show), " ", _shown(sem, show)]


_jax_private.register_pretty_printer(dma_start_p, _dma_start_pieces)
_jax_private.register_pretty_printer(dma_wait_p, _dma_wait_pieces)


class AsyncCopyDescriptor:
    """A DMA from ``src_ref`` to ``dst_ref``; ``start()`` issues it, ``wait()``
    blocks until it has landed (and, for remote copies, has been sent)."""

    def __init__(self, src_ref, dst_ref, dst_sem, src_sem=None, device_id=None,
                 device_id_type: str = "mesh"):
        self.src_ref, self.dst_ref = src_ref, dst_ref
        self.dst_sem, self.src_sem, self.device_id = dst_sem, src_sem, device_id
        self.device_id_type = device_id_type
        self._used, self._made_at = False, _user_line()

    def __del__(self):
        # a copy described and never started or waited on is almost surely a
        # forgotten .start()/.wait(); __del__ cannot raise, so it logs, as JAX's does
        if not getattr(self, "_used", True):
            logging.error("AsyncCopyDescriptor was not used (made at %s). Did you mean to "
                          "call `start` or `wait` on it?", self._made_at)

    @property
    def is_remote(self) -> bool:
        """Whether the copy goes to another device (it has a ``device_id``)."""
        return self.device_id is not None

    def _parts(self):
        return (self.src_ref, self.dst_ref, self.dst_sem, self.src_sem, self.device_id)

    def _each_selected(self, action) -> bool:
        """Where a Ref or semaphore of the copy is a ``pl.select_ref`` view
        (possibly of other selections, possibly viewed further, e.g.
        ``.reshape``): runs ``action`` on the copy with the Ref ``idx`` picks,
        its later transforms kept (a ``switch``, which every interpreter and
        Mosaic run), and returns True. An ``idx`` out of range picks the last
        Ref, as JAX's Mosaic lowering does. In a SparseCore kernel the copy
        takes the selection itself, as JAX's does (its lowering chooses with
        an ``scf.if`` chain; the CPU model picks the same Ref)."""
        from pallas_tpu import sc_mesh
        if sc_mesh.tracing_sparsecore_kernel():
            return False
        for field in ("src_ref", "dst_ref", "dst_sem", "src_sem"):
            selection = _selection_of(getattr(self, field))
            if selection is None:
                continue
            choices, idx, rest = selection
            idx = jnp.asarray(idx, jnp.int32)
            last = len(choices) - 1
            idx = jnp.where((idx >= 0) & (idx < last), idx, last)

            def branch(ref, field=field):
                chosen = copy.copy(self)
                setattr(chosen, field, _viewed(ref, rest))
                action(chosen)
            jax.lax.switch(idx, [functools.partial(branch, r) for r in choices])
            return True
        return False

    def start(self, priority: int = 0, *, add: bool = False):
        """Issues the DMA; ``add=True`` adds into ``dst_ref`` instead of
        overwriting it. ``priority`` is handed to Mosaic as is."""
        self._used = True
        if self._each_selected(lambda d: d.start(priority, add=add)):
            return
        for name in ("dst_sem", "src_sem"):
            _check_one_semaphore(getattr(self, name), "start")
        flat, tree, spec = _flatten_with_effects(self._parts(), ("r", "w", "w", "w", None))
        dma_start_p.bind(*flat, tree=tree, effect_spec=spec, priority=int(priority),
                         add=bool(add), device_id_type=self.device_id_type)

    def _wait(self, wait_for: str):
        self._used = True
        if self._each_selected(lambda d: d._wait(wait_for)):
            return
        _check_one_semaphore(self.dst_sem, "wait")
        if _semaphore_kind(self.dst_sem) is SemaphoreKind.REGULAR:
            raise ValueError(
                "async copy wait(): its semaphore is a REGULAR one, which no DMA signals; "
                "give the copy a pltpu.SemaphoreType.DMA semaphore, or wait on a regular "
                "semaphore with pl.semaphore_wait().")
        flat, tree, spec = _flatten_with_effects(self._parts(), ("r", "w", "w", "w", None))
        dma_wait_p.bind(*flat, tree=tree, effect_spec=spec, wait_for=wait_for,
                        device_id_type=self.device_id_type)

    def wait(self):
        """Blocks until the copy has landed in ``dst_ref`` (and, for a remote
        copy, has also been sent)."""
        self._wait("all")

    def wait_recv(self):
        """Blocks until the copy has landed in ``dst_ref`` (its receive semaphore)."""
        self._wait("recv")

    def wait_send(self):
        """Blocks until a remote copy has left ``src_ref`` (its send semaphore)."""
        self._used = True
        if not self.is_remote:
            raise RuntimeError("wait_send() is for remote copies; use wait() on a local copy.")
        self._wait("send")


def _selection_of(view):
    """``(choices, idx, transforms after the selection)`` where ``view`` is a
    ``pl.select_ref`` view, possibly viewed further (``.reshape`` or ``.at``
    wrap the selection, which JAX keeps a view of one transform); else None."""
    rest = ()
    while hasattr(view, "transforms") and not isinstance(view.ref, tuple):
        if not hasattr(view.ref, "transforms"):
            return None          # a view of a Ref
        rest = (*view.transforms, *rest)
        view = view.ref
    if not hasattr(view, "transforms"):
        return None
    return view.ref, view.transforms[0].idx, rest


def _viewed(ref, transforms):
    """``ref`` (a Ref, a view, or a selection) viewed further through ``transforms``."""
    if not transforms:
        return ref
    if isinstance(getattr(ref, "ref", None), tuple):    # a selection wraps, as in JAX
        return type(ref)(ref, tuple(transforms))
    from pallas_tpu import _jax_private
    return _jax_private.transformed_ref(ref, transforms)


def _user_line() -> str:
    """file:line of the first caller outside this package (the kernel's line)."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
    return "?" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _semaphore_kind(sem):
    """The SemaphoreKind a semaphore Ref (or a view of one) carries, or None."""
    base = getattr(sem, "ref", sem)          # a view's Ref
    try:
        space = getattr(jax.typeof(base), "memory_space", None)
    except TypeError:                       # not a JAX value: left to the primitive
        return None
    return space if isinstance(space, SemaphoreKind) else None


def _check_one_semaphore(sem, what: str) -> None:
    """A DMA signals one semaphore: a Ref (or view) of shape ()."""
    shape = getattr(sem, "shape", ())
    if sem is not None and tuple(shape) != ():
        raise ValueError(
            f"async copy {what}(): Cannot signal a semaphore array of shape {tuple(shape)}; "
            "a DMA signals one semaphore: index the array (sem.at[i]).")


def make_async_copy(src_ref, dst_ref, sem) -> AsyncCopyDescriptor:
    """Describes a local DMA from ``src_ref`` to ``dst_ref`` signalling ``sem``."""
    return AsyncCopyDescriptor(src_ref, dst_ref, sem)


def async_copy(src_ref, dst_ref, sem, *, priority: int = 0, add: bool = False):
    """Starts a local DMA now and returns its descriptor."""
    desc = make_async_copy(src_ref, dst_ref, sem)
    desc.start(priority, add=add)
    return desc


def make_async_remote_copy(src_ref, dst_ref, send_sem, recv_sem, device_id,
                           device_id_type=None):
    """Describes a DMA into ``dst_ref`` on device ``device_id``: a dict
    ``{mesh_axis: index}`` or a tuple of mesh coordinates, or with
    ``device_id_type=pl.DeviceIdType.LOGICAL`` one int, the logical device id."""
    if device_id is None:
        raise ValueError("make_async_remote_copy needs a device_id; use make_async_copy for "
                         "a copy on this device.")
    id_type = _device_id_type(device_id_type)
    if id_type == "logical" and isinstance(device_id, (tuple, list, dict)):
        raise ValueError(f"make_async_remote_copy: a LOGICAL device_id is one int, got "
                         f"{device_id!r}; pass mesh coordinates with DeviceIdType.MESH.")
    return AsyncCopyDescriptor(src_ref, dst_ref, recv_sem, send_sem, device_id, id_type)


def _device_id_type(t) -> str:
    """"mesh" or "logical" from None, ours or JAX's ``DeviceIdType`` (an enum or a string)."""
    if t is None:
        return "mesh"
    name = getattr(t, "name", getattr(t, "value", t))
    if not isinstance(name, str) or name.lower() not in ("mesh", "logical"):
        raise ValueError(f"device_id_type must be pl.DeviceIdType.MESH or "
                         f"pl.DeviceIdType.LOGICAL, got {t!r}.")
    return name.lower()


def async_remote_copy(src_ref, dst_ref, send_sem, recv_sem, device_id, device_id_type=None):
    """Starts a DMA into ``dst_ref`` on device ``device_id`` now and returns its
    descriptor (see ``make_async_remote_copy``)."""
    desc = make_async_remote_copy(src_ref, dst_ref, send_sem, recv_sem, device_id,
                                  device_id_type)
    desc.start()
    return desc


def sync_copy(src_ref, dst_ref, *, add: bool = False):
    """Copies ``src_ref`` into ``dst_ref`` and waits (a DMA on TPU). Both may be
    pytrees of Refs (or views) of one structure: every copy starts, then each
    is awaited, on one semaphore. ``add=True`` adds into the destination."""
    from pallas_frontend import run_scoped

    from pallas_tpu.memory import SemaphoreType

    def is_leaf(x):   # a container is never a leaf (jax.typeof refuses some tuples)
        return x is None or hasattr(x, "transforms") or (
            not isinstance(x, (tuple, list, dict)) and _is_ref(x))
    srcs, tree = jax.tree.flatten(src_ref, is_leaf=is_leaf)
    dsts, dst_tree = jax.tree.flatten(dst_ref, is_leaf=is_leaf)
    if tree != dst_tree:
        raise ValueError(f"sync_copy: src_ref and dst_ref differ in structure ({tree} vs "
                         f"{dst_tree}); pass one destination Ref per source Ref.")
    if not srcs:
        return

    def body(sem):
        descs = [async_copy(s, d, sem, add=add) for s, d in zip(srcs, dsts)]
        for desc in descs:
            desc.wait()
    run_scoped(body, SemaphoreType.DMA)


# --- masked load / store ----------------------------------------------------------

def _load_abstract_eval(*avals, tree, effect_spec, has_mask, shape, dtype):
    return jax.core.ShapedArray(shape, dtype), _effects(effect_spec)


def _store_abstract_eval(*avals, tree, effect_spec, has_mask):
    return [], _effects(effect_spec)


load_p.def_effectful_abstract_eval(_load_abstract_eval)
store_p.def_effectful_abstract_eval(_store_abstract_eval)


def _view_shape_dtype(ref):
    """Shape and dtype of a Ref or a view of one, without reading it."""
    if hasattr(ref, "transforms"):
        return tuple(ref.shape), ref.dtype
    inner = jax.typeof(ref).inner_aval
    return inner.shape, inner.dtype


def load(ref, *, mask=None):
    """Reads ``ref`` (or a view); lanes where ``mask`` is false are unspecified."""
    shape, dtype = _view_shape_dtype(ref)
    flat, tree, spec = _flatten_with_effects((ref, mask), ("r", None))
    return load_p.bind(*flat, tree=tree, effect_spec=spec, has_mask=mask is not None,
                       shape=tuple(shape), dtype=jnp.dtype(dtype))


def store(ref, val, *, mask=None):
    """Writes ``val`` into ``ref`` (or a view) where ``mask`` holds."""
    shape, dtype = _view_shape_dtype(ref)
    val = jnp.asarray(val)
    if tuple(val.shape) != tuple(shape) or val.dtype != jnp.dtype(dtype):
        raise ValueError(f"pallas_tpu.store: the value ({val.dtype}, shape {tuple(val.shape)}) "
                         f"must have the Ref's shape {tuple(shape)} and "
                         f"dtype {jnp.dtype(dtype)}, as in JAX; broadcast or cast it first.")
    flat, tree, spec = _flatten_with_effects((ref, val, mask), ("w", None, None))
    store_p.bind(*flat, tree=tree, effect_spec=spec, has_mask=mask is not None)


# --- hardware PRNG ------------------------------------------------------------------

prng_seed_p.def_abstract_eval(lambda *seeds: [])
prng_random_bits_p.def_abstract_eval(
    lambda *, shape: jax.core.ShapedArray(shape, jnp.dtype(jnp.int32)))


def prng_seed(*seeds):
    """Seeds the core's hardware PRNG (ints or int32 scalars, or a Pallas key:
    ``to_pallas_key`` of a JAX key, e.g. read from an SMEM key operand, whose
    two words are the seeds, as in JAX)."""
    prng_seed_p.bind(*(s if _is_key_array(s) else jnp.asarray(s, jnp.int32) for s in seeds))


def _is_key_array(x) -> bool:
    dtype = getattr(x, "dtype", None)
    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def prng_random_bits(shape):
    """A block of random int32 bits from the hardware PRNG."""
    return prng_random_bits_p.bind(shape=tuple(int(d) for d in shape))


# --- value ops with no portable spelling ----------------------------------------------

def reciprocal(x, *, approx: bool = False):
    """``1 / x``; ``approx=True`` allows the TPU's fast approximate reciprocal.
    Expressed with portable ops, so the exact form runs on any backend."""
    if approx:
        return reciprocal_approx_p.bind(x)
    return 1.0 / x


reciprocal_approx_p = kernel_primitive("tpu_reciprocal_approx", owner=OWNER)
reciprocal_approx_p.def_abstract_eval(lambda aval: aval)
