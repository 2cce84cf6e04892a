"""Memory spaces, SMEM transforms and scratch types of the Mosaic GPU backend,
as the frontend sees them.

The frontend traces kernels, so a type here only has to describe a Ref:
shape, dtype and a memory space. The memory space a Ref carries *is* the
scratch type (a frozen, hashable dataclass), so the backend can rebuild
JAX's own type for it (``to_jax``) from the kernel jaxpr alone. Barriers are
traced as int32 Refs of their array shape.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections.abc import Sequence

import numpy as np

import pallas_frontend as pf

from pallas_mgpu import _jax_private


# --- SMEM transforms ---------------------------------------------------------------

class Transform:
    """The base of the SMEM buffer transforms (JAX's ``plgpu.Transform``)."""

    def to_jax(self):
        """JAX's equivalent transform (each subclass gives its own)."""
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class TilingTransform(Transform):
    """Tiles the minor dims of an SMEM buffer: (M, N) tiled (X, Y) is stored
    (M//X, N//Y, X, Y). TMA and WGMMA want (8, swizzle // itemsize)."""
    tiling: tuple[int, ...]

    def __post_init__(self):
        object.__setattr__(self, "tiling", tuple(int(t) for t in self.tiling))
        if not self.tiling or any(t < 1 for t in self.tiling):
            raise ValueError(f"TilingTransform: tiling must be positive ints, got {self.tiling}")

    def to_jax(self):
        """JAX's ``plgpu.TilingTransform`` with this tiling."""
        from jax.experimental.pallas import mosaic_gpu as plgpu
        return plgpu.TilingTransform(self.tiling)


@dataclasses.dataclass(frozen=True)
class SwizzleTransform(Transform):
    """Swizzles the bytes of each SMEM row (32, 64 or 128 bytes), avoiding bank
    conflicts for TMA and WGMMA."""
    swizzle: int

    def __post_init__(self):
        if self.swizzle not in (16, 32, 64, 128):
            raise ValueError(f"SwizzleTransform: swizzle must be 16, 32, 64 or 128 bytes, "
                             f"got {self.swizzle}")

    def to_jax(self):
        """JAX's ``plgpu.SwizzleTransform`` with this swizzle."""
        from jax.experimental.pallas import mosaic_gpu as plgpu
        return plgpu.SwizzleTransform(self.swizzle)


def transforms_to_jax(transforms) -> tuple:
    return tuple(t.to_jax() for t in transforms)


def _check_transforms(transforms, what: str) -> tuple:
    transforms = tuple(transforms)
    for t in transforms:
        if not isinstance(t, Transform):
            raise TypeError(f"{what}: {t!r} is not a pallas_mgpu SMEM transform (TilingTransform, "
                            "SwizzleTransform; transpose a Ref with ref.T / ref.transpose).")
    return transforms


# --- memory spaces and buffers --------------------------------------------------------

class MemorySpace(enum.Enum):
    """Where a Mosaic GPU operand or buffer lives.

    ``SMEM((2, 64, 64), jnp.float16, transforms=...)`` makes a scratch type;
    ``BlockSpec(memory_space=GMEM)`` hands the kernel the whole array in
    global memory (no pipelining), to copy by hand with TMA.
    """
    GMEM = "gmem"        # global memory (HBM)
    SMEM = "smem"        # shared memory of a CTA
    TMEM = "tmem"        # tensor memory (Blackwell, sm_100)
    REGS = "regs"        # registers

    def __str__(self):
        return self.value

    def __call__(self, shape: Sequence[int], dtype, *, transforms=(), packed: bool | None = None,
                 collective: bool | None = None, layout=None) -> GPUMemoryRef:
        return GPUMemoryRef(tuple(int(d) for d in shape), np.dtype(dtype), self,
                            _check_transforms(transforms, f"{self.name}(...)"),
                            packed=packed, collective=collective, layout=layout)


GMEM = MemorySpace.GMEM
SMEM = MemorySpace.SMEM
TMEM = MemorySpace.TMEM
REGS = MemorySpace.REGS


@dataclasses.dataclass(frozen=True)
class GPUMemoryRef:
    """A buffer of ``shape`` and ``dtype`` in ``memory_space`` (a scratch type)."""
    shape: tuple[int, ...]
    dtype: np.dtype
    memory_space: MemorySpace
    transforms: tuple = ()
    packed: bool | None = None
    collective: bool | None = None
    layout: object = None

    def __post_init__(self):
        tmem_only = (self.packed, self.collective, self.layout)
        if self.memory_space is not TMEM and any(v is not None for v in tmem_only):
            raise ValueError("packed, collective and layout are only for TMEM buffers.")
        if self.memory_space is TMEM and self.transforms:
            raise ValueError("TMEM buffers take no transforms.")
        if (self.memory_space is TMEM and self.layout is None and self.packed is None
                and np.dtype(self.dtype).itemsize != 4):
            raise ValueError(f"TMEM buffer of {np.dtype(self.dtype).name}: dtypes narrower than "
                             "32 bits need packed=True/False or an explicit layout.")

    def get_ref_aval(self):
        """The Ref type of this buffer (JAX's scratch-type protocol); with
        transforms, one whose Refs answer ``ref.transforms`` as JAX's do."""
        import jax
        ref_type = _transformed_buffer_ref() if self.transforms else jax.ref.AbstractRef
        return ref_type(jax.core.ShapedArray(self.shape, self.dtype), memory_space=self)

    def jax_undo_transforms(self) -> tuple:
        """What ``ref.transforms`` is in JAX's kernel body for this buffer: JAX's
        transforms that undo ours, the last one's first (tiled then swizzled
        gives UnswizzleRef, then UntilingTransform)."""
        import jax
        applied = transforms_to_jax(self.transforms)
        avals = [jax.core.ShapedArray(self.shape, self.dtype)]
        for t in applied[:-1]:
            avals.append(t.transform_type(avals[-1]))
        return tuple(t.undo(aval) for t, aval in reversed(list(zip(applied, avals))))

    def to_jax(self):
        """JAX's ``plgpu`` scratch type of the same space, shape, dtype and transforms."""
        space = _jax_space(self.memory_space)
        kw = {}
        if self.memory_space is TMEM:
            kw = {k: v for k, v in (("packed", self.packed), ("collective", self.collective),
                                    ("layout", self.layout)) if v is not None}
        return space(self.shape, self.dtype, transforms=transforms_to_jax(self.transforms), **kw)


@functools.cache
def _transformed_buffer_ref():
    """The Ref type of a buffer with transforms: a ``jax.ref.AbstractRef``
    whose Refs have ``.transforms`` (a kernel reads e.g. the swizzle of its
    output buffer from it: ``out_smem.transforms[0].swizzle``). Ours traces the
    buffer in its logical shape and applies the transforms when it rebuilds
    JAX's kernel, so the attribute is only read, never applied."""
    import jax

    class TransformedBufferRef(jax.ref.AbstractRef):
        __slots__ = ()

        @property
        def transforms(self):
            return self.memory_space.jax_undo_transforms()

    return TransformedBufferRef


def _jax_space(space: MemorySpace):
    from jax.experimental.pallas import mosaic_gpu as plgpu
    return getattr(plgpu.MemorySpace, space.name)


@dataclasses.dataclass(frozen=True)
class WGMMAAccumulatorRef:
    """A WGMMA accumulator in registers (``ACC``): ``wgmma`` adds into it,
    reading it (``acc[...]``) waits for the pending WGMMAs."""
    shape: tuple[int, int]
    dtype: np.dtype = np.dtype(np.float32)

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype))
        if len(self.shape) != 2 or self.shape[0] % 64:
            raise ValueError(f"ACC{self.shape}: a WGMMA accumulator is 2-D with rows a "
                             "multiple of 64 (one warpgroup).")
        if self.dtype not in (np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.int32)):
            raise ValueError(f"ACC: dtype {self.dtype} is not float32, float16 or int32.")

    def get_ref_aval(self):
        """The Ref type of the accumulator (JAX's scratch-type protocol)."""
        import jax
        return jax.ref.AbstractRef(jax.core.ShapedArray(self.shape, self.dtype), memory_space=self)

    def to_jax(self):
        """JAX's ``plgpu.ACC`` of the same shape and dtype."""
        from jax.experimental.pallas import mosaic_gpu as plgpu
        return plgpu.ACC(self.shape, self.dtype)

    @staticmethod
    def init(array) -> InitializedAccumulator:
        """An accumulator holding ``array`` to start with, for ``pl.run_state``:
        ``pl.run_state(f)(ACC.init(acc))`` runs ``f(acc_ref)`` and returns
        the accumulator's final value."""
        return InitializedAccumulator(WGMMAAccumulatorRef(tuple(array.shape), array.dtype), array)


