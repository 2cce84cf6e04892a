"""The user API of Mosaic GPU kernel operations (``import pallas_mgpu as plgpu``).

Same names, arguments and meaning as JAX 0.12's ``plgpu`` functions; each
records itself in the kernel jaxpr (``ops.py``) and is replayed with JAX's.
Use them inside ``pallas_mgpu.kernel`` bodies (or portable kernels that
take this backend's ``CompilerParams``).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import jax
import numpy as np

from pallas_mgpu import _jax_private, ops
from pallas_mgpu.ops import aval_of, bind


class Layout(enum.Enum):
    """Register layouts of Mosaic GPU arrays (``layout_cast``, ``load``)."""
    WGMMA = enum.auto()
    WGMMA_8BIT = enum.auto()
    WGMMA_UPCAST_2X = enum.auto()
    WGMMA_UPCAST_4X = enum.auto()
    WGMMA_TRANSPOSED = enum.auto()
    WG_SPLAT = enum.auto()
    WG_STRIDED = enum.auto()
    TILED = enum.auto()
    TCGEN05 = enum.auto()
    TCGEN05_TRANSPOSED = enum.auto()
    TCGEN05_M64_COLLECTIVE = enum.auto()
    TCGEN05_TMEM_NATIVE = enum.auto()
    TCGEN05_M64_COLLECTIVE_NATIVE = enum.auto()
    SMEM_GMEM_COPY = enum.auto()
    TMA_INDICES = enum.auto()
    TMA_INDICES_4 = enum.auto()
    MMA_LHS = enum.auto()
    MMA_RHS = enum.auto()
    MMA_ACC = enum.auto()

    def to_jax(self):
        """JAX's ``plgpu.Layout`` of the same name."""
        from jax.experimental.pallas import mosaic_gpu as plgpu
        return getattr(plgpu.Layout, self.name)

    def to_mgpu(self, *args, **kwargs):
        """Mosaic GPU's own layout object (what an ``inline_mgpu`` function builds
        its FragmentedArrays with), as JAX's ``Layout.to_mgpu`` gives it."""
        return self.to_jax().to_mgpu(*args, **kwargs)

    def __call__(self, *args, **kwargs) -> ParameterizedLayout:
        """A parameterized layout, e.g. ``Layout.WG_STRIDED((128,), vec_size=1)``."""
        return ParameterizedLayout(self, args, tuple(sorted(kwargs.items())))

    def reduce(self, axes) -> ReducedLayout:
        """The layout of this layout's arrays reduced over ``axes`` (e.g. row maxima)."""
        return ReducedLayout(self, (axes,) if isinstance(axes, int) else tuple(axes))


@dataclasses.dataclass(frozen=True)
class ParameterizedLayout:
    base: Layout
    args: tuple
    kwargs: tuple

    def to_jax(self):
        return self.base.to_jax()(*self.args, **dict(self.kwargs))

    def to_mgpu(self):
        return self.to_jax().to_mgpu()


@dataclasses.dataclass(frozen=True)
class ReducedLayout:
    base: Layout
    axes: tuple[int, ...]

    def to_jax(self):
        return self.base.to_jax().reduce(self.axes if len(self.axes) > 1 else self.axes[0])

    def to_mgpu(self):
        return self.to_jax().to_mgpu()


# --- TMA copies -----------------------------------------------------------------------

def copy_gmem_to_smem(src, dst, barrier=None, *, collective_axes=None, leader_tracked=None,
                      oob_mode=None, predicate=None) -> None:
    """Starts a TMA copy of GMEM ``src`` into SMEM ``dst``; ``barrier`` completes
    when its bytes have landed (``barrier_wait``)."""
    if isinstance(collective_axes, list):
        collective_axes = tuple(collective_axes)
    bind("copy_gmem_to_smem", src, dst, barrier, predicate, collective_axes=collective_axes,
         leader_tracked=leader_tracked, oob_mode=oob_mode)


def _copy_gmem_to_smem(src, dst, barrier, predicate, **kw):
    kw = {k: v for k, v in kw.items() if v is not None}
    _jax_private.plgpu_function("copy_gmem_to_smem")(src, dst, barrier, predicate=predicate, **kw)


def copy_smem_to_gmem(src, dst, predicate=None, *, commit_group: bool = True,
                      reduction_op=None) -> None:
    """Starts a TMA copy of SMEM ``src`` to GMEM ``dst`` (after ``commit_smem``);
    ``wait_smem_to_gmem`` waits for it."""
    bind("copy_smem_to_gmem", src, dst, predicate, commit_group=commit_group,
         reduction_op=reduction_op)


