"""Narrow number formats inside a TPU kernel, JAX's ``pltpu`` names:
``pack_elementwise`` / ``unpack_elementwise`` (several values per word),
``stochastic_round`` (float32 to a narrower type, rounding at random), and the
sub-byte helpers ``split_bits``, ``join_bits``, ``pack_fp6``, ``unpack_fp6``.

The first three are pure primitives owned by ``tpu``: the interpreters run
the meaning written here, a TPU gets JAX's function (Mosaic's
``tpu.pack_elementwise``, ``tpu.unpack_elementwise``, ``tpu.stochastic_convert``).
The helpers are built from them and ``pallas_tpu.bitcast``, as JAX builds
its own, so they lower the same way.

- ``pack_elementwise(xs, packed_dtype=)``: ``k`` arrays of a ``w``-bit type
  (``k = w / bits(packed_dtype)``) become one array of ``uint{w}``; element
  ``i`` of the word, from the low bits up, is ``xs[i]`` converted
  (float32 -> bfloat16 rounds to nearest even; integers keep their low bits).
- ``unpack_elementwise(x, index=, packed_dtype=, unpacked_dtype=)``: the
  ``index``-th such field of each element, widened to ``unpacked_dtype``
  (signed integers sign-extended).
- ``stochastic_round(x, random_bits, target_dtype=)``: each float32 goes to
  one of its two neighbours in ``target_dtype`` (bfloat16, the float8 types,
  float4_e2m1fn, int4), the one further away with probability equal to the
  distance to the nearer one over the gap; ``random_bits / 2**32`` is the
  uniform draw. Exact values stay; beyond the largest finite value the result
  saturates. Same distribution as a TPU's ``stochastic_convert``; which draw
  rounds which way may differ from the hardware's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from pallas_frontend.backend_api import (
    def_pure_primitive, kernel_primitive, register_interpret_rule)

from pallas_tpu import interpret_mode
from pallas_tpu.layout_ops import bitcast

OWNER = "tpu"

pack_elementwise_p = kernel_primitive("tpu_pack_elementwise", owner=OWNER)
unpack_elementwise_p = kernel_primitive("tpu_unpack_elementwise", owner=OWNER)
stochastic_round_p = kernel_primitive("tpu_stochastic_round", owner=OWNER)

STOCHASTIC_TARGETS = (jnp.bfloat16, jnp.float8_e5m2, jnp.float8_e4m3fn,
                      jnp.float8_e4m3b11fnuz, jnp.float4_e2m1fn, jnp.int4)


def _bits(dtype) -> int:
    return jax.dtypes.itemsize_bits(jnp.dtype(dtype))


def _uint(width: int):
    return jnp.dtype(f"uint{width}")


def _packing_factor(wide, narrow, what) -> int:
    if _bits(wide) % _bits(narrow):
        raise ValueError(f"pallas_tpu.{what}: {jnp.dtype(wide)} does not hold a whole number of "
                         f"{jnp.dtype(narrow)} values.")
    return _bits(wide) // _bits(narrow)


# --- pack_elementwise ------------------------------------------------------------------

def _field_bits(x, packed_dtype, width):
    """The ``bits(packed_dtype)`` bits ``x`` contributes to a packed word, as ``uint{width}``."""
    narrow = _bits(packed_dtype)
    if jnp.issubdtype(x.dtype, jnp.floating):
        converted = x.astype(packed_dtype)
        field = lax.bitcast_convert_type(converted, _uint(narrow))
        return field.astype(_uint(width))
    word = lax.bitcast_convert_type(x, _uint(width))
    return word & np.array((1 << narrow) - 1, _uint(width))


def _pack_impl(*xs, packed_dtype):
    width, narrow = _bits(xs[0].dtype), _bits(packed_dtype)
    out = jnp.zeros(xs[0].shape, _uint(width))
    for i, x in enumerate(xs):
        out = out | (_field_bits(x, packed_dtype, width) << np.array(i * narrow, _uint(width)))
    return out


def _pack_abstract_eval(*xs, packed_dtype):
    if not xs:
        raise ValueError("pallas_tpu.pack_elementwise: give at least one array.")
    first = xs[0]
    if any(x.shape != first.shape or x.dtype != first.dtype for x in xs):
        raise ValueError("pallas_tpu.pack_elementwise: the arrays must share shape and dtype, "
                         f"got {[f'{x.dtype}{list(x.shape)}' for x in xs]}.")
    is_float = first.dtype == jnp.float32 and packed_dtype == jnp.bfloat16
    is_int = jnp.issubdtype(first.dtype, jnp.integer) and jnp.issubdtype(packed_dtype, jnp.integer)
    if not (is_float or is_int):
        raise ValueError(f"pallas_tpu.pack_elementwise: packs float32 into bfloat16 or integers "
                         f"into integers, not {first.dtype} into {packed_dtype}.")
    k = _packing_factor(first.dtype, packed_dtype, "pack_elementwise")
    if len(xs) != k:
        raise ValueError(f"pallas_tpu.pack_elementwise: {first.dtype} words hold {k} "
                         f"{packed_dtype} values; give {k} arrays, not {len(xs)}.")
    return jax.core.ShapedArray(first.shape, _uint(_bits(first.dtype)))


def_pure_primitive(pack_elementwise_p, impl=_pack_impl, abstract_eval=_pack_abstract_eval)
register_interpret_rule(pack_elementwise_p)


def pack_elementwise(xs, *, packed_dtype):
    """Packs ``len(xs)`` arrays into one word per element (see the module docstring)."""
    xs = [jnp.asarray(x) for x in xs]
    _pack_abstract_eval(*(jax.typeof(x) for x in xs), packed_dtype=jnp.dtype(packed_dtype))
    return pack_elementwise_p.bind(*xs, packed_dtype=jnp.dtype(packed_dtype))


# --- unpack_elementwise ------------------------------------------------------------------

def _unpack_impl(x, *, index, packed_dtype, unpacked_dtype):
    width, narrow = _bits(x.dtype), _bits(packed_dtype)
    word = lax.bitcast_convert_type(x, _uint(width))
    field = (word >> np.array(index * narrow, _uint(width))) & \
        np.array((1 << narrow) - 1, _uint(width))
    if jnp.issubdtype(packed_dtype, jnp.floating):
        value = lax.bitcast_convert_type(field.astype(_uint(narrow)), packed_dtype)
        return value.astype(unpacked_dtype)
    if jnp.issubdtype(packed_dtype, jnp.signedinteger):
        # move the field's sign bit to the top, then shift back arithmetically
        signed = lax.bitcast_convert_type(field << np.array(width - narrow, _uint(width)),
                                          jnp.dtype(f"int{width}"))
        return (signed >> np.array(width - narrow, f"int{width}")).astype(unpacked_dtype)
    return field.astype(unpacked_dtype)


def _unpack_abstract_eval(x, *, index, packed_dtype, unpacked_dtype):
    if _bits(x.dtype) != _bits(unpacked_dtype):
        raise ValueError(f"pallas_tpu.unpack_elementwise: x ({x.dtype}) and unpacked_dtype "
                         f"({unpacked_dtype}) must have the same width.")
    k = _packing_factor(unpacked_dtype, packed_dtype, "unpack_elementwise")
    if not 0 <= index < k:
        raise ValueError(f"pallas_tpu.unpack_elementwise: index {index} is out of range for "
                         f"{k} {packed_dtype} values per word.")
    return jax.core.ShapedArray(x.shape, jnp.dtype(unpacked_dtype))


def_pure_primitive(unpack_elementwise_p, impl=_unpack_impl, abstract_eval=_unpack_abstract_eval)
register_interpret_rule(unpack_elementwise_p)


def unpack_elementwise(x, *, index, packed_dtype, unpacked_dtype):
    """The ``index``-th ``packed_dtype`` field of each element of ``x``, widened
    to ``unpacked_dtype`` (see the module docstring)."""
    x = jnp.asarray(x)
    params = dict(index=int(index), packed_dtype=jnp.dtype(packed_dtype),
                  unpacked_dtype=jnp.dtype(unpacked_dtype))
    _unpack_abstract_eval(jax.typeof(x), **params)
    return unpack_elementwise_p.bind(x, **params)


# --- stochastic_round ------------------------------------------------------------------

def _float_grid(target):
    """(mantissa bits, smallest normal exponent, largest finite value) of ``target``."""
    info = jnp.finfo(target)
    return int(info.nmant), int(info.minexp), float(info.max)


def _stochastic_impl(x, random_bits, *, target_dtype):
    target = jnp.dtype(target_dtype)
    # a uniform draw in [0, 1) from the top 24 bits (exact in float32)
    u = (random_bits >> np.uint32(8)).astype(jnp.float32) * np.float32(2.0 ** -24)
    magnitude = jnp.abs(x)
    if target == jnp.int4:
        lo = jnp.floor(magnitude)
        gap = jnp.float32(1.0)
        top = jnp.where(x < 0, jnp.float32(8.0), jnp.float32(7.0))
    else:
        nmant, minexp, largest = _float_grid(target)
        # the spacing of target values around |x|: 2**(exponent - nmant), at
        # least the subnormal spacing
        _, e = jnp.frexp(jnp.maximum(magnitude, jnp.float32(2.0 ** minexp)))
        exponent = (e - 1).astype(jnp.float32)      # floor(log2 |x|), exactly
        gap = jnp.exp2(exponent - nmant)
        lo = jnp.floor(magnitude / gap) * gap
        top = jnp.float32(largest)
    up = u < (magnitude - lo) / gap
    rounded = jnp.minimum(jnp.where(up, lo + gap, lo), top)
    # below float32's normal range (bfloat16's subnormals) the spacing flushes to
    # zero where denormals do: those values (and zero) convert as they are
    rounded = jnp.where(gap > 0, rounded, magnitude)
    rounded = jnp.where(jnp.isnan(x), x, jnp.copysign(rounded, x))
    return rounded.astype(target)


def _stochastic_abstract_eval(x, random_bits, *, target_dtype):
    if x.dtype != jnp.float32:
        raise ValueError(f"pallas_tpu.stochastic_round: x must be float32, got {x.dtype}.")
    if random_bits.shape != x.shape or random_bits.dtype != jnp.uint32:
        raise ValueError(f"pallas_tpu.stochastic_round: random_bits must be uint32 of x's shape "
                         f"{x.shape}, got {random_bits.dtype}{list(random_bits.shape)}.")
    if jnp.dtype(target_dtype) not in [jnp.dtype(t) for t in STOCHASTIC_TARGETS]:
        names = ", ".join(jnp.dtype(t).name for t in STOCHASTIC_TARGETS)
        raise ValueError(f"pallas_tpu.stochastic_round: target_dtype {target_dtype} is not one "
                         f"of {names}.")
    return jax.core.ShapedArray(x.shape, jnp.dtype(target_dtype))


def_pure_primitive(stochastic_round_p, impl=_stochastic_impl,
                   abstract_eval=_stochastic_abstract_eval)
register_interpret_rule(stochastic_round_p)


def stochastic_round(x, random_bits, *, target_dtype):
    """``x`` (float32) rounded to ``target_dtype`` at random, unbiased (see the
    module docstring); ``random_bits``: uint32 of ``x``'s shape."""
    x, random_bits = jnp.asarray(x), jnp.asarray(random_bits)
    _stochastic_abstract_eval(jax.typeof(x), jax.typeof(random_bits),
                              target_dtype=jnp.dtype(target_dtype))
    return stochastic_round_p.bind(x, random_bits, target_dtype=jnp.dtype(target_dtype))


