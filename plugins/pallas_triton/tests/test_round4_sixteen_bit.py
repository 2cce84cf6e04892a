"""Issue 39 round 4 probe defects in the 16-bit float paths, under Triton's interpreter.

- Triton divides float16 in float32 and returns float32; the division emitter
  passed that on unrounded, so ``round(a / b)`` rounded 7157.66 (float16 7156
  in XLA) to 7160: ``jnp.floor_divide`` on float16 differed from XLA by an ulp.
- neg/abs of bfloat16 went through float32 and back, which quieted a
  signalling NaN (0x7F81 -> 0xFFC1 under neg); XLA flips or clears the sign
  bit only. ``jnp.copysign`` (built from neg and abs) did the same.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import pallas_frontend as pl
import pallas_triton as pt


def _run(fn, out_dtype, *xs):
    def kernel(*refs):
        refs[-1][...] = fn(*[r[...] for r in refs[:-1]])
    return np.asarray(pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(xs[0].shape,
                                                                             out_dtype),
                                     interpret=pt.InterpretParams())(*xs))


def test_float16_quotient_is_rounded_before_the_next_operation(rng):
    a = rng.uniform(1000, 8000, 1024).astype(np.float16)
    b = rng.uniform(0.3, 0.9, 1024).astype(np.float16)
    got = _run(lambda x, y: lax.round(x / y), jnp.float16, a, b)
    # float64 reference of float16 semantics: the quotient rounded to float16, then rounded
    q = (a.astype(np.float64) / b.astype(np.float64)).astype(np.float16).astype(np.float64)
    want = np.where(q - np.floor(q) >= 0.5, np.floor(q) + 1, np.floor(q)).astype(np.float16)
    np.testing.assert_array_equal(got, want)
    fd = _run(jnp.floor_divide, jnp.float16, a, b)
    np.testing.assert_array_equal(fd, np.asarray(jax.jit(jnp.floor_divide)(a, b)))


def _bf16_bits(rng, n=512):
    bits = rng.integers(0, 1 << 16, n).astype(np.uint16)
    bits[:8] = [0x7F81, 0xFF81, 0x7FA5, 0xFFBF, 0x7FC1, 0x8000, 0x0001, 0x7F80]
    return bits


def test_bfloat16_neg_abs_keep_every_bit(rng):
    bits = _bf16_bits(rng)
    x = jnp.asarray(lax.bitcast_convert_type(jnp.asarray(bits), jnp.bfloat16))
    neg = _run(lambda v: -v, jnp.bfloat16, x).view(np.uint16)
    np.testing.assert_array_equal(neg, bits ^ 0x8000)
    ab = _run(jnp.abs, jnp.bfloat16, x).view(np.uint16)
    np.testing.assert_array_equal(ab, bits & 0x7FFF)
    y = jnp.asarray(lax.bitcast_convert_type(jnp.asarray(_bf16_bits(rng)), jnp.bfloat16))
    cs = _run(jnp.copysign, jnp.bfloat16, x, y).view(np.uint16)
    np.testing.assert_array_equal(cs, (bits & 0x7FFF) | (np.asarray(y).view(np.uint16) & 0x8000))
