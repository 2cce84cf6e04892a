"""Small helpers for kernel authors: control flow, allocation, arithmetic."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from pallas_frontend.primitives import run_scoped
from pallas_frontend.specs import MemoryRef, MemorySpace


# --- arithmetic on sizes --------------------------------------------------------

def _static_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def cdiv(a, b):
    """Ceiling division: a Python int for Python or NumPy ints (usable in a
    grid), an array for arrays and traced values."""
    if _static_int(a) and _static_int(b):
        return -(-int(a) // int(b))
    if _size_dim(a) and _size_dim(b) and not (_static_int(b) and b <= 0):
        return (a + b - 1) // b      # a jax.export symbolic dim stays one (usable in a grid)
    return lax.div(a + b - 1, b)


def _size_dim(x) -> bool:
    if _static_int(x):
        return True
    from pallas_frontend import _jax_compat as jc
    return not isinstance(x, jax.core.Tracer) and jc.is_symbolic_dim(x)


def align_to(a: int, alignment: int) -> int:
    """Rounds ``a`` up to a multiple of ``alignment`` (a Python int for ints)."""
    return cdiv(a, alignment) * alignment


def next_power_of_2(x: int) -> int:
    """The smallest power of two >= ``x`` (1 for 0)."""
    if x < 0:
        raise ValueError(f"next_power_of_2 takes a non-negative int, got {x}")
    return 1 if x == 0 else 1 << (int(x) - 1).bit_length()


def strides_from_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major element strides of ``shape``."""
    strides, acc = [], 1
    for d in reversed(tuple(shape)):
        strides.append(acc)
        acc *= d
    return tuple(reversed(strides))


# --- allocation ---------------------------------------------------------------

def empty(shape, dtype, *, out_sharding=None):
    """An array whose contents are unspecified."""
    return lax.empty(tuple(shape), dtype, out_sharding=out_sharding)


def empty_like(tree):
    """``empty`` for every leaf of a pytree of arrays/ShapeDtypeStructs."""
    return jax.tree.map(lambda x: empty(x.shape, x.dtype), tree)


def empty_ref_like(x):
    """A new Ref shaped like ``x`` (a MemoryRef keeps its memory space; a
    backend's scratch type, e.g. ``pltpu.SemaphoreType.DMA(())``, gives its
    own Ref type; anything else with shape and dtype gets ``pl.ANY``)."""
    if isinstance(x, MemoryRef):
        space = x.memory_space
    elif callable(getattr(x, "get_ref_aval", None)):     # JAX's scratch-type protocol
        aval = x.get_ref_aval()
        x, space = aval.inner_aval, aval.memory_space
    else:
        space = MemorySpace.ANY
    return jax.empty_ref(jax.ShapeDtypeStruct(tuple(x.shape), x.dtype), memory_space=space)


def broadcast_to(a, shape):
    """Broadcasts ``a`` to ``shape`` inside a kernel."""
    return jnp.broadcast_to(a, tuple(shape))


def with_scoped(*types, collective_axes=(), **kw_types):
    """Decorator form of ``run_scoped``, as in JAX: ``@pl.with_scoped(T)``
    turns ``f(*args, ref)`` into ``g(*args)``, which allocates the Refs each
    time it is called and passes them after the caller's arguments."""
    def decorator(f):
        @functools.wraps(f)
        def with_refs(*args, **kwargs):
            return run_scoped(lambda *refs, **kw_refs: f(*args, *refs, **kwargs, **kw_refs),
                              *types, collective_axes=collective_axes, **kw_types)
        return with_refs
    return decorator


# --- control flow ---------------------------------------------------------------

def when(condition) -> Callable[[Callable[[], None]], None]:
    """``@pl.when(cond)`` runs the decorated function only where ``cond`` holds:
    a Python ``if`` for bools, ``lax.cond`` for traced values."""
    def decorator(f):
        if isinstance(condition, bool):
            if condition:
                f()
            return None
        lax.cond(condition, lambda: (f(), None)[1], lambda: None)
        return None
    return decorator


