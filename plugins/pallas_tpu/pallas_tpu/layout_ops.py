"""Value ops that move data across vector lanes and sublanes: ``roll`` and
``bitcast``, with the meaning of JAX's ``pltpu.roll`` and ``pltpu.bitcast``.

Each is a pure primitive owned by ``tpu``: its JAX implementation (also its
lowering off TPU) is what the frontend's reference interpreter runs; the
evaluator replays it on TPU as the ``pltpu`` function (Mosaic's
``tpu.dynamic_rotate`` and ``tpu.bitcast``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from pallas_frontend.backend_api import (
    def_pure_primitive, kernel_primitive, register_interpret_rule)

OWNER = "tpu"

roll_p = kernel_primitive("tpu_roll", owner=OWNER)
bitcast_p = kernel_primitive("tpu_bitcast", owner=OWNER)


# --- roll ----------------------------------------------------------------------------

def _roll_impl(x, shift, *, axis, stride, stride_axis):
    # pltpu.roll is jnp.roll: element i moves to (i + shift) mod n. With a
    # stride, slice j along stride_axis is rolled by shift + j * stride.
    if stride is None:
        return jnp.roll(x, shift, axis)
    parts = jnp.split(x, x.shape[stride_axis], stride_axis)
    return jnp.concatenate([jnp.roll(p, shift + j * stride, axis) for j, p in enumerate(parts)],
                           stride_axis)


def _roll_abstract_eval(x, shift, *, axis, stride, stride_axis):
    if shift.shape != () or not jnp.issubdtype(shift.dtype, jnp.integer):
        raise TypeError(f"pallas_tpu.roll: shift must be an integer scalar, got {shift}")
    return jax.core.ShapedArray(x.shape, x.dtype)


def_pure_primitive(roll_p, impl=_roll_impl, abstract_eval=_roll_abstract_eval)
register_interpret_rule(roll_p)


def _axis(axis: int, ndim: int, what: str) -> int:
    if not -ndim <= axis < ndim:
        raise ValueError(f"pallas_tpu.roll: {what}={axis} is out of range for rank {ndim}")
    return axis % ndim


def roll(x, shift, axis: int, *, stride: int | None = None, stride_axis: int | None = None):
    """``jnp.roll(x, shift, axis)`` on TPU vregs: element ``i`` moves to
    ``(i + shift) mod n``. ``shift`` may be traced; a negative one is taken
    modulo ``n`` here (Mosaic's rotate takes amounts in [0, n)). With
    ``stride``, slice ``j`` along ``stride_axis`` is rolled by ``shift + j * stride``."""
    x = jnp.asarray(x)
    axis = _axis(int(axis), x.ndim, "axis")
    if (stride is None) != (stride_axis is None):
        raise ValueError("pallas_tpu.roll: stride and stride_axis go together.")
    if stride is not None:
        stride_axis = _axis(int(stride_axis), x.ndim, "stride_axis")
        if stride_axis == axis or stride < 0:
            raise ValueError("pallas_tpu.roll: stride must be >= 0 along another axis than axis.")
        stride = int(stride)
    n = x.shape[axis]
    if isinstance(shift, (int, np.integer)):
        shift = jnp.int32(int(shift) % n)
    else:
        shift = lax.rem(lax.rem(jnp.asarray(shift, jnp.int32), jnp.int32(n)) + jnp.int32(n),
                        jnp.int32(n))
    return roll_p.bind(x, shift, axis=axis, stride=stride, stride_axis=stride_axis)


# --- bitcast -------------------------------------------------------------------------------

def _bits(dtype) -> int:
    return jnp.dtype(dtype).itemsize * 8


def _bitcast_shape(shape, src, dst, dim):
    shape = list(shape)
    if shape[dim] * _bits(src) % _bits(dst):
        raise ValueError(f"pallas_tpu.bitcast: dim {dim} of size {shape[dim]} cannot be packed "
                         f"or unpacked from {jnp.dtype(src)} to {jnp.dtype(dst)}")
    shape[dim] = shape[dim] * _bits(src) // _bits(dst)
    return tuple(shape)


def _bitcast_impl(x, *, dtype, dim):
    # With the scaled dim moved last, the bitcast is numpy's ``view``:
    # consecutive elements along it are packed into (unpacked from) one.
    src, dst = _bits(x.dtype), _bits(dtype)
    y = jnp.moveaxis(x, dim, -1)
    if src < dst:
        y = y.reshape(*y.shape[:-1], y.shape[-1] * src // dst, dst // src)
        y = lax.bitcast_convert_type(y, dtype)
    else:
        y = lax.bitcast_convert_type(y, dtype)
        if src > dst:
            y = y.reshape(*y.shape[:-2], y.shape[-2] * y.shape[-1])
    return jnp.moveaxis(y, -1, dim)


def _bitcast_abstract_eval(x, *, dtype, dim):
    return jax.core.ShapedArray(_bitcast_shape(x.shape, x.dtype, dtype, dim), dtype)


def_pure_primitive(bitcast_p, impl=_bitcast_impl, abstract_eval=_bitcast_abstract_eval)
register_interpret_rule(bitcast_p)


def bitcast(x, dtype, dim: int = -2):
    """Reinterprets the bits of ``x`` as ``dtype``, keeping the rank: dim ``dim``
    (the second minor, by default, or the minormost) scales by the ratio of the
    bit widths. Along the second minor dim, ``out[a, b]`` packs ``x[k*a + i, b]``
    for ``i < k`` (the first in the low bits); along the minormost it is numpy's
    ``view``. Mosaic takes the minormost only between equal widths on TensorCore."""
    x = jnp.asarray(x)
    dtype = jnp.dtype(dtype)
    if x.ndim < 1 or (dim in (-2, x.ndim - 2) and x.ndim < 2):
        raise ValueError("pallas_tpu.bitcast: a 1-D array can only be bitcast along dim=-1.")
    if dim not in (-1, -2, x.ndim - 1, x.ndim - 2):
        raise ValueError(f"pallas_tpu.bitcast: dim must be the second minor or the minormost "
                         f"dim, got {dim} for rank {x.ndim}")
    dim = dim % x.ndim
    _bitcast_shape(x.shape, x.dtype, dtype, dim)      # raises early, at the user's line
    return bitcast_p.bind(x, dtype=dtype, dim=dim)
