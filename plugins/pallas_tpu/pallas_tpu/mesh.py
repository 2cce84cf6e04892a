"""``TensorCoreMesh``: the TensorCores of one chip as a mesh for ``pl.kernel``.

The frontend launches a mesh kernel as a ``pallas_call`` whose named grid is
the mesh; the mesh supplies the rest of its meaning: operands stay in HBM
(``default_memory_space``, shared by the cores) and its axis is
``core_parallel`` (``compiler_params``). In TPU interpret mode each point of
a core-parallel axis runs on its own simulated core, concurrently, so
cross-core semaphores behave as on the chip.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict

import numpy as np
from jax.experimental.pallas.tpu import CoreType

from pallas_tpu import spaces
from pallas_tpu.memory import MemorySpace
from pallas_tpu.params import CORE_PARALLEL, CompilerParams, active_interpret_mode

__all__ = ["CoreType", "TensorCoreMesh", "create_tensorcore_mesh"]


@dataclasses.dataclass(frozen=True)
class TensorCore:
    """One TensorCore of a ``TensorCoreMesh`` (its ``devices``)."""
    id: int


@dataclasses.dataclass(frozen=True)
class TensorCoreMesh:
    """``num_cores`` TensorCores along the axis ``axis_name``
    (``lax.axis_index(axis_name)`` is the core a program runs on)."""
    axis_name: str
    num_cores: int = 1

    def __post_init__(self):
        if not isinstance(self.axis_name, str):
            raise TypeError(f"TensorCoreMesh: axis_name must be a str, got {self.axis_name!r}")
        if isinstance(self.num_cores, bool) or not isinstance(self.num_cores, int) \
                or self.num_cores < 1:
            raise ValueError(f"TensorCoreMesh: num_cores must be a positive int, got "
                             f"{self.num_cores!r}")

    @property
    def shape(self):
        """``{axis_name: num_cores}``, the mesh's one axis."""
        return OrderedDict({self.axis_name: self.num_cores})

    @property
    def core_type(self) -> CoreType:
        """``CoreType.TC``: every point is a TensorCore."""
        return CoreType.TC

    @property
    def default_memory_space(self) -> MemorySpace:
        """``ANY`` (HBM): where a ``pl.kernel`` over this mesh sees its operands."""
        return MemorySpace.ANY

    @property
    def scalar_memory_space(self) -> MemorySpace:
        """``SMEM``: where a scalar the body closes over is passed (as JAX does)."""
        return MemorySpace.SMEM

    @property
    def devices(self) -> np.ndarray:
        """One ``TensorCore`` per core, as JAX's mesh lists them."""
        return np.array([TensorCore(i) for i in range(self.num_cores)], dtype=object)

    @property
    def axis_names(self) -> tuple[str]:
        """``(axis_name,)``, the mesh's one axis (JAX's mesh attribute)."""
        return (self.axis_name,)

    def operand_memory_space(self, aval):
        """Where an operand of a kernel over this mesh lives when its type says
        so (``spaces.operand_space``); None: ``default_memory_space``."""
        return spaces.operand_space(aval)

    def core_map_operand(self, value, space, interpret=None):
        """The value of a Ref that ``core_map`` hands to the kernel in ``space``
        (not the default): placed there, as JAX's core_map places it (XLA then
        gives the operand that memory space's color). Not when an interpreter
        runs the kernel: there is no placement, and JAX's TPU interpreter
        refuses a value placed in VMEM or SMEM."""
        if space == MemorySpace.VMEM and self.num_cores > 1:
            # each core has its own VMEM: which core's copy would the program see?
            raise NotImplementedError(
                "TensorCoreMesh does not support VMEM inputs/outputs when there are >1 cores. "
                "Use HBM or ANY instead.")
        if interpret or active_interpret_mode() is not None:
            return value
        if space in (MemorySpace.HBM, MemorySpace.VMEM, MemorySpace.SMEM):
            return spaces.with_memory_space_constraint(value, space)
        return value

    @property
    def compiler_params(self) -> CompilerParams:
        """The params a kernel over this mesh gets: its axis ``core_parallel``."""
        return CompilerParams(dimension_semantics=(CORE_PARALLEL,))


def create_tensorcore_mesh(axis_name: str, devices=None, num_cores: int | None = None):
    """JAX's older spelling: ``num_cores`` from ``devices[0]`` when given."""
    if devices is not None and num_cores is not None:
        raise ValueError("create_tensorcore_mesh: pass devices or num_cores, not both.")
    if num_cores is None:
        num_cores = getattr(devices[0], "num_cores", 1) if devices is not None else 1
    return TensorCoreMesh(axis_name, num_cores)