def commit_smem() -> None:
    """Makes this thread's SMEM writes visible to the TMA engine."""
    bind("commit_smem")


def commit_smem_to_gmem_group() -> None:
    """Closes a group of the SMEM->GMEM copies issued so far and not yet in one
    (``wait_smem_to_gmem`` counts these groups)."""
    bind("commit_smem_to_gmem_group")


def wait_smem_to_gmem(n: int, wait_read_only: bool = False) -> None:
    """Waits until at most ``n`` SMEM->GMEM copies are in flight."""
    bind("wait_smem_to_gmem", n=int(n), wait_read_only=bool(wait_read_only))


def _wait_smem_to_gmem(*, n, wait_read_only):
    from jax.experimental.pallas import mosaic_gpu as plgpu
    plgpu.wait_smem_to_gmem(n, wait_read_only=wait_read_only)


# --- barriers --------------------------------------------------------------------------

def barrier_arrive(barrier, *, predicate=None) -> None:
    """Arrives at ``barrier`` (only where ``predicate`` holds, when given)."""
    bind("barrier_arrive", barrier, predicate)


def _barrier_arrive(barrier, predicate):
    _jax_private.plgpu_function("barrier_arrive")(barrier, predicate=predicate)


def barrier_wait(barrier) -> None:
    """Waits for the barrier's current phase to complete."""
    bind("barrier_wait", barrier)


def barrier_arrive_and_wait(barrier) -> None:
    """Arrives at ``barrier``, then waits for its current phase to complete."""
    bind("barrier_arrive_and_wait", barrier)


# --- WGMMA (Hopper) ----------------------------------------------------------------------

def wgmma(acc, a, b) -> None:
    """``acc += a @ b`` on the tensor cores: ``acc`` an ``ACC`` Ref, ``a`` and ``b``
    SMEM Refs (tiled and swizzled; transpose with ``.T``)."""
    bind("wgmma", acc, a, b)


def wgmma_wait(n: int) -> None:
    """Waits until at most ``n`` WGMMAs are in flight."""
    bind("wgmma_wait", n=int(n))


def _wgmma_wait(*, n):
    from jax.experimental.pallas import mosaic_gpu as plgpu
    plgpu.wgmma_wait(n)


# --- tcgen05 / TMEM (Blackwell) ------------------------------------------------------------

def tcgen05_mma(acc, a, b, barrier=None, *, a_scale=None, b_scale=None, a_sparse_metadata=None,
                accumulate=True, collective_axis: str | None = None) -> None:
    """``acc (TMEM) (+)= a @ b`` issued to the Blackwell tensor cores."""
    bind("tcgen05_mma", acc, a, b, barrier, a_scale, b_scale, a_sparse_metadata, accumulate,
         collective_axis=collective_axis)


def _tcgen05_mma(acc, a, b, barrier, a_scale, b_scale, a_sparse_metadata, accumulate, *,
                 collective_axis):
    from jax.experimental.pallas import mosaic_gpu as plgpu
    plgpu.tcgen05_mma(acc, a, b, barrier, a_scale=a_scale, b_scale=b_scale,
                      a_sparse_metadata=a_sparse_metadata, accumulate=accumulate,
                      collective_axis=collective_axis)


def tcgen05_commit_arrive(barrier, collective_axis: str | None = None, *, predicate=None) -> None:
    """Arrives on ``barrier`` once the issued tcgen05 operations complete."""
    bind("tcgen05_commit_arrive", barrier, predicate, collective_axis=collective_axis)


def _tcgen05_commit_arrive(barrier, predicate, *, collective_axis):
    _jax_private.plgpu_function("tcgen05_commit_arrive")(barrier, collective_axis,
                                                         predicate=predicate)


def async_load_tmem(src, *, layout: Layout | None = None):
    """Starts loading the TMEM Ref ``src`` into registers (in ``layout``) and
    returns the array; ``wait_load_tmem()`` before ``src`` is written again."""
    return bind("async_load_tmem", src, layout=layout, out_avals=(aval_of(src),))[0]


def async_store_tmem(ref, value) -> None:
    """Starts storing ``value`` into the TMEM Ref ``ref``; ``commit_tmem()``
    makes it visible to the tensor cores."""
    bind("async_store_tmem", ref, value)