# --- sub-byte helpers ---------------------------------------------------------------------

def join_bits(*, two_bits=None, four_bits=None):
    """int8 bytes holding ``four_bits`` (int4/uint4) in bits 0-3 and ``two_bits``
    (int2/uint2) in bits 4-5; with one of them, it alone in the low bits."""
    if two_bits is None and four_bits is None:
        raise ValueError("pallas_tpu.join_bits: give two_bits, four_bits or both.")
    if two_bits is not None and four_bits is not None and two_bits.shape != four_bits.shape:
        raise ValueError(f"pallas_tpu.join_bits: two_bits {two_bits.shape} and four_bits "
                         f"{four_bits.shape} must have the same shape.")
    two_as_int4 = None
    if two_bits is not None:
        if _bits(two_bits.dtype) != 2:
            raise ValueError(f"pallas_tpu.join_bits: two_bits must be 2-bit, got {two_bits.dtype}")
        # zero-extended to 4 bits, kept as a 4-bit type so the widening below stays zero
        two_as_int4 = bitcast(two_bits.astype(jnp.uint2).astype(jnp.uint4), jnp.int4)
    if four_bits is None:
        return two_as_int4.astype(jnp.int8)
    if _bits(four_bits.dtype) != 4:
        raise ValueError(f"pallas_tpu.join_bits: four_bits must be 4-bit, got {four_bits.dtype}")
    if two_as_int4 is None:
        return four_bits.astype(jnp.uint4).astype(jnp.int8)
    low, high = four_bits.astype(jnp.int4).astype(jnp.int8), two_as_int4.astype(jnp.int8)
    return pack_elementwise((low, high), packed_dtype=jnp.int4).astype(jnp.int8)


