"""From frontend/plugin memory spaces and scratch Ref types to JAX's ``pltpu`` ones."""

from __future__ import annotations

import numpy as np

import pallas_frontend as pf

from pallas_tpu import _jax_private, key_operands
from pallas_tpu.memory import MemorySpace, SemaphoreKind


# JAX places checkify errors, prefetched indices and PRNG keys in SMEM
_SMEM_PLACED = frozenset({pf.MemorySpace.ERROR, pf.MemorySpace.INDEX, pf.MemorySpace.KEY})


def tpu_space(space):
    """A frontend space the TPU keeps in a memory of its own as that memory
    (SMEM for the ``ERROR``/``INDEX``/``KEY`` spaces); any other unchanged."""
    return MemorySpace.SMEM if space in _SMEM_PLACED else space


def block_memory_space(space):
    """The ``pl.BlockSpec(memory_space=...)`` value for a BlockMapping's space."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    if space is None or space is pf.MemorySpace.DEFAULT:
        return None
    space = tpu_space(space)
    if isinstance(space, SemaphoreKind):    # a semaphore Ref's type (pl.empty_ref_like)
        return pltpu.SEMAPHORE
    table = {
        pf.MemorySpace.ANY: pl.ANY, pf.MemorySpace.HOST: pl.HOST,
        MemorySpace.ANY: pl.ANY, MemorySpace.VMEM: pltpu.VMEM,
        MemorySpace.VMEM_SHARED: pltpu.VMEM_SHARED, MemorySpace.SMEM: pltpu.SMEM,
        MemorySpace.CMEM: pltpu.CMEM, MemorySpace.HBM: pltpu.HBM,
        MemorySpace.SEMAPHORE: pltpu.SEMAPHORE,
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
    Mosaic then receives that operand (and an output aliased to it) there.
    ``jax.typeof(x).memory_space`` is then the very space given, as in JAX."""
    allowed = (MemorySpace.HBM, MemorySpace.VMEM, MemorySpace.SMEM, pf.MemorySpace.HOST)
    if memory_space in (MemorySpace.ANY, pf.MemorySpace.ANY):
        return x
    if memory_space not in allowed:
        raise NotImplementedError(
            f"pallas_tpu.with_memory_space_constraint: memory space {memory_space!r} is not "
            "one an operand can be placed in; use HBM, VMEM, SMEM or pallas_frontend.HOST.")
    host = memory_space is pf.MemorySpace.HOST      # XLA's own host memory: JAX's space
    return _jax_private.memory_space_constraint(
        x, block_memory_space(memory_space) if host else memory_space, to_host=host)


def jax_placed_context(ctx, interpreting: bool):
    """``ctx`` (our LoweringContext) with each operand placed by ours'
    ``with_memory_space_constraint`` typed as JAX's lowering expects: in
    JAX's space of that name (Mosaic is told to place it there), or, for an
    interpreter, in none (JAX's TPU interpreter refuses VMEM and SMEM
    operands; a placement changes no value)."""
    import jax
    avals = list(ctx.mlir_ctx.avals_in)
    for i, aval in enumerate(avals):
        space = getattr(aval, "memory_space", None)
        if space is None or isinstance(space, jax.memory.Space) or isinstance(
                aval, jax.ref.AbstractRef):
            continue
        if interpreting:
            avals[i] = aval.update(memory_space=jax.memory.Space.Device)
        elif isinstance(space, MemorySpace):
            avals[i] = aval.update(memory_space=block_memory_space(space))
    if avals == list(ctx.mlir_ctx.avals_in):
        return ctx
    import dataclasses
    return dataclasses.replace(ctx, mlir_ctx=ctx.mlir_ctx.replace(avals_in=avals))


def operand_space(aval):
    """Where a mesh kernel's operand lives when its type says so: a Ref's own
    space (``jax.new_ref(x, memory_space=...)``), kept as it is so that the
    body's Ref has the very same type, or the space an array was constrained
    to (``with_memory_space_constraint``); None for the mesh's default."""
    import jax
    if isinstance(aval, jax.ref.AbstractRef) and aval.memory_space is not None:
        return aval.memory_space
    return constrained_space(getattr(aval, "memory_space", None))


def constrained_space(space):
    """Ours for the memory space ``with_memory_space_constraint`` (ours, or
    JAX's) put on an array's type, where it is HBM, VMEM or SMEM; else None."""
    from jax.experimental.pallas import tpu as pltpu
    if space in (MemorySpace.HBM, MemorySpace.VMEM, MemorySpace.SMEM):
        return space
    table = {pltpu.HBM: MemorySpace.HBM, pltpu.VMEM: MemorySpace.VMEM,
             pltpu.SMEM: MemorySpace.SMEM}
    return table.get(space) if space is not None else None