class InitializedAccumulator:
    """``ACC.init(array)``: what ``pl.run_state`` turns into an accumulator Ref."""

    def __init__(self, acc: WGMMAAccumulatorRef, value):
        self.acc, self.value = acc, value


def _accumulator_ref(x):
    if isinstance(x, InitializedAccumulator):
        return x.acc.get_ref_aval(), x.value
    return x.get_ref_aval(), _jax_private.uninitialized()


ACC = WGMMAAccumulatorRef
_jax_private.register_ref_type(WGMMAAccumulatorRef, _accumulator_ref)
_jax_private.register_ref_type(InitializedAccumulator, _accumulator_ref)


def _barrier_shape(num_barriers) -> tuple[int, ...]:
    return (int(num_barriers),) if isinstance(num_barriers, (int, np.integer)) else tuple(num_barriers)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Barrier:
    """An mbarrier (or an array of ``num_barriers``) in SMEM that completes
    after ``num_arrivals`` arrivals; TMA copies arrive on it with their bytes."""
    num_arrivals: int = 1
    num_barriers: int | tuple[int, ...] = ()
    orders_tensor_core: bool = False

    def __post_init__(self):
        if self.num_arrivals < 1:
            raise ValueError(f"Barrier: num_arrivals must be >= 1, got {self.num_arrivals}")
        object.__setattr__(self, "num_barriers", _barrier_shape(self.num_barriers))

    def get_ref_aval(self):
        """The Ref type of the barrier array (JAX's scratch-type protocol)."""
        import jax
        return jax.ref.AbstractRef(jax.core.ShapedArray(self.num_barriers, np.int32), memory_space=self)

    def to_jax(self):
        """JAX's ``plgpu.Barrier`` with the same fields."""
        from jax.experimental.pallas import mosaic_gpu as plgpu
        return plgpu.Barrier(num_arrivals=self.num_arrivals, num_barriers=self.num_barriers,
                             orders_tensor_core=self.orders_tensor_core)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClusterBarrier:
    """A barrier shared by the CTAs of a cluster along ``collective_axes``."""
    collective_axes: tuple
    num_barriers: int | tuple[int, ...] = ()
    num_arrivals: int = 1
    orders_tensor_core: bool = False
    leader_tracked: bool = False

    def __post_init__(self):
        if self.num_arrivals < 1:
            raise ValueError(f"ClusterBarrier: num_arrivals must be >= 1, got {self.num_arrivals}")
        axes = self.collective_axes
        object.__setattr__(self, "collective_axes", (axes,) if isinstance(axes, str) else tuple(axes))
        object.__setattr__(self, "num_barriers", _barrier_shape(self.num_barriers))

    def get_ref_aval(self):
        """The Ref type of the barrier array (JAX's scratch-type protocol)."""
        import jax
        return jax.ref.AbstractRef(jax.core.ShapedArray(self.num_barriers, np.int32), memory_space=self)

    def to_jax(self):
        """JAX's ``plgpu.ClusterBarrier`` with the same fields."""
        from jax.experimental.pallas import mosaic_gpu as plgpu
        return plgpu.ClusterBarrier(collective_axes=self.collective_axes,
                                    num_barriers=self.num_barriers, num_arrivals=self.num_arrivals,
                                    orders_tensor_core=self.orders_tensor_core,
                                    leader_tracked=self.leader_tracked)