def wait_load_tmem() -> None:
    """Waits for this thread's pending ``async_load_tmem`` loads."""
    bind("wait_load_tmem")


def commit_tmem() -> None:
    """Makes this thread's ``async_store_tmem`` writes visible (e.g. to a
    following ``tcgen05_mma``)."""
    bind("commit_tmem")


def async_copy_smem_to_tmem(smem_ref, tmem_ref, collective_axis=None) -> None:
    """Starts a copy of (tiled, swizzled) SMEM into TMEM; awaited through
    ``tcgen05_commit_arrive``."""
    bind("async_copy_smem_to_tmem", smem_ref, tmem_ref, collective_axis=collective_axis)


def async_copy_scales_to_tmem(smem_ref, tmem_ref, collective_axis=None) -> None:
    """Starts a copy of block-scaling factors from SMEM into TMEM."""
    bind("async_copy_scales_to_tmem", smem_ref, tmem_ref, collective_axis=collective_axis)


def async_copy_sparse_metadata_to_tmem(smem_ref, tmem_ref, collective_axis=None) -> None:
    """Starts a copy of sparse-MMA metadata (``format_tcgen05_sparse_metadata``'s
    layout, in SMEM) into a ``TMEMLayout.SPARSE_METADATA_LAYOUT`` TMEM buffer,
    for ``tcgen05_mma(..., a_sparse_metadata=)``."""
    bind("async_copy_sparse_metadata_to_tmem", smem_ref, tmem_ref,
         collective_axis=collective_axis)


# --- registers, layouts, loads ---------------------------------------------------------------

def broadcasted_iota(dtype, shape, dimension: int, *, layout: Layout | None = None):
    """``lax.broadcasted_iota`` with an optional register layout."""
    import jax
    import numpy as np   # (both names are deleted from this module's namespace)
    shape = tuple(int(d) for d in shape)
    return bind("broadcasted_iota", dtype=np.dtype(dtype), shape=shape, dimension=int(dimension),
                layout=layout, out_avals=(jax.core.ShapedArray(shape, np.dtype(dtype)),))[0]


def set_max_registers(n: int, *, action: str) -> None:
    """Re-balances registers between warpgroups ("increase" or "decrease" to ``n``)."""
    if action not in ("increase", "decrease"):
        raise ValueError(f"set_max_registers: action must be 'increase' or 'decrease', got {action!r}")
    if n % 8 or not 24 <= n <= 256:
        raise ValueError(f"set_max_registers: n must be a multiple of 8 in [24, 256], got {n}")
    bind("set_max_registers", n=int(n), action=action)


def _set_max_registers(*, n, action):
    from jax.experimental.pallas import mosaic_gpu as plgpu
    plgpu.set_max_registers(n, action=action)


def layout_cast(x, new_layout: Layout):
    """``x`` with its register layout set to ``new_layout``."""
    return bind("layout_cast", x, new_layout=new_layout, out_avals=(aval_of(x),))[0]


def load(src, *, layout: Layout | None = None, optimized: bool = True):
    """Reads ``src`` (SMEM or GMEM Ref or view) into registers with ``layout``."""
    return bind("load", src, layout=layout, optimized=optimized, out_avals=(aval_of(src),))[0]


# --- semaphores (GMEM) -------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class SemaphoreSignal:
    """One signal of ``semaphore_signal_parallel``."""
    ref: Any
    _: dataclasses.KW_ONLY
    device_id: Any = None
    inc: Any = 1


def semaphore_signal_parallel(*signals: SemaphoreSignal) -> None:
    """Signals several (possibly remote) semaphores, in no particular order."""
    flat = []
    for s in signals:
        if not isinstance(s, SemaphoreSignal):
            raise TypeError(f"semaphore_signal_parallel takes SemaphoreSignal(...), got {s!r}")
        flat += [s.ref, s.device_id, s.inc]
    bind("semaphore_signal_parallel", *flat)


# Replayed with JAX's function of the same name unless adapted here (ops.py).
ops.ADAPTERS.update({
    "copy_gmem_to_smem": _copy_gmem_to_smem, "wait_smem_to_gmem": _wait_smem_to_gmem,
    "barrier_arrive": _barrier_arrive, "wgmma_wait": _wgmma_wait, "tcgen05_mma": _tcgen05_mma,
    "tcgen05_commit_arrive": _tcgen05_commit_arrive, "set_max_registers": _set_max_registers,
})
del jax, np
