"""``CompilerParams`` and ``InterpretParams`` of the Mosaic GPU backend, and
its process-wide / scoped interpret mode.

The fields mirror JAX 0.12's ``jax.experimental.pallas.mosaic_gpu``
``CompilerParams`` and ``InterpretGPUParams`` (names and defaults; a test
keeps them in step). Bad values raise here, where they are written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import threading
from typing import Any

import pallas_frontend as pf

from . import _jax_private

DIMENSION_SEMANTICS = ("parallel", "sequential")
MAX_COLLECTIVE_IDS = 32     # JAX 0.12.1's bound on CompilerParams.collective_id


class TraceScope(enum.Enum):
    """The granularity profiler events are recorded at."""
    WARPGROUP = "warpgroup"
    WARP = "warp"


class LoweringSemantics(enum.Enum):
    """How Mosaic GPU reads the kernel: per lane, or per warpgroup (JAX's default)."""
    Lane = enum.auto()
    Warpgroup = enum.auto()


@dataclasses.dataclass(frozen=True)
class CompilerParams(pf.CompilerParams):
    """Mosaic GPU compile options; passing them selects backend ``mgpu``.

    Under a JAX older than 0.12 a field its ``plgpu.CompilerParams`` lacks
    keeps its default; another value is refused where it is written, naming
    the JAX release that has the field (as for ``InterpretParams``).

    ``dimension_semantics`` names, per grid axis, "parallel" (the axis
    becomes CTAs) or "sequential" (the axis is a pipelined loop inside each
    CTA); unset, the backend decides from what the kernel writes.
    ``max_concurrent_steps`` is the pipeline depth (SMEM buffers per operand).
    """
    BACKEND = "mgpu"
    approx_math: bool = False
    dimension_semantics: tuple[str, ...] | None = None
    max_concurrent_steps: int = 1
    unsafe_no_auto_barriers: bool = False
    reduction_scratch_bytes: int = 128 * 4 * 4
    profile_space: int = 0
    profile_dir: str = ""
    profile_trace_scope: TraceScope = TraceScope.WARPGROUP
    profile_bounds_check: bool = False
    lowering_semantics: LoweringSemantics = LoweringSemantics.Warpgroup
    skip_device_barrier: bool = False
    is_multi_process: bool = False
    collective_id: int | None = None     # JAX 0.12.1: the barrier semaphores' collective

    def __post_init__(self):
        if self.dimension_semantics is not None:
            sem = tuple(self.dimension_semantics)
            bad = [s for s in sem if s not in DIMENSION_SEMANTICS]
            if bad:
                raise ValueError(f"pallas_mgpu.CompilerParams: dimension_semantics entries must be "
                                 f"one of {DIMENSION_SEMANTICS}, got {bad[0]!r}.")
            object.__setattr__(self, "dimension_semantics", sem)
        if bool(self.profile_space) ^ bool(self.profile_dir):
            raise ValueError("pallas_mgpu.CompilerParams: set both profile_space and profile_dir, "
                             "or neither.")
        for name in ("max_concurrent_steps",):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"pallas_mgpu.CompilerParams: {name} must be an int >= 1, got {v!r}.")
        if self.reduction_scratch_bytes < 0 or self.profile_space < 0:
            raise ValueError("pallas_mgpu.CompilerParams: reduction_scratch_bytes and "
                             "profile_space must be >= 0.")
        if not isinstance(self.profile_trace_scope, TraceScope):
            object.__setattr__(self, "profile_trace_scope", TraceScope(self.profile_trace_scope))
        cid = self.collective_id
        if cid is not None and (isinstance(cid, bool) or not isinstance(cid, int)
                                or not 0 <= cid < MAX_COLLECTIVE_IDS):
            raise ValueError(f"pallas_mgpu.CompilerParams: collective_id must be None or an int "
                             f"in [0, {MAX_COLLECTIVE_IDS}), got {cid!r}.")
        if not isinstance(self.lowering_semantics, LoweringSemantics):
            raise ValueError("pallas_mgpu.CompilerParams: lowering_semantics must be a "
                             f"pallas_mgpu.LoweringSemantics, got {self.lowering_semantics!r}.")
        _jax_private.refuse_fields_jax_lacks(self, "CompilerParams", "pallas_mgpu.CompilerParams")

    def replace(self, **changes) -> CompilerParams:
        """A copy of these params with the named fields changed."""
        return dataclasses.replace(self, **changes)

    def to_jax(self, dimension_semantics=None):
        """JAX's ``plgpu.CompilerParams`` with the same values."""
        from jax.experimental.mosaic import gpu as mgpu
        from jax.experimental.pallas import mosaic_gpu as plgpu
        return _jax_private.jax_params("CompilerParams", dict(
            approx_math=self.approx_math,
            dimension_semantics=dimension_semantics,
            max_concurrent_steps=self.max_concurrent_steps,
            unsafe_no_auto_barriers=self.unsafe_no_auto_barriers,
            reduction_scratch_bytes=self.reduction_scratch_bytes,
            profile_space=self.profile_space, profile_dir=self.profile_dir,
            profile_trace_scope=plgpu.TraceScope(self.profile_trace_scope.value),
            profile_bounds_check=self.profile_bounds_check,
            lowering_semantics=getattr(mgpu.LoweringSemantics, self.lowering_semantics.name),
            skip_device_barrier=self.skip_device_barrier,
            is_multi_process=self.is_multi_process, collective_id=self.collective_id))


