"""From frontend/plugin memory spaces and scratch Ref types to JAX's ``pltpu`` ones."""

from __future__ import annotations

import numpy as np

import pallas_frontend as pf

from pallas_tpu import _jax_private, key_operands
from pallas_tpu.memory import MemorySpace, SemaphoreKind


def block_memory_space(space):
    """The ``pl.BlockSpec(memory_space=...)`` value for a BlockMapping's space."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    if space is None or space is pf.MemorySpace.DEFAULT:
        return None
    if isinstance(space, SemaphoreKind):    # a semaphore Ref's type (pl.empty_ref_like)
        return pltpu.SEMAPHORE
    table = {
        pf.MemorySpace.ANY: pl.ANY, pf.MemorySpace.HOST: pl.HOST,
        MemorySpace.ANY: pl.ANY, MemorySpace.VMEM: pltpu.VMEM,
        MemorySpace.VMEM_SHARED: pltpu.VMEM_SHARED, MemorySpace.SMEM: pltpu.SMEM,
        MemorySpace.CMEM: pltpu.CMEM, MemorySpace.HBM: pltpu.HBM,
        MemorySpace.SEMAPHORE: pltpu.SEMAPHORE,
        # JAX places checkify errors, prefetched indices and PRNG keys in SMEM
        pf.MemorySpace.ERROR: pltpu.SMEM, pf.MemorySpace.INDEX: pltpu.SMEM,
        pf.MemorySpace.KEY: pltpu.SMEM,
    }
    if space not in table:
        raise NotImplementedError(f"memory space {space!r} has no TPU counterpart")
    return table[space]


def scratch_type(shape, dtype, space):
    """The ``pltpu`` scratch type (for ``scratch_shapes`` or ``pl.run_scoped``)."""
    from jax.experimental.pallas import tpu as pltpu
    shape = tuple(shape)
    if isinstance(space, SemaphoreKind):
        return getattr(pltpu.SemaphoreType, space.name)(shape)
    if space is MemorySpace.SEMAPHORE:
        return pltpu.SemaphoreType.REGULAR(shape)
    target = block_memory_space(space)
    if target is None:
        target = pltpu.VMEM
    if key_operands.is_key(dtype):     # a scratch of keys: as JAX's lowering holds them
        return target(shape, key_operands.for_mosaic_dtype(dtype))
    return target(shape, np.dtype(dtype))


def scratch_type_of_aval(ref_aval):
    inner = ref_aval.inner_aval
    return scratch_type(inner.shape, inner.dtype, ref_aval.memory_space)


def with_memory_space_constraint(x, memory_space):
    """``x`` unchanged, asking that it be placed in ``memory_space`` (HBM,
    VMEM, SMEM or HOST; ANY leaves it free) where it is handed to a kernel:
    Mosaic then receives that operand (and an output aliased to it) there."""
    allowed = (MemorySpace.HBM, MemorySpace.VMEM, MemorySpace.SMEM, pf.MemorySpace.HOST)
    if memory_space in (MemorySpace.ANY, pf.MemorySpace.ANY):
        return x
    if memory_space not in allowed:
        raise NotImplementedError(
            f"pallas_tpu.with_memory_space_constraint: memory space {memory_space!r} is not "
            "one an operand can be placed in; use HBM, VMEM, SMEM or pallas_frontend.HOST.")
    return _jax_private.memory_space_constraint(x, block_memory_space(memory_space),
                                               to_host=memory_space is pf.MemorySpace.HOST)


def operand_space(aval):
    """Where a mesh kernel's operand lives when its type says so: a Ref's own
    space (``jax.new_ref(x, memory_space=...)``), kept as it is so that the
    body's Ref has the very same type, or the space an array was constrained
    to (``with_memory_space_constraint``); None for the mesh's default."""
    import jax
    if isinstance(aval, jax.ref.AbstractRef) and aval.memory_space is not None:
        return aval.memory_space
    return constrained_space(getattr(aval, "memory_space", None))


def constrained_space(jax_space):
    """Ours for a memory space JAX's ``with_memory_space_constraint`` puts on
    an array's type (HBM, VMEM or SMEM); None for any other."""
    from jax.experimental.pallas import tpu as pltpu
    table = {pltpu.HBM: MemorySpace.HBM, pltpu.VMEM: MemorySpace.VMEM,
             pltpu.SMEM: MemorySpace.SMEM}
    return table.get(jax_space) if jax_space is not None else None
