"""``CompilerParams`` (Mosaic's options) and ``InterpretParams`` (TPU interpret mode).

Both are plain frozen dataclasses of this plugin; the backend converts them to
JAX's ``pltpu`` objects when it rebuilds a kernel. Their *type* is what makes
the frontend pick this backend.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import threading
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import pallas_frontend as pf

from . import _jax_private

PARALLEL = "parallel"
ARBITRARY = "arbitrary"
CORE_PARALLEL = "core_parallel"
SUBCORE_PARALLEL = "subcore_parallel"
_SEMANTICS = (PARALLEL, ARBITRARY, CORE_PARALLEL, SUBCORE_PARALLEL)


class GridDimensionSemantics(str, enum.Enum):
    """JAX's ``pltpu.GridDimensionSemantics``; each member is also the plain
    string above (``GridDimensionSemantics.PARALLEL == PARALLEL``), so
    ``CompilerParams(dimension_semantics=...)`` takes either."""
    PARALLEL = PARALLEL
    CORE_PARALLEL = CORE_PARALLEL
    SUBCORE_PARALLEL = SUBCORE_PARALLEL
    ARBITRARY = ARBITRARY


class SideEffectType(enum.Enum):
    """``CompilerParams(has_side_effects=...)``: ``PURE`` (the call may be
    deduplicated, and removed when unused), ``DATAFLOW_SIDE_EFFECTING`` (never
    deduplicated, removed when unused), ``SIDE_EFFECTING`` (neither). JAX's
    values, handed to Mosaic."""
    PURE = "pure"
    DATAFLOW_SIDE_EFFECTING = "dataflow_side_effecting"
    SIDE_EFFECTING = "side_effecting"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CompilerParams(pf.CompilerParams):
    """Mosaic TPU compiler options; passing them selects the ``tpu`` backend.

    ``dimension_semantics`` has one entry per grid axis of the kernel as the
    user wrote it ("parallel", "arbitrary", "core_parallel",
    "subcore_parallel"); axes added by ``vmap`` are parallel.
    """
    dimension_semantics: tuple[str, ...] | None = None
    allow_input_fusion: tuple[bool, ...] | None = None
    vmem_limit_bytes: int | None = None
    collective_id: int | None = None
    has_side_effects: bool | SideEffectType = False
    flags: tuple[tuple[str, Any], ...] | None = None
    internal_scratch_in_bytes: int | None = None
    serialization_format: int = 1
    disable_bounds_checks: bool = False
    disable_semaphore_checks: bool = False
    skip_device_barrier: bool = False
    allow_collective_id_without_custom_barrier: bool = False
    shape_invariant_numerics: bool = True
    needs_layout_passes: bool = True
    fuse_transposed_lhs_in_matmul: bool = False
    use_tc_tiling_on_sc: bool | None = None   # SparseCore: lay out as the TensorCore does
    opt_level: Any = None       # SparseCore: Mosaic's optimization level (JAX's OptLevel)
    # Set by a SparseCore mesh (sc_mesh), not by users: which core runs the kernel.
    kernel_type: Any = None
    BACKEND: Any = dataclasses.field(default="tpu", init=False, repr=False, compare=False)

    def __post_init__(self):
        ds = self.dimension_semantics
        if ds is not None:
            ds = tuple(getattr(d, "value", d) for d in ds)
            bad = [d for d in ds if not isinstance(d, str) or d.lower() not in _SEMANTICS]
            if bad:
                raise ValueError(f"pallas_tpu.CompilerParams: dimension_semantics entries must be "
                                 f"one of {_SEMANTICS}, got {bad}.")
            object.__setattr__(self, "dimension_semantics", tuple(d.lower() for d in ds))
        if self.allow_input_fusion is not None:
            object.__setattr__(self, "allow_input_fusion",
                               tuple(bool(b) for b in self.allow_input_fusion))
        if isinstance(self.flags, Mapping):
            object.__setattr__(self, "flags", tuple(sorted(self.flags.items())))
        if self.vmem_limit_bytes is not None and self.vmem_limit_bytes <= 0:
            raise ValueError(f"vmem_limit_bytes must be positive, got {self.vmem_limit_bytes}.")

    def to_jax(self, num_batch_axes: int = 0):
        """The equivalent ``jax.experimental.pallas.tpu.CompilerParams``."""
        from jax.experimental.pallas import tpu as pltpu
        ds = self.dimension_semantics
        if ds is not None:
            ds = (PARALLEL,) * num_batch_axes + ds
        side = self.has_side_effects
        if isinstance(side, SideEffectType):
            side = getattr(pltpu.SideEffectType, side.name)
        extra = {}
        if self.opt_level is not None:
            if "opt_level" not in _jax_private.jax_compiler_fields():
                raise NotImplementedError(_jax_private.needs_newer_jax(
                    f"pallas_tpu.CompilerParams(opt_level={self.opt_level!r})", "0.11"))
            extra["opt_level"] = self.opt_level
        return pltpu.CompilerParams(
            **extra, dimension_semantics=ds, allow_input_fusion=self.allow_input_fusion,
            vmem_limit_bytes=self.vmem_limit_bytes, collective_id=self.collective_id,
            has_side_effects=side, flags=dict(self.flags) if self.flags else None,
            internal_scratch_in_bytes=self.internal_scratch_in_bytes,
            serialization_format=self.serialization_format,
            disable_bounds_checks=self.disable_bounds_checks,
            disable_semaphore_checks=self.disable_semaphore_checks,
            skip_device_barrier=self.skip_device_barrier,
            allow_collective_id_without_custom_barrier=self.allow_collective_id_without_custom_barrier,
            shape_invariant_numerics=self.shape_invariant_numerics,
            needs_layout_passes=self.needs_layout_passes,
            fuse_transposed_lhs_in_matmul=self.fuse_transposed_lhs_in_matmul,
            use_tc_tiling_on_sc=self.use_tc_tiling_on_sc)


@dataclasses.dataclass(frozen=True, kw_only=True)
class InterpretParams:
    """Runs a kernel on CPU through JAX's TPU interpreter (DMAs, semaphores,
    race detection, uninitialised-memory poisoning) instead of compiling it.

    The fields are those of ``jax.experimental.pallas.tpu.InterpretParams``
    in JAX 0.12, with the same defaults (a test keeps them in step). Under an
    older JAX a field it lacks keeps its default (``on_race``: before 0.12 a
    detected race is printed and recorded, not raised); another value is
    refused where it is written, naming the JAX release that has it.

    One field is ours only (``OWN_FIELDS``, never passed to JAX):
    ``chip_checks`` (default True) refuses, before the kernel runs, the block
    shapes a TPU's Mosaic lowering would refuse (the last two block dims
    divisible by 8 and 128 or equal to the array's; the rank-1 rule) and, with
    libtpu installed, whatever Mosaic refuses when the kernel is compiled
    without a device for a v5e (or the chip named: ``chip_checks="v6e"``), such
    as an unprovably aligned access or a VMEM overflow, so that
    what fails on the chip fails on CPU first. ``chip_checks=False``, or the
    environment variable ``PALLAS_TPU_CHIP_CHECKS=0``, runs such a kernel in
    the interpreter anyway (as JAX's TPU interpret mode does).
    """
    detect_races: bool = False
    on_race: str = "raise"                      # "raise" | "warn"
    out_of_bounds_reads: str = "raise"          # "raise" | "uninitialized"
    skip_floating_point_ops: bool = False
    uninitialized_memory: str = "nan"           # "nan" | "zero"
    num_cores_or_threads: int = 1
    vector_clock_size: int | None = None
    logging_mode: Any = None
    dma_execution_mode: str = "on_wait"         # "on_wait" | "eager"
    random_seed: int | None = None
    grid_point_recorder: Callable | None = None
    allow_hbm_allocation_in_run_scoped: bool = False
    buffer_bounds: str = "logical"              # "logical" | "padded"
    chip_checks: bool | str = True              # ours: refuse what the chip (v5e) would
    OWN_FIELDS: ClassVar[frozenset[str]] = frozenset({"chip_checks"})
    # JAX's TPU interpreter checks every Ref access when it runs (raising
    # "Out-of-bounds read/write", or padding/NaN as the fields above say), so
    # the frontend leaves static Ref indices to it.
    checks_ref_bounds: ClassVar[bool] = True

    def __post_init__(self):
        for name, allowed in _INTERPRET_CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"pallas_tpu.InterpretParams: {name} must be one of "
                                 f"{allowed}, got {getattr(self, name)!r}.")
        if isinstance(self.chip_checks, str):
            topology_of(self.chip_checks)       # a chip it knows, or a ValueError
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value != f.default and (since := _jax_private.missing_interpret_field(f.name)):
                raise NotImplementedError(_jax_private.needs_newer_jax(
                    f"pallas_tpu.InterpretParams({f.name}={value!r})", since))

    @property
    def options(self) -> dict[str, Any]:
        """Every field by name (the keywords of JAX's ``InterpretParams``)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in self.OWN_FIELDS}

    @classmethod
    def from_jax(cls, params) -> InterpretParams | None:
        """JAX's own ``pltpu.InterpretParams`` (code written for JAX passes it;
        the fields are the same) as ours; None for any other object."""
        if not _jax_private.is_jax_tpu_pallas_object(params):
            return None     # not JAX's TPU Pallas: no need to import it
        from jax.experimental.pallas import tpu as pltpu
        if not isinstance(params, pltpu.InterpretParams):
            return None
        return cls(**{f.name: getattr(params, f.name) for f in dataclasses.fields(cls)
                      if hasattr(params, f.name)})

    def to_jax(self):
        """The equivalent ``jax.experimental.pallas.tpu.InterpretParams`` (the
        fields this JAX has; the others hold their defaults, see the class)."""
        from jax.experimental.pallas import tpu as pltpu
        theirs = _jax_private.jax_interpret_fields()
        return pltpu.InterpretParams(**{k: v for k, v in self.options.items() if k in theirs})


# Checked at construction, so a typo fails where it is written, not at lowering.
_INTERPRET_CHOICES = {
    "on_race": ("raise", "warn"),
    "out_of_bounds_reads": ("raise", "uninitialized"),
    "uninitialized_memory": ("nan", "zero"),
    "dma_execution_mode": ("on_wait", "eager"),
    "buffer_bounds": ("logical", "padded"),
}


# --- process-wide interpret mode ------------------------------------------------

_local = threading.local()
_global_mode: list[InterpretParams | None] = [None]


# The device-less chip check (chip_compile.py) compiles a one-chip program, which
# needs a topology; these are the smallest each libtpu names.
_TOPOLOGIES = {"v5e": "v5e:2x2", "v6e": "v6e:2x2", "v5p": "v5p:2x2x1", "v4": "v4:2x2x1"}


def topology_of(chip: str) -> str:
    """The topology compiled for: ``chip`` as given when it names one ("v5e:2x2")."""
    if ":" in chip:
        return chip
    if chip not in _TOPOLOGIES:
        raise ValueError(f"pallas_tpu.InterpretParams(chip_checks={chip!r}): name a chip "
                         f"({', '.join(_TOPOLOGIES)}) or a topology such as 'v5e:2x2'")
    return _TOPOLOGIES[chip]


def set_tpu_interpret_mode(params: InterpretParams | None = None) -> None:
    """Runs every later kernel that selects the ``tpu`` backend in TPU
    interpret mode (``None`` turns it off)."""
    if params is not None and not isinstance(params, InterpretParams):
        raise TypeError(f"set_tpu_interpret_mode takes pallas_tpu.InterpretParams, got {params!r}")
    from jax.experimental.pallas import tpu as pltpu
    _global_mode[0] = params
    # JAX's own setting is part of jit's cache key: enclosing jitted
    # functions retrace when the mode changes, as they do under JAX.
    pltpu.set_tpu_interpret_mode(None if params is None else params.to_jax())


@contextlib.contextmanager
def force_tpu_interpret_mode(params: InterpretParams | None = None):
    """Within the block, kernels that select the ``tpu`` backend run in TPU
    interpret mode with ``params`` (default ``InterpretParams()``)."""
    from jax.experimental.pallas import tpu as pltpu
    prev = getattr(_local, "mode", None)
    _local.mode = params if params is not None else InterpretParams()
    try:
        with pltpu.force_tpu_interpret_mode(_local.mode.to_jax()):   # see set_tpu_interpret_mode
            yield
    finally:
        _local.mode = prev


def reset_tpu_interpret_mode_state() -> None:
    """Clears the simulated TPU state (buffers, semaphores, race records) that
    TPU interpret mode keeps after a kernel raised, so later kernels start clean."""
    from jax.experimental.pallas import tpu as pltpu
    pltpu.reset_tpu_interpret_mode_state()


def active_interpret_mode() -> InterpretParams | None:
    return getattr(_local, "mode", None) or _global_mode[0]


