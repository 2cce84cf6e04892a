"""More of JAX's ``plgpu`` operations, each recorded by ``ops.bind`` and
replayed as JAX's function of the same name (so its semantics, in Mosaic GPU
interpret mode and compiled, are JAX's): register stores and atomics to
SMEM/GMEM Refs, warpgroup reductions, ``barrier_test``, L2 prefetch, the
``cp.async`` wait of pre-Hopper GPUs, programmatic dependent launch
(``griddepcontrol_*``) and ``print_layout``.
"""

from __future__ import annotations

import jax
import numpy as np

from pallas_mgpu import _jax_private, ops
from pallas_mgpu.ops import bind


# --- stores and atomics ----------------------------------------------------------------

def store(dst, value, *, optimized: bool = True) -> None:
    """Stores the register array ``value`` to ``dst`` (an SMEM or GMEM Ref or view)."""
    bind("store", dst, value, optimized=bool(optimized))


def _atomic(name):
    def atomic(ref, val, *, optimized: bool = True) -> None:
        bind(name, ref, val, optimized=bool(optimized))
    atomic.__name__ = atomic.__qualname__ = name
    atomic.__doc__ = (f"Atomically combines ``val`` into ``ref`` elementwise ({name[7:]}); "
                      "atomic per element only.")
    return atomic


atomic_add = _atomic("atomic_add")
atomic_and = _atomic("atomic_and")
atomic_or = _atomic("atomic_or")
atomic_xor = _atomic("atomic_xor")
atomic_max = _atomic("atomic_max")
atomic_min = _atomic("atomic_min")


# --- reductions ------------------------------------------------------------------------------

def _axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    return tuple(sorted(int(a) % ndim for a in axes))


def _reduction(name):
    def reduce(x, axis=None, keepdims: bool = False, *, accumulator_ilp=None):
        if keepdims:
            raise NotImplementedError(f"pallas_mgpu.{name}: keepdims=True is not supported "
                                      "(as in JAX's plgpu); reshape the result.")
        axes = _axes(axis, x.ndim)
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
        return bind(name, x, axis=axes, accumulator_ilp=accumulator_ilp,
                    out_avals=(jax.core.ShapedArray(shape, np.dtype(x.dtype)),))[0]
    reduce.__name__ = reduce.__qualname__ = name
    reduce.__doc__ = (f"The {name} of the register array ``x`` over ``axis`` (all axes by "
                      "default), computed by the warpgroup.")
    return reduce


sum = _reduction("sum")      # noqa: A001  (JAX's plgpu names)
max = _reduction("max")      # noqa: A001
min = _reduction("min")      # noqa: A001
prod = _reduction("prod")


# --- barriers, prefetch, waits, launch control ------------------------------------------------

def barrier_test(barrier) -> jax.Array:
    """Whether ``barrier``'s current phase has completed (without waiting)."""
    return bind("barrier_test", barrier, out_avals=(jax.core.ShapedArray((), np.dtype(bool)),))[0]


def async_prefetch(ref, *, collective_axes=None, leader_tracked=None, predicate=None) -> None:
    """Prefetches the GMEM ``ref`` into the L2 cache (split across the blocks of
    ``collective_axes``)."""
    if isinstance(collective_axes, list):
        collective_axes = tuple(collective_axes)
    bind("async_prefetch", ref, predicate, collective_axes=collective_axes,
         leader_tracked=leader_tracked)


def _async_prefetch(ref, predicate, **kw):
    _jax_private.plgpu_function("async_prefetch")(ref, predicate=predicate, **kw)


def wait_gmem_to_smem(n: int) -> None:
    """Waits until at most ``n`` ``cp.async`` GMEM->SMEM copies are in flight
    (pre-Hopper GPUs)."""
    bind("wait_gmem_to_smem", n=int(n))


def griddepcontrol_launch_dependents() -> None:
    """Lets the grids that depend on this one launch (programmatic dependent launch)."""
    bind("griddepcontrol_launch_dependents")


def griddepcontrol_wait() -> None:
    """Waits for the grids this one depends on to finish."""
    bind("griddepcontrol_wait")


def print_layout(fmt: str, x) -> None:
    """Prints, when the kernel compiles, the layout Mosaic GPU chose for ``x``
    (an array, an SMEM or a TMEM Ref) through ``fmt``."""
    bind("print_layout", x, fmt=str(fmt))


def _print_layout(x, *, fmt):
    from jax.experimental.pallas import mosaic_gpu as plgpu
    plgpu.print_layout(fmt, x)


ops.ADAPTERS.update(async_prefetch=_async_prefetch, print_layout=_print_layout)

__all__ = ["async_prefetch", "atomic_add", "atomic_and", "atomic_max",
           "atomic_min", "atomic_or", "atomic_xor", "barrier_test", "griddepcontrol_launch_dependents",
           "griddepcontrol_wait", "max", "min", "print_layout", "prod", "store", "sum",
           "wait_gmem_to_smem"]
