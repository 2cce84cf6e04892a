"""Semaphores and multi-GPU operations of Mosaic GPU kernels (JAX 0.12's
``plgpu.SemaphoreType``, ``semaphore_signal_multicast``, ``multimem_store``,
``multimem_load_reduce``, ``semaphore_signal``/``semaphore_wait``, ``remote_ref``).

A semaphore is traced as an int32 Ref whose memory space is its scratch type
(``SemaphoreArray``), so the frontend's ``pl.semaphore_*`` primitives take it
and the backend rebuilds JAX's own semaphore for the rebuilt kernel. The
frontend's semaphore primitives are replayed with JAX's ``pl.semaphore_*``;
the operations below are recorded with ``ops.bind`` and replayed with JAX's
``plgpu`` function of the same name, like every other Mosaic GPU operation.
Multi-GPU kernels run under ``shard_map``: ``collective_axes`` and
``device_id`` name its mesh axes, as in JAX.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Hashable

import numpy as np

from pallas_mgpu import evaluate, ops
from pallas_mgpu.ops import aval_of, bind


class SemaphoreType(enum.Enum):
    """``SemaphoreType.REGULAR`` is one semaphore (in GMEM, starting at 0);
    ``SemaphoreType.REGULAR((n,))`` an array of them. A scratch type."""
    REGULAR = "regular"
    BARRIER = "barrier"

    def __call__(self, shape=()) -> SemaphoreArray:
        shape = (shape,) if isinstance(shape, (int, np.integer)) else shape
        return SemaphoreArray(self, tuple(int(d) for d in shape))

    def get_ref_aval(self):
        """The Ref type of one semaphore (JAX's scratch-type protocol)."""
        return self(()).get_ref_aval()

    def get_array_aval(self):
        """The value a semaphore reads as: an int32 scalar count."""
        import jax
        return jax.core.ShapedArray((), np.dtype(np.int32))


@dataclasses.dataclass(frozen=True)
class SemaphoreArray:
    """An array of ``shape`` semaphores of one kind; the memory space its Ref carries."""
    kind: SemaphoreType
    shape: tuple[int, ...]

    @property
    def dtype(self):
        return np.dtype(np.int32)

    def get_ref_aval(self):
        import jax
        return jax.ref.AbstractRef(jax.core.ShapedArray(self.shape, self.dtype),
                                   memory_space=self)

    def to_jax(self):
        """JAX's ``plgpu.SemaphoreType`` of this kind and shape."""
        from jax.experimental.pallas import mosaic_gpu as plgpu
        return getattr(plgpu.SemaphoreType, self.kind.name)(self.shape)

    def __str__(self):
        return f"SemaphoreType.{self.kind.name}{self.shape}"


def _axes(collective_axes) -> Hashable:
    return tuple(collective_axes) if isinstance(collective_axes, list) else collective_axes


def _int32(x):
    import jax.numpy as jnp
    return jnp.asarray(x, jnp.int32)


# --- the Mosaic GPU variants of the semaphore operations ---------------------------------

def semaphore_signal(semaphore, inc=1, *, device_id=None, memory_scope: str = "sys") -> None:
    """Adds ``inc`` to ``semaphore``; on the device ``device_id`` (mesh
    coordinates) when given. ``memory_scope``: "sys" or "gpu"."""
    _check_scope(memory_scope, "semaphore_signal")
    bind("semaphore_signal", semaphore, _int32(inc), device_id, memory_scope=memory_scope)


def _semaphore_signal(sem, inc, device_id, *, memory_scope):
    from jax.experimental.pallas import mosaic_gpu as plgpu
    plgpu.semaphore_signal(sem, inc, device_id=device_id, memory_scope=memory_scope)


def semaphore_wait(semaphore, value=1, *, decrement: bool = True,
                   memory_scope: str = "sys") -> None:
    """Waits until ``semaphore`` holds at least ``value``, then subtracts it
    (not with ``decrement=False``)."""
    _check_scope(memory_scope, "semaphore_wait")
    bind("semaphore_wait", semaphore, _int32(value), decrement=bool(decrement),
         memory_scope=memory_scope)


def _check_scope(scope, fn):
    if scope not in ("sys", "gpu"):
        raise ValueError(f"plgpu.{fn}: memory_scope must be 'sys' or 'gpu', got {scope!r}.")


def semaphore_signal_multicast(semaphore, value=1, *, collective_axes) -> None:
    """Adds ``value`` to ``semaphore`` on every device along ``collective_axes``
    (which must name every axis of the mesh)."""
    bind("semaphore_signal_multicast", semaphore, _int32(value),
         collective_axes=_axes(collective_axes))


# --- multimem (NVLink switch) loads and stores ----------------------------------------------

def multimem_store(source, ref, collective_axes) -> None:
    """Stores ``source`` into the GMEM ``ref`` of every device along
    ``collective_axes`` (sent to the switch once)."""
    bind("multimem_store", source, ref, collective_axes=_axes(collective_axes))


def _multimem_store(source, ref, *, collective_axes):
    from jax.experimental.pallas import mosaic_gpu as plgpu
    plgpu.multimem_store(source, ref, collective_axes)


_REDUCTIONS = ("add", "min", "max", "and", "or", "xor")


def multimem_load_reduce(ref, *, collective_axes, reduction_op: str):
    """``ref`` (GMEM) of every device along ``collective_axes``, reduced with
    ``reduction_op`` ("add", "min", "max", "and", "or", "xor")."""
    if reduction_op not in _REDUCTIONS:
        raise ValueError(f"plgpu.multimem_load_reduce: reduction_op must be one of "
                         f"{_REDUCTIONS}, got {reduction_op!r}.")
    return bind("multimem_load_reduce", ref, collective_axes=_axes(collective_axes),
                reduction_op=reduction_op, out_avals=(aval_of(ref),))[0]


# --- peer memory ------------------------------------------------------------------------------

def remote_ref(ref, device_id, device_id_type=None):
    """``ref`` (GMEM) as it lives on the device ``device_id`` (mesh coordinates:
    an int for a 1-D mesh, a tuple, or a dict by axis name): reads, writes and
    TMA copies through it reach that device's buffer."""
    from jax.experimental.pallas import mosaic_gpu as plgpu
    # JAX's view (its transform is lowered by JAX's Mosaic GPU rules on replay);
    # the built-in interpreter and JAX's GPU interpreter both refuse it.
    if device_id_type is None:
        return plgpu.remote_ref(ref, device_id)
    return plgpu.remote_ref(ref, device_id, device_id_type)


def multicast_ref(ref, collective_axes):
    """``ref`` (GMEM) on every device along ``collective_axes`` (all the mesh's
    axes, as in JAX): a TMA copy (``copy_smem_to_gmem``) into it reaches each."""
    from jax.experimental.pallas import mosaic_gpu as plgpu
    # JAX's view, as for remote_ref: lowered by JAX's Mosaic GPU rules on replay
    return plgpu.multicast_ref(ref, collective_axes)


def cluster_ref(ref, block_id):
    """``ref`` (SMEM) as it lives in another CTA of the cluster, ``block_id`` a
    dict from one cluster axis name to that CTA's index along it."""
    from jax.experimental.pallas import mosaic_gpu as plgpu
    # JAX's view, as for remote_ref: lowered by JAX's Mosaic GPU rules on replay
    return plgpu.cluster_ref(ref, block_id)


# --- the frontend's pl.semaphore_* on this backend's semaphores -----------------------------

def is_semaphore_op(eqn) -> bool:
    """A ``pl.semaphore_*`` equation on a ``SemaphoreType`` Ref (the others,
    e.g. on an int32 buffer as TPU kernels allocate them, check.py refuses)."""
    aval = getattr(eqn.invars[0], "aval", None)
    return (eqn.primitive.name.startswith("semaphore_")
            and isinstance(getattr(aval, "memory_space", None), SemaphoreArray))


def _semaphore(ref, idx):
    return ref.at[tuple(idx)] if idx else ref


@evaluate.frontend_rule("semaphore_signal")
def _replay_signal(eqn, invals):
    from jax.experimental import pallas as pl
    import jax
    ref, rest = invals[0], invals[1:]
    n = len(ref.shape)
    idx, inc, dev = rest[:n], rest[n], rest[n + 1:]
    p = eqn.params
    kw = {}
    if p["device_id_tree"] is not None:
        kw["device_id"] = jax.tree.unflatten(p["device_id_tree"], dev)
        if p["device_id_type"] != "mesh":      # JAX's default; naming it is deprecated
            kw["device_id_type"] = getattr(pl.DeviceIdType, p["device_id_type"].upper())
    if p["core_index"] is not None:
        kw["core_index"] = p["core_index"]
    pl.semaphore_signal(_semaphore(ref, idx), inc, **kw)
    return []


@evaluate.frontend_rule("semaphore_wait")
def _replay_wait(eqn, invals):
    from jax.experimental import pallas as pl
    ref, rest = invals[0], invals[1:]
    n = len(ref.shape)
    pl.semaphore_wait(_semaphore(ref, rest[:n]), rest[n], decrement=eqn.params["decrement"])
    return []


@evaluate.frontend_rule("semaphore_read")
def _replay_read(eqn, invals):
    from jax.experimental import pallas as pl
    return pl.semaphore_read(_semaphore(invals[0], invals[1:]))


# Replayed with JAX's function of the same name unless adapted here (ops.py).
ops.ADAPTERS.update({"semaphore_signal": _semaphore_signal, "multimem_store": _multimem_store})