def loop(lower, upper, *, init_carry: Any = None, step: Any = 1, unroll: int | bool | None = None):
    """``@pl.loop(lo, hi)`` runs ``body(i)`` for i in range(lo, hi, step); with
    ``init_carry`` it runs ``carry = body(i, carry)`` and returns the carry.
    ``lo``, ``hi`` and ``step`` may be traced (then ``i`` has their common dtype)."""
    if isinstance(step, int) and step == 0:
        raise ValueError("pl.loop: step must not be 0")
    static = all(isinstance(v, int) for v in (lower, upper, step))
    static_step = step if isinstance(step, int) else None
    if not static:
        dtype = jnp.result_type(lower, upper, step)
        lower, upper, step = (lax.convert_element_type(v, dtype) for v in (lower, upper, step))

    def decorator(body):
        n = _trip_count(lower, upper, step, static_step)

        def index(k):
            return lower + k * step

        zero = 0 if static else jnp.zeros((), jnp.result_type(n))
        if init_carry is None:
            def fori_body(k, c):
                body(index(k))
                return c
            lax.fori_loop(zero, n, fori_body, None, unroll=unroll)
            return None
        return lax.fori_loop(zero, n, lambda k, c: body(index(k), c), init_carry, unroll=unroll)
    return decorator


def _trip_count(lower, upper, step, static_step=None):
    """len(range(lower, upper, step)), for ints or traced values of either sign."""
    if all(isinstance(v, int) for v in (lower, upper, step)):
        return len(range(lower, upper, step))
    if static_step is not None and static_step > 0:
        # ceil((upper - lower) / step) by truncating division, the ops JAX's pl.loop
        # emits (so the kernels' Mosaic match); an empty range gives a count <= 0,
        # for which fori_loop runs nothing. No neg or floor division: Mosaic GPU's
        # warp-level lowering (a loop in plgpu.warp_map) has neither
        return lax.div(upper - lower + (step - 1), step)
    # ceil((upper - lower) / step) == -floor((lower - upper) / step), for both signs
    return jnp.maximum(0, -((lower - upper) // step))


def _underlying_ref(ref):
    """The Ref under a view, or under the first choice of a ``select_ref`` view."""
    while hasattr(ref, "transforms"):
        ref = ref.ref[0] if isinstance(ref.ref, tuple) else ref.ref
    return ref


def select_ref(idx, *refs):
    """One of ``refs`` (Refs or views of the same shape and dtype), chosen by
    the int32 scalar ``idx`` when the kernel runs: the source or destination
    of a backend's DMA (e.g. ``pltpu.async_copy``), as in JAX, where nothing
    else accepts it."""
    from pallas_frontend import _jax_compat
    if len(refs) < 2:
        raise ValueError(f"pl.select_ref: got {len(refs)} Ref(s); it chooses among two or more.")
    types = []
    for i, ref in enumerate(refs):
        aval = jax.typeof(_underlying_ref(ref))
        if not isinstance(aval, jax.ref.AbstractRef):
            raise TypeError(f"pl.select_ref: refs[{i}] is a {aval}, not a Ref or a view of one.")
        types.append((tuple(ref.shape), ref.dtype))   # a semaphore's dtype is no NumPy dtype
    if len(set(types)) > 1:
        raise TypeError(f"pl.select_ref: the Refs must have one shape and dtype, got "
                        f"{[f'{d}{list(s)}' for s, d in types]}.")
    if jnp.shape(idx) != () or not jnp.issubdtype(jnp.result_type(idx), jnp.integer):
        raise TypeError(f"pl.select_ref: idx must be an integer scalar, got "
                        f"{jnp.result_type(idx)}{list(jnp.shape(idx))}.")
    return _jax_compat.select_view(idx, refs)


def pad_ref(ref, shape):
    """A view of ``ref`` grown at the end of each dim to ``shape``, for reads past its
    edge: JAX's ``pl.pad_ref`` (JAX 0.12.1 on), JAX's own view, so that pallas_tpu
    hands it to Mosaic as JAX does. Under the built-in interpreter the padding reads
    as zeros and writes to it are dropped, as under JAX's interpret mode."""
    from jax.experimental import pallas as jax_pallas      # JAX's Pallas, only when used
    if not hasattr(jax_pallas, "pad_ref"):                  # the feature, not the version
        raise NotImplementedError(
            f"pl.pad_ref needs JAX 0.12.1 or newer; this is JAX {jax.__version__}.")
    own = tuple(ref.shape)
    if not (isinstance(shape, Sequence) and len(shape) == len(own)
            and all(_static_int(d) and d >= s for d, s in zip(shape, own))):
        raise ValueError(f"pl.pad_ref: shape must be {len(own)} Python ints, each at least "
                         f"the Ref's own dim {list(own)}; got {shape!r}.")
    return jax_pallas.pad_ref(ref, tuple(int(d) for d in shape))
