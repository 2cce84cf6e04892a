"""TPU memory spaces and semaphore types, as the frontend sees them.

A kernel is traced by the frontend, so these types only have to describe a
Ref (shape, dtype, memory space). The backend maps them onto JAX's Mosaic
types when it rebuilds the kernel (``rebuild.py``). Semaphores are traced as
int32 Refs, which is what the frontend's semaphore primitives expect.
"""

from __future__ import annotations

import dataclasses
import enum

import numpy as np

import pallas_frontend as pf


class MemorySpace(enum.Enum):
    """Where a TPU operand or scratch buffer lives.

    ``MemorySpace.VMEM((8, 128), jnp.float32)`` makes a scratch type; as a
    ``BlockSpec(memory_space=...)`` it places the operand's blocks there.
    """
    ANY = "any"              # leave the operand in HBM; the kernel DMAs by hand
    VMEM = "vmem"            # vector memory: the default for pipelined blocks
    VMEM_SHARED = "vmem_shared"  # vector memory that all cores of a chip see
    SMEM = "smem"            # scalar memory
    CMEM = "cmem"
    HBM = "hbm"
    SEMAPHORE = "semaphore"

    def __call__(self, shape, dtype) -> pf.MemoryRef:
        return pf.MemoryRef(tuple(shape), dtype, self)   # a key dtype stays a key dtype

    def like(self, x) -> pf.MemoryRef:
        """``VMEM.like(x)``: a buffer of ``x``'s shape and dtype (an array,
        ShapeDtypeStruct or abstract value) in this space."""
        if getattr(x, "shape", None) is None or getattr(x, "dtype", None) is None:
            raise TypeError(f"pallas_tpu.{self.name}.like(x): x must have a shape and a dtype "
                            f"(an array, jax.ShapeDtypeStruct or abstract value), got {x!r}.")
        return self(x.shape, x.dtype)

    def __str__(self):
        return self.name

    def __matmul__(self, mesh):
        """``VMEM @ mesh`` (JAX's): this space of the cores ``mesh`` runs on."""
        if getattr(mesh, "supported_memory_spaces", None) is None:
            return NotImplemented
        return CoreMemorySpace(self, mesh)


@dataclasses.dataclass(frozen=True)
class CoreMemorySpace:
    """A memory space tied to a mesh (``pltpu.VMEM @ mesh``), as JAX writes
    the memory of one kind of core. Ours launches one kernel at a time, on
    one mesh, so in it this is the space itself: calling it makes a plain
    scratch type of ``memory_space``. (JAX also lets a kernel of one core
    type name another's memory, for its multi-kernel launches, which ours
    does not provide.)"""
    memory_space: MemorySpace
    mesh: object

    def __post_init__(self):
        if self.memory_space not in self.mesh.supported_memory_spaces:
            supported = ", ".join(str(s) for s in self.mesh.supported_memory_spaces)
            raise ValueError(f"Memory space {self.memory_space} is not supported by mesh "
                             f"{self.mesh} (its spaces: {supported}).")

    def __call__(self, shape, dtype) -> pf.MemoryRef:
        return self.memory_space(shape, dtype)

    def __str__(self):
        core = getattr(self.mesh, "core_type", None)
        return f"{self.memory_space}@{getattr(core, 'name', core)}"


ANY = MemorySpace.ANY
VMEM = MemorySpace.VMEM
VMEM_SHARED = MemorySpace.VMEM_SHARED
SMEM = MemorySpace.SMEM
CMEM = MemorySpace.CMEM
HBM = MemorySpace.HBM
SEMAPHORE = MemorySpace.SEMAPHORE


class SemaphoreKind(enum.Enum):
    """The memory space a semaphore Ref carries; it also says which kind it is."""
    REGULAR = "regular"
    DMA = "dma"
    BARRIER = "barrier"

    def __str__(self):
        return f"SEMAPHORE({self.value})"


class SemaphoreType(enum.Enum):
    """``SemaphoreType.DMA`` is one DMA semaphore; ``SemaphoreType.DMA((2,))``
    an array of two. Usable as scratch shapes and in ``run_scoped``."""
    REGULAR = "regular"
    DMA = "dma"
    BARRIER = "barrier"

    def __call__(self, shape=()) -> SemaphoreArray:
        shape = (shape,) if isinstance(shape, (int, np.integer)) else shape   # DMA(2), as JAX
        return SemaphoreArray(SemaphoreKind(self.value), tuple(int(d) for d in shape))

    def get_ref_aval(self):
        """The Ref type of one semaphore of this kind (JAX's scratch-type protocol)."""
        return self(()).get_ref_aval()

    def __matmul__(self, mesh):
        """``SemaphoreType.DMA @ mesh`` (JAX's): one semaphore of ``mesh``'s cores."""
        if getattr(mesh, "supported_memory_spaces", None) is None:
            return NotImplemented
        CoreMemorySpace(MemorySpace.SEMAPHORE, mesh)       # JAX's check
        return self(())

    # As an out_shape, ``SemaphoreType.DMA`` is one semaphore, as ``DMA(())`` (as in JAX).
    shape = property(lambda self: (), doc="``()``: as an out_shape, one semaphore.")
    dtype = property(lambda self: np.dtype(np.int32),
                     doc="int32, the type every interpreter stores a semaphore as.")


class SemaphoreArray:
    """A shaped array of semaphores of one kind (a scratch type)."""

    def __init__(self, kind: SemaphoreKind, shape: tuple[int, ...]):
        self.kind, self.shape, self.dtype = kind, shape, np.dtype(np.int32)

    def get_ref_aval(self):
        import jax

        from pallas_tpu.semaphore_types import SemaphoreRefType
        return SemaphoreRefType(jax.core.ShapedArray(self.shape, self.dtype),
                                memory_space=self.kind)

    def __repr__(self):
        return f"SemaphoreType.{self.kind.name}({self.shape})"


def is_semaphore_space(space) -> bool:
    return isinstance(space, SemaphoreKind) or space is MemorySpace.SEMAPHORE
