"""SparseCore meshes and chip facts (JAX's ``tpu_sc`` mesh names).

A SparseCore kernel is ``pl.kernel(body, mesh=VectorSubcoreMesh(...))``: the
body runs once per vector subcore (``num_cores`` SparseCores, each with
``num_subcores`` tiles), or once per SparseCore with ``ScalarSubcoreMesh``.
The frontend turns the mesh's axes into the kernel's named grid; the mesh adds
what makes it a SparseCore kernel: the compiler params' ``kernel_type``
(kept when the user passes params of their own, ``complete_compiler_params``),
which the backend reads to rebuild the kernel for JAX's SparseCore lowering
or to run it in this plugin's CPU model (``sc_interpret``).

Chip facts: on a TPU host (or under an abstract mesh naming a TPU) they are
JAX's; elsewhere they describe the chip the CPU model stands for (``TPU v6e``
unless ``PALLAS_TPU_SC_CHIP`` names another: ``v5p``, ``v6e``, ``7x``), so a
kernel written against ``get_sparse_core_info()`` runs unchanged on CPU.
"""

from __future__ import annotations

import dataclasses
import os
from collections import OrderedDict
from typing import Any

import jax

from pallas_tpu import spaces
from pallas_tpu.memory import MemorySpace
from pallas_tpu.mesh import CoreType
from pallas_tpu.params import CORE_PARALLEL, SUBCORE_PARALLEL, CompilerParams

__all__ = ["Indices", "ScalarSubcoreMesh", "SparseCorePushStreamWarning", "VectorSubcoreMesh",
           "get_sparse_core_info", "model_chip"]

MODEL_CHIP_ENV = "PALLAS_TPU_SC_CHIP"
_MODEL_CHIPS = {"v5p": "TPU_V5P", "v6e": "TPU_V6E", "7x": "TPU_7X"}


class SparseCorePushStreamWarning(UserWarning):
    """A push stream ignores its destination semaphore (JAX warns the same)."""


def model_chip() -> str:
    """The chip the CPU model stands for: ``PALLAS_TPU_SC_CHIP`` or ``v6e``."""
    chip = os.environ.get(MODEL_CHIP_ENV, "v6e").lower()
    if chip not in _MODEL_CHIPS:
        raise ValueError(f"{MODEL_CHIP_ENV}={chip!r}: the SparseCore CPU model knows "
                         f"{sorted(_MODEL_CHIPS)}; set one of those.")
    return chip


def _host_tpu_info():
    """JAX's chip facts where there is a TPU to ask (a local one, or the abstract
    device of the context mesh); None on a host without either."""
    from jax.experimental.pallas import tpu as jax_pltpu
    device = getattr(jax.sharding.get_abstract_mesh(), "abstract_device", None)
    # a mesh of CPU devices (jax.set_mesh on a host without a TPU) names no TPU
    if getattr(device, "platform", None) != "tpu" and jax.default_backend() != "tpu":
        return None
    return jax_pltpu.get_tpu_info()


def get_sparse_core_info():
    """The SparseCores of this chip (``num_cores``, ``num_subcores``,
    ``num_lanes``, ``vmem_capacity_bytes``, ``dma_granule_size_bytes``; JAX's
    ``SparseCoreInfo``). Raises ``RuntimeError`` on a TPU without SparseCores
    (v5e); on a host without a TPU, the modelled chip's (``model_chip()``)."""
    info = _host_tpu_info()
    if info is None:
        from jax.experimental.pallas import tpu as jax_pltpu
        version = getattr(jax_pltpu.ChipVersion, _MODEL_CHIPS[model_chip()])
        info = jax_pltpu.get_tpu_info_for_chip(version, 1)
    sc = getattr(info, "sparse_core", None)
    if sc is None:
        raise RuntimeError(f"This TPU ({getattr(info, 'chip_version', '?')}) has no SparseCores; "
                           "SparseCore kernels need v5p, v6e or TPU7x.")
    return sc


def sparsecore_kind(compiler_params) -> str | None:
    """``"SC_VECTOR_SUBCORE"`` / ``"SC_SCALAR_SUBCORE"`` when a kernel's compiler
    params name a SparseCore kernel type (its mesh completed them so), else None."""
    name = getattr(getattr(compiler_params, "kernel_type", None), "name", None)
    return name if name in (CoreType.SC_VECTOR_SUBCORE.name,
                            CoreType.SC_SCALAR_SUBCORE.name) else None


def tracing_sparsecore_kernel() -> bool:
    """Whether the kernel body traced on this thread runs on SparseCores: an
    emit_pipeline there is recorded for JAX's own."""
    from pallas_frontend.backend_api import tracing_kernel_params
    return sparsecore_kind(tracing_kernel_params()) is not None


def _check_count(mesh: str, field: str, value, limit: int, what: str):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{mesh}: {field} must be a positive int, got {value!r}.")
    if value > limit:
        raise ValueError(f"{mesh}: {field}={value}, but the chip has only {limit} {what}; "
                         f"pass {field}<={limit}.")


