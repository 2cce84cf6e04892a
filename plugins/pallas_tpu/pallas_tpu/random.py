"""Samplers over the core's hardware PRNG: ``stateful_bits``, ``stateful_uniform``,
``stateful_normal`` and ``stateful_bernoulli``.

Each draws fresh blocks from ``prng_random_bits`` (seed it first with
``prng_seed``) and transforms them with ordinary JAX ops, so nothing here
needs a rule of its own: they compile for TPU and run in TPU interpret mode
wherever ``prng_random_bits`` does. They take no key (the PRNG state is the
core's), like JAX's ``pltpu.stateful_*``, which are ``jax.random``'s samplers
over that same stream; these give the same values from the same 32-bit words:

- uniform: the top 23 bits of a word are the mantissa of a float32 in [1, 2);
  minus 1 that is ``u``, a multiple of 2**-23 in [0, 1); the sample is
  ``max(minval, u * (maxval - minval) + minval)`` in float32 (so
  ``minval == maxval`` gives ``minval``; rounding may reach ``maxval``).
- normal: ``sqrt(2) * erf_inv(v)``, ``v`` uniform as above between
  ``lo = -(1 - 2**-24)`` (the float32 after -1) and 1: ``v`` is never -1, so
  the sample is finite.
- bernoulli: ``uniform < p`` (``mode="low"``); ``mode="high"`` draws two
  uniforms per sample, ``u2 * 2**-23 < p - u1``, for small ``p``.

Only 32-bit draws: one hardware word per element (float32, uint32/int32).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax import lax

from pallas_tpu.primitives import prng_random_bits

_MANTISSA_BITS = 23
_ONE_BITS = 0x3F800000          # float32 1.0


def _shape(shape) -> tuple[int, ...]:
    return tuple(int(d) for d in shape)


def _require(dtype, allowed, what):
    dtype = jnp.dtype(dtype)
    if dtype not in allowed:
        names = ", ".join(str(jnp.dtype(a)) for a in allowed)
        raise ValueError(f"pallas_tpu.{what}: dtype {dtype} is not supported (one 32-bit "
                         f"hardware draw per element: {names}).")
    return dtype


def stateful_bits(shape=(), dtype=jnp.uint32):
    """Uniformly random bits of ``shape`` (uint32 or int32), from the hardware PRNG."""
    dtype = _require(dtype, (jnp.uint32, jnp.int32), "stateful_bits")
    bits = prng_random_bits(_shape(shape))
    return bits if dtype == jnp.int32 else lax.bitcast_convert_type(bits, dtype)


def _unit_floats(shape):
    """float32 multiples of 2**-23 in [0, 1) from one word each: the word's top
    23 bits under the exponent of 1.0, minus 1."""
    words = lax.bitcast_convert_type(prng_random_bits(_shape(shape)), jnp.uint32)
    mantissa = lax.shift_right_logical(words, jnp.uint32(32 - _MANTISSA_BITS))
    one_to_two = lax.bitcast_convert_type(mantissa | jnp.uint32(_ONE_BITS), jnp.float32)
    return one_to_two - jnp.float32(1.0)


def _uniform(shape, minval, maxval):
    """float32 ``max(minval, u * (maxval - minval) + minval)``; the bounds broadcast to ``shape``."""
    shape = _shape(shape)
    lo = jnp.asarray(minval).astype(jnp.float32)
    hi = jnp.asarray(maxval).astype(jnp.float32)
    # bounds of lower rank gain leading 1-dims (then broadcast), as in jax.random.uniform
    lo = lo.reshape((1,) * (len(shape) - lo.ndim) + lo.shape)
    hi = hi.reshape((1,) * (len(shape) - hi.ndim) + hi.shape)
    scaled = _unit_floats(shape) * (hi - lo) + lo
    return lax.max(lo, scaled.reshape(shape))


def stateful_uniform(shape=(), dtype=jnp.float32, minval=0.0, maxval=1.0):
    """float32 samples in [minval, maxval] (a grid of 2**23 steps; rounding may
    reach ``maxval``, and ``minval == maxval`` gives that value)."""
    _require(dtype, (jnp.float32,), "stateful_uniform")
    return _uniform(shape, minval, maxval)


def stateful_normal(shape=(), dtype=jnp.float32):
    """float32 samples from the standard normal distribution."""
    _require(dtype, (jnp.float32,), "stateful_normal")
    lo = np.nextafter(np.float32(-1.0), np.float32(0.0))       # -(1 - 2**-24)
    v = _uniform(shape, lo, np.float32(1.0))
    return lax.mul(np.float32(math.sqrt(2.0)), lax.erf_inv(v))


def stateful_bernoulli(p=0.5, shape=None, mode: str = "low"):
    """Booleans, True with probability ``p`` (float32, broadcast to ``shape``;
    ``shape=None`` takes ``p``'s). ``mode="high"`` spends two words per sample
    for ``p`` below about 1e-7."""
    if mode not in ("low", "high"):
        raise ValueError(f"pallas_tpu.stateful_bernoulli: mode must be 'low' or 'high', got "
                         f"{mode!r}.")
    if not jnp.issubdtype(jnp.result_type(p), jnp.floating):
        raise TypeError(f"pallas_tpu.stateful_bernoulli: p must be a float, got "
                        f"{jnp.result_type(p)}.")
    _require(jnp.result_type(p), (jnp.float32,), "stateful_bernoulli")
    p = jnp.asarray(p, jnp.float32)
    shape = p.shape if shape is None else _shape(shape)
    if mode == "low":
        return _uniform(shape, 0.0, 1.0) < p
    both = _uniform((2, *shape), 0.0, 1.0)
    u1, u2 = both[0], both[1] * np.float32(2.0 ** -_MANTISSA_BITS)
    return u2 < p - u1