@dataclasses.dataclass(frozen=True, kw_only=True)
class InterpretParams:
    """Runs a kernel on CPU through JAX's Mosaic GPU interpreter (simulated
    GMEM/SMEM, threads, barriers and TMA; optional race detection) instead of
    compiling it. Same fields and defaults as JAX 0.12's ``InterpretGPUParams``;
    under an older JAX a field it lacks (``inline_mgpu`` before 0.11, ``on_race``
    before 0.12) keeps its default, and another value is refused where it is
    written, naming the JAX release that has it."""
    detect_races: bool = False
    on_race: str = "raise"                      # "raise" | "warn"
    out_of_bounds_reads: str = "raise"          # "raise" | "uninitialized"
    skip_floating_point_ops: bool = False
    uninitialized_memory: str = "nan"           # "nan" | "zero"
    num_cores_or_threads: int = 1
    vector_clock_size: int | None = None
    logging_mode: Any = None
    num_tma_threads_per_device: int = 5
    inline_mgpu: str = "error"                  # "error" | "ignore"

    def __post_init__(self):
        for name, allowed in _INTERPRET_CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"pallas_mgpu.InterpretParams: {name} must be one of "
                                 f"{allowed}, got {getattr(self, name)!r}.")
        if self.vector_clock_size is not None:
            raise ValueError("pallas_mgpu.InterpretParams: vector_clock_size must be None "
                             "in GPU interpret mode.")
        if self.num_tma_threads_per_device < 1 or self.num_cores_or_threads < 1:
            raise ValueError("pallas_mgpu.InterpretParams: num_tma_threads_per_device and "
                             "num_cores_or_threads must be >= 1.")
        _jax_private.refuse_fields_jax_lacks(self, "InterpretGPUParams",
                                             "pallas_mgpu.InterpretParams")

    @property
    def options(self) -> dict[str, Any]:
        """Every field by name (the keywords of JAX's ``InterpretGPUParams``)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def to_jax(self, **overrides):
        """The equivalent ``plgpu.InterpretGPUParams``, with ``overrides`` applied."""
        return _jax_private.jax_params("InterpretGPUParams", {**self.options, **overrides})


InterpretGPUParams = InterpretParams     # JAX's name


def adopt_interpret(params):
    """``params`` as this plugin's ``InterpretParams`` if it is JAX's own
    ``InterpretGPUParams`` (code written for JAX passes that one; the fields
    are the same), else unchanged."""
    if isinstance(params, _jax_private.gpu_interpret_api().InterpretGPUParams):
        return InterpretParams(**{f.name: getattr(params, f.name)
                                  for f in dataclasses.fields(InterpretParams)
                                  if hasattr(params, f.name)})
    return params

_INTERPRET_CHOICES = {
    "on_race": ("raise", "warn"),
    "out_of_bounds_reads": ("raise", "uninitialized"),
    "uninitialized_memory": ("nan", "zero"),
    "inline_mgpu": ("error", "ignore"),
}


# --- process-wide and scoped interpret mode ---------------------------------------

_local = threading.local()
_global_mode: list[InterpretParams | None] = [None]


def set_gpu_interpret_mode(params: InterpretParams | None = InterpretParams()) -> None:
    """Runs every later kernel that selects backend ``mgpu`` (through its
    ``CompilerParams`` or ``pallas_mgpu.kernel``) in GPU interpret mode;
    ``None`` turns it off."""
    params = adopt_interpret(params)
    if params is not None and not isinstance(params, InterpretParams):
        raise TypeError(f"set_gpu_interpret_mode takes pallas_mgpu.InterpretParams, got {params!r}")
    jax_plgpu = _jax_private.gpu_interpret_api()
    _global_mode[0] = params
    # JAX's own setting too: JAX's kernels called in the same program (its
    # shipped ops) run in interpret mode as well, as under JAX's function.
    jax_plgpu.set_gpu_interpret_mode(None if params is None else params.to_jax())


@contextlib.contextmanager
def force_gpu_interpret_mode(params: InterpretParams | None = InterpretParams()):
    """Within the block, kernels that select backend ``mgpu`` run in GPU
    interpret mode with ``params`` (``None``: compiled, even if the global
    mode is set)."""
    params = adopt_interpret(params)
    if params is not None and not isinstance(params, InterpretParams):
        raise TypeError(f"force_gpu_interpret_mode takes pallas_mgpu.InterpretParams, got {params!r}")
    jax_plgpu = _jax_private.gpu_interpret_api()
    prev = getattr(_local, "mode", _UNSET)
    _local.mode = params
    try:
        with jax_plgpu.force_gpu_interpret_mode(None if params is None else params.to_jax()):
            yield   # see set_gpu_interpret_mode
    finally:
        _local.mode = prev


_UNSET = object()


def active_interpret_mode() -> InterpretParams | None:
    mode = getattr(_local, "mode", _UNSET)
    mode = _global_mode[0] if mode is _UNSET else mode
    if mode is None and not _local_off():
        # JAX's own force_gpu_interpret_mode (code written for JAX uses it)
        from pallas_mgpu import _jax_private
        theirs = adopt_interpret(_jax_private.jax_forced_interpret_mode())
        mode = theirs if isinstance(theirs, InterpretParams) else None
    return mode


def _local_off() -> bool:
    """``force_gpu_interpret_mode(None)`` is in effect (compile, whatever is set)."""
    return getattr(_local, "mode", _UNSET) is None
