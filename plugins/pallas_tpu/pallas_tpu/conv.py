"""``conv``: an N-d convolution inside a TPU kernel, JAX's ``pltpu.conv``.

Its meaning is ``lax.conv_general_dilated`` (with ``window_reversal`` flipping
the kernel's spatial dimensions), added to ``acc`` when one is given (the
result then has ``acc``'s dtype). A pure primitive owned by ``tpu``: the
interpreters run that meaning; on a TPU it is replayed as JAX's
``pltpu.conv``, which Mosaic lowers to the MXU.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from pallas_frontend.backend_api import (
    def_pure_primitive, kernel_primitive, register_interpret_rule)

from pallas_tpu import _jax_private, interpret_mode

OWNER = "tpu"

conv_p = kernel_primitive("tpu_conv", owner=OWNER)


def _spatial(n, value, default):
    return (default,) * n if value is None else tuple(value)


def _conv_impl(lhs, rhs, *acc, dimension_numbers, window_strides, padding, lhs_dilation,
               rhs_dilation, window_reversal, feature_group_count, batch_group_count,
               precision, preferred_element_type):
    dn = lax.conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
    n = len(dn.lhs_spec) - 2
    if window_reversal is not None:
        flip = [d for d, rev in zip(dn.rhs_spec[2:], window_reversal) if rev]
        if flip:
            rhs = lax.rev(rhs, flip)
    out_type = acc[0].dtype if acc and preferred_element_type is None else preferred_element_type
    out = lax.conv_general_dilated(
        lhs, rhs, _spatial(n, window_strides, 1),
        ((0, 0),) * n if padding is None else padding,
        lhs_dilation=_spatial(n, lhs_dilation, 1), rhs_dilation=_spatial(n, rhs_dilation, 1),
        dimension_numbers=dn, feature_group_count=feature_group_count,
        batch_group_count=batch_group_count, precision=precision,
        preferred_element_type=out_type)
    if acc:
        out = (out + acc[0]).astype(acc[0].dtype)
    return out


def _conv_abstract_eval(lhs, rhs, *acc, **params):
    shaped = jax.eval_shape(lambda *a: _conv_impl(*a, **params),
                            *(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in (lhs, rhs, *acc)))
    if acc and (acc[0].shape != shaped.shape):
        raise ValueError(f"pallas_tpu.conv: acc has shape {acc[0].shape}, the convolution's "
                         f"result {shaped.shape}.")
    return jax.core.ShapedArray(shaped.shape, shaped.dtype)


def_pure_primitive(conv_p, impl=_conv_impl, abstract_eval=_conv_abstract_eval)
register_interpret_rule(conv_p)


def _tuple(x):
    if x is None or isinstance(x, str):
        return x
    return tuple(_tuple(v) if isinstance(v, (list, tuple)) else v for v in x)


def conv(lhs, rhs, acc=None, *, dimension_numbers, window_strides=None, padding=None,
         lhs_dilation=None, rhs_dilation=None, window_reversal=None,
         feature_group_count: int = 1, batch_group_count: int = 1, precision=None,
         preferred_element_type=None):
    """``lax.conv_general_dilated(lhs, rhs, ...)`` (+ ``acc``) in a TPU kernel.
    ``dimension_numbers``: three layout strings (``("NHWC", "HWIO", "NHWC")``)
    or a ``ConvDimensionNumbers``; ``padding``: ``"SAME"``, ``"VALID"`` or
    ``(low, high)`` pairs (default none); ``window_reversal``: per spatial
    dimension, whether the kernel is flipped."""
    if isinstance(dimension_numbers, list):
        dimension_numbers = tuple(dimension_numbers)
    args = (lhs, rhs) if acc is None else (lhs, rhs, acc)
    return conv_p.bind(
        *(jnp.asarray(a) for a in args), dimension_numbers=dimension_numbers,
        window_strides=_tuple(window_strides), padding=_tuple(padding),
        lhs_dilation=_tuple(lhs_dilation), rhs_dilation=_tuple(rhs_dilation),
        window_reversal=_tuple(window_reversal), feature_group_count=int(feature_group_count),
        batch_group_count=int(batch_group_count), precision=precision,
        preferred_element_type=None if preferred_element_type is None
        else jnp.dtype(preferred_element_type))


def _replay(eqn, invals):
    if interpret_mode.active():       # JAX's TPU interpreter has no rule for its conv
        return conv_p.bind(*invals, **eqn.params)
    lhs, rhs, *acc = invals
    return _jax_private.jax_pltpu("conv")(lhs, rhs, acc[0] if acc else None, **eqn.params)


def _register():
    from pallas_tpu import evaluate
    evaluate.register_rule(conv_p, _replay)


_register()
