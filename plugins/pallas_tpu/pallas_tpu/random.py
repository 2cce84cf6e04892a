"""Samplers over the core's hardware PRNG: ``stateful_bits``, ``stateful_uniform``,
``stateful_normal`` and ``stateful_bernoulli``.

Each draws fresh blocks from ``prng_random_bits`` (seed it first with
``prng_seed``) and transforms them with ordinary JAX ops, so nothing here
needs a rule of its own: they compile for TPU and run in TPU interpret mode
wherever ``prng_random_bits`` does. They take no key (the PRNG state is the
core's), like JAX's ``pltpu.stateful_*``; unlike JAX's, which call
``jax.random`` samplers and so differ in bit-level detail, these are written
against the 32-bit words directly:

- uniform: the top 23 bits fill the mantissa of a float in [1, 2); minus 1
  that is a multiple of 2**-23 in [0, 1), scaled to [minval, maxval) and
  clamped below ``maxval`` (the affine map may round up to it).
- normal: ``sqrt(2) * erf_inv(v)`` with ``v`` on the symmetric grid of odd
  multiples of 2**-23 in (-1, 1): never +-1, so never infinite; mean exactly 0.
- bernoulli: ``uniform < p``; P(True) is ``p`` rounded up to a multiple of 2**-23.

Only 32-bit draws: one hardware word per element (float32, uint32/int32).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
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
    """float32 multiples of 2**-23 in [0, 1), each value equally likely."""
    bits = prng_random_bits(_shape(shape))
    mantissa = lax.shift_right_logical(bits, jnp.int32(32 - _MANTISSA_BITS))
    one_to_two = lax.bitcast_convert_type(mantissa | jnp.int32(_ONE_BITS), jnp.float32)
    return one_to_two - jnp.float32(1.0)


def stateful_uniform(shape=(), dtype=jnp.float32, minval=0.0, maxval=1.0):
    """float32 samples uniform in [minval, maxval) (a grid of 2**23 values)."""
    _require(dtype, (jnp.float32,), "stateful_uniform")
    minval = jnp.asarray(minval, jnp.float32)
    maxval = jnp.asarray(maxval, jnp.float32)
    u = _unit_floats(shape) * (maxval - minval) + minval
    # Rounding can reach maxval; the largest float below it stays in range.
    # (The lower end cannot be crossed: minval plus a non-negative value.)
    below_max = lax.nextafter(maxval, jnp.float32(-jnp.inf))
    return jnp.minimum(u, below_max)


def stateful_normal(shape=(), dtype=jnp.float32):
    """float32 samples from the standard normal distribution."""
    _require(dtype, (jnp.float32,), "stateful_normal")
    # 2u - 1 + 2**-23 is exact in float32 for u on the 2**-23 grid.
    v = _unit_floats(shape) * jnp.float32(2.0) - jnp.float32(1.0 - 2.0 ** -_MANTISSA_BITS)
    return jnp.float32(math.sqrt(2.0)) * lax.erf_inv(v)


def stateful_bernoulli(p=0.5, shape=None):
    """Booleans, True with probability ``p`` (broadcast to ``shape``; ``shape=None``
    takes ``p``'s)."""
    p = jnp.asarray(p, jnp.float32)
    shape = p.shape if shape is None else _shape(shape)
    return _unit_floats(shape) < p