def split_bits(x, bitwidths):
    """The fields of the int8/uint8 ``x`` of the given widths (2 or 4 each),
    from the low bits up, as int2/int4 arrays."""
    if _bits(x.dtype) != 8:
        raise ValueError(f"pallas_tpu.split_bits: x must be 8-bit, got {x.dtype}")
    if sum(bitwidths) > 8:
        raise ValueError(f"pallas_tpu.split_bits: the widths {tuple(bitwidths)} exceed 8 bits.")
    x8 = x.astype(jnp.int8)
    fields, offset = [], 0
    for width in bitwidths:
        if width not in (2, 4):
            raise ValueError(f"pallas_tpu.split_bits: widths are 2 or 4, got {width}")
        narrow = jnp.int4 if width == 4 else jnp.int2
        if offset == 0:
            moved = x8
        elif offset % width == 0:
            moved = unpack_elementwise(x8, index=offset // width, packed_dtype=narrow,
                                       unpacked_dtype=jnp.int8)
        else:
            moved = lax.shift_right_logical(x8, jnp.int8(offset))
        fields.append(moved.astype(narrow))
        offset += width
    return tuple(fields)


def unpack_fp6(two_bits, four_bits):
    """int8 bytes holding 6-bit values from their split layout: ``four_bits`` in
    bits 0-3, ``two_bits`` in bits 4-5."""
    return join_bits(two_bits=two_bits, four_bits=four_bits)