class _SparseCoreMesh:
    """What both SparseCore meshes share: the params a kernel over them gets,
    read off the mesh's ``core_type`` and ``dimension_semantics``, and operand
    spaces."""
    default_memory_space = property(lambda self: MemorySpace.HBM)

    @property
    def compiler_params(self) -> CompilerParams:
        """What a kernel over this mesh gets without params of its own."""
        return self.complete_compiler_params(None)

    def operand_memory_space(self, aval):
        """A Ref's own space (a semaphore, an SMEM index Ref), or an array's
        constrained one; None: ``default_memory_space`` (HBM)."""
        return spaces.operand_space(aval)

    def complete_compiler_params(self, user: CompilerParams | None) -> CompilerParams:
        """The user's params with this mesh's kernel type and axis semantics."""
        semantics = tuple(self.dimension_semantics)
        if user is None:
            return CompilerParams(dimension_semantics=semantics, kernel_type=self.core_type)
        if not isinstance(user, CompilerParams):
            raise TypeError(f"A SparseCore kernel takes pallas_tpu.CompilerParams, got "
                            f"{type(user).__qualname__}; pass pallas_tpu.CompilerParams(...).")
        if user.dimension_semantics is not None:
            raise NotImplementedError(
                "pltpu.CompilerParams(dimension_semantics=) does not apply to a SparseCore "
                "mesh kernel (its axes are core- and subcore-parallel); drop it.")
        return user.replace(kernel_type=self.core_type, dimension_semantics=semantics)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScalarSubcoreMesh(_SparseCoreMesh):
    """The scalar subcores: one program per SparseCore, along ``axis_name``."""
    axis_name: str
    num_cores: int = dataclasses.field(default_factory=lambda: get_sparse_core_info().num_cores)

    def __post_init__(self):
        if not isinstance(self.axis_name, str):
            raise TypeError(f"ScalarSubcoreMesh: axis_name must be a str, got {self.axis_name!r}")
        _check_count("ScalarSubcoreMesh", "num_cores", self.num_cores,
                     get_sparse_core_info().num_cores, "SparseCores")

    core_type = property(lambda self: CoreType.SC_SCALAR_SUBCORE)
    shape = property(lambda self: OrderedDict({self.axis_name: self.num_cores}))
    size = property(lambda self: self.num_cores)
    dimension_semantics = property(lambda self: [CORE_PARALLEL])
    supported_memory_spaces = property(
        lambda self: [MemorySpace.VMEM_SHARED, MemorySpace.SMEM, MemorySpace.SEMAPHORE])


@dataclasses.dataclass(frozen=True, kw_only=True)
class VectorSubcoreMesh(_SparseCoreMesh):
    """The vector subcores: ``num_cores`` x ``num_subcores`` programs, along
    ``core_axis_name`` and ``subcore_axis_name``."""
    core_axis_name: str
    subcore_axis_name: str
    num_cores: int = dataclasses.field(default_factory=lambda: get_sparse_core_info().num_cores)
    num_subcores: int = dataclasses.field(
        default_factory=lambda: get_sparse_core_info().num_subcores)

    def __post_init__(self):
        for field in ("core_axis_name", "subcore_axis_name"):
            if not isinstance(getattr(self, field), str):
                raise TypeError(f"VectorSubcoreMesh: {field} must be a str, got "
                                f"{getattr(self, field)!r}")
        if self.core_axis_name == self.subcore_axis_name:
            raise ValueError(f"VectorSubcoreMesh: the core and subcore axes need two names, got "
                             f"{self.core_axis_name!r} for both.")
        sc = get_sparse_core_info()
        _check_count("VectorSubcoreMesh", "num_cores", self.num_cores, sc.num_cores,
                     "SparseCores")
        _check_count("VectorSubcoreMesh", "num_subcores", self.num_subcores, sc.num_subcores,
                     "subcores per SparseCore")

    core_type = property(lambda self: CoreType.SC_VECTOR_SUBCORE)
    shape = property(lambda self: OrderedDict({self.core_axis_name: self.num_cores,
                                               self.subcore_axis_name: self.num_subcores}))
    size = property(lambda self: self.num_cores * self.num_subcores)
    dimension_semantics = property(lambda self: [CORE_PARALLEL, SUBCORE_PARALLEL])
    supported_memory_spaces = property(lambda self: [
        MemorySpace.VMEM, MemorySpace.VMEM_SHARED, MemorySpace.SMEM, MemorySpace.SEMAPHORE])


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Indices:
    """Indices of a gather or scatter DMA (``src.at[Indices(idx)]``): ``values``
    (an array or a Ref of int32 row numbers); rows equal to ``ignored_value``
    (when not None) are skipped."""
    values: Any
    ignored_value: int | None = dataclasses.field(default=None, metadata=dict(static=True))