def _from_jax_space(space, shape, dtype):
    """JAX's own scratch type back from the Ref type it made (code written for
    JAX hands ``plgpu.SMEM(...)``, ``plgpu.Barrier(...)`` to ``pl.run_scoped``);
    None if ``space`` is not one of JAX's Mosaic GPU memory spaces."""
    from jax.experimental.pallas import mosaic_gpu as plgpu
    if not isinstance(space, plgpu.MemorySpace):
        return None
    kind = type(dtype).__name__          # JAX's barrier dtypes carry the barrier's fields
    if kind == "BarrierType":
        return plgpu.Barrier(num_arrivals=dtype.num_arrivals, num_barriers=tuple(shape),
                             orders_tensor_core=dtype.orders_tensor_core)
    if kind == "ClusterBarrierType":
        return plgpu.ClusterBarrier(collective_axes=dtype.collective_axes,
                                    num_arrivals=dtype.num_arrivals, num_barriers=tuple(shape),
                                    orders_tensor_core=dtype.orders_tensor_core,
                                    leader_tracked=dtype.leader_tracked)
    return space(tuple(shape), dtype)


def scratch_to_jax(space, shape, dtype):
    """JAX's type for a frontend scratch/scoped buffer whose memory space is ``space``."""
    if hasattr(space, "to_jax"):
        return space.to_jax()
    theirs = _from_jax_space(space, shape, dtype)
    if theirs is not None:
        return theirs
    if space in (None, pf.MemorySpace.DEFAULT, pf.MemorySpace.ANY, SMEM) or (
            isinstance(space, MemorySpace) and space is not GMEM):
        target = SMEM if space in (None, pf.MemorySpace.DEFAULT, pf.MemorySpace.ANY) else space
        return _jax_space(target)(tuple(shape), dtype)
    raise NotImplementedError(f"pallas_mgpu: a scratch buffer in memory space {space} has no "
                              "Mosaic GPU counterpart; use pallas_mgpu.SMEM(shape, dtype).")


def is_gmem(space) -> bool:
    return space in (GMEM, pf.MemorySpace.ANY)
