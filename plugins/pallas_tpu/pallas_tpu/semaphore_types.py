"""The dtype a kernel reads off a semaphore Ref: JAX's semaphore dtype classes.

Ours holds every semaphore as an int32 Ref whose memory space says its kind
(``SemaphoreKind``): that is what every interpreter and the frontend's
semaphore primitives evaluate. JAX's kernels tell a semaphore by its dtype
(``jnp.issubdtype(ref.dtype, pltpu.dma_semaphore)``, ``pl.semaphore``), so a
semaphore Ref's type answers ``dtype`` with JAX's semaphore dtype of its kind
while its ``inner_aval`` (what is stored and evaluated) stays int32.
"""

from __future__ import annotations

import jax


def jax_semaphore_dtype(kind):
    """JAX's semaphore dtype (an instance) for our ``SemaphoreKind``."""
    from jax.experimental.pallas import tpu as jax_pltpu
    return jax_pltpu.SemaphoreType[kind.name].dtype


def dma_semaphore_class():
    """JAX's ``pltpu.dma_semaphore``: the dtype class of DMA semaphores."""
    from jax.experimental.pallas import tpu as jax_pltpu
    return jax_pltpu.dma_semaphore


def semaphore_class():
    """JAX's ``pl.semaphore``: the dtype class of regular (and barrier) semaphores."""
    from jax.experimental import pallas as jax_pl
    return jax_pl.semaphore


class SemaphoreRefType(jax.ref.AbstractRef):
    """A semaphore Ref's type: int32 underneath, JAX's semaphore dtype of its
    kind as ``dtype``. Any other update (a memory space that is no semaphore
    kind) gives back a plain Ref type."""
    __slots__ = ()

    @property
    def dtype(self):
        return jax_semaphore_dtype(self.memory_space)

    def update(self, inner_aval=None, memory_space=None, kind=None):
        new = super().update(inner_aval, memory_space, kind)
        space = new.memory_space
        # still a semaphore kind (an enum with a ``name`` JAX's SemaphoreType knows)
        if getattr(space, "name", None) in ("REGULAR", "DMA", "BARRIER"):
            return SemaphoreRefType(new.inner_aval, space, new.kind)
        return new