def pack_fp6(fp6_in_8b):
    """The split layout of 6-bit values held in bytes: ``(two_bits, four_bits)``,
    bits 4-5 as int2 and bits 0-3 as int4."""
    four_bits, two_bits = split_bits(fp6_in_8b, (4, 2))
    return two_bits, four_bits


# --- replay on TPU ----------------------------------------------------------------------

def _replay(ours, jax_name, call):
    def rule(eqn, invals):
        if interpret_mode.active():     # JAX's TPU interpreter has no rule for these
            return ours.bind(*invals, **eqn.params)
        from jax.experimental.pallas import tpu as jax_pltpu
        return call(getattr(jax_pltpu, jax_name), invals, eqn.params)
    return rule


def _register():
    from pallas_tpu import evaluate
    evaluate.register_rule(pack_elementwise_p, _replay(
        pack_elementwise_p, "pack_elementwise", lambda f, xs, p: f(xs, **p)))
    evaluate.register_rule(unpack_elementwise_p, _replay(
        unpack_elementwise_p, "unpack_elementwise", lambda f, xs, p: f(xs[0], **p)))
    evaluate.register_rule(stochastic_round_p, _replay(
        stochastic_round_p, "stochastic_round", lambda f, xs, p: f(*xs, **p)))


_register()
