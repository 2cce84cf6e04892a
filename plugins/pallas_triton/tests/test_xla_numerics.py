"""Integer div/rem by 0 and -1, shifts past the width, float -> int casts out of range:
the generated kernel under Triton's interpreter vs XLA (jnp on CPU), bit for bit.

Before xla_numerics.py: lax.div(x, 0) gave 0, lax.rem(x, 0) 0, NaN/inf/1e10 -> int32
INT_MIN and 300.0 -> uint8 44 (C semantics in NumPy); XLA gives -1, x, saturation.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import pallas_frontend as pl
import pallas_triton as pt

TRITON = dict(interpret=pt.InterpretParams())
INTS = [jnp.int8, jnp.int32, jnp.uint8, jnp.uint32]


def _binary(fn, dtype, out_dtype=None, **call):
    def body(x_ref, y_ref, o_ref):
        o_ref[...] = fn(x_ref[...], y_ref[...])
    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((8, 64), out_dtype or dtype),
                          **call)


def _ints(rng, dtype, specials):
    info = np.iinfo(dtype)
    x = rng.integers(info.min, int(info.max) + 1, (8, 64), dtype=np.int64)
    flat = x.reshape(-1)
    picks = rng.choice(flat.size, size=len(specials) * 8, replace=False)
    for k, p in enumerate(picks):
        flat[p] = specials[k % len(specials)]
    return jnp.asarray(x.astype(dtype))


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: d.__name__)
@pytest.mark.parametrize("op", ["div", "rem"])
def test_div_rem_edge_cases(rng, op, dtype):
    info = np.iinfo(dtype)
    x = _ints(rng, dtype, [info.min, info.max, 0, 1])
    y = _ints(rng, dtype, [0, 1] + ([-1] if info.min < 0 else [int(info.max)]))
    fn = getattr(lax, op)
    got = np.asarray(_binary(fn, dtype, **TRITON)(x, y))
    np.testing.assert_array_equal(got, np.asarray(jax.jit(fn)(x, y)))


@pytest.mark.parametrize("dtype", INTS, ids=lambda d: d.__name__)
@pytest.mark.parametrize("op", ["shift_left", "shift_right_arithmetic", "shift_right_logical"])
def test_shifts_past_the_width(rng, op, dtype):
    bits = np.dtype(dtype).itemsize * 8
    x = _ints(rng, dtype, [0, 1])
    lo = -3 if np.iinfo(dtype).min < 0 else 0
    y = jnp.asarray(rng.integers(lo, bits + 4, (8, 64)).astype(dtype))
    fn = getattr(lax, op)
    got = np.asarray(_binary(fn, dtype, **TRITON)(x, y))
    np.testing.assert_array_equal(got, np.asarray(jax.jit(fn)(x, y)))


@pytest.mark.parametrize("src", [jnp.float32, jnp.float16, jnp.bfloat16], ids=lambda d: d.__name__)
@pytest.mark.parametrize("dst", INTS, ids=lambda d: d.__name__)
def test_float_to_int_saturates(rng, src, dst):
    x = rng.standard_normal((8, 64)) * rng.choice([1.0, 100.0, 1e4, 1e10], (8, 64))
    x.reshape(-1)[:8] = [np.nan, np.inf, -np.inf, 300.0, -300.0, 255.9, -0.9, 2.0 ** 31]
    x = jnp.asarray(x.astype(np.float32)).astype(src)

    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...].astype(dst)
    got = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((8, 64), dst), **TRITON)(x)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(jax.jit(
        lambda v: lax.convert_element_type(v, dst))(x)))


def test_guarded_ops_compile_for_sm90():
    def body(x_ref, y_ref, f_ref, q_ref, r_ref, s_ref, c_ref):
        x, y = x_ref[...], y_ref[...]
        q_ref[...] = lax.div(x, y)
        r_ref[...] = lax.rem(x, y)
        s_ref[...] = lax.shift_right_arithmetic(x, y)
        c_ref[...] = f_ref[...].astype(jnp.int8).astype(jnp.int32)
    i = jax.ShapeDtypeStruct((8, 64), jnp.int32)
    f = jax.ShapeDtypeStruct((8, 64), jnp.bfloat16)
    call = pl.pallas_call(body, out_shape=[i] * 4)
    asm = pt.compile_for_target(lambda a, b, c: call(a, b, c), i, i, f, target=("cuda", 90))
    assert "div.s32" in asm["ptx"] or "div.rn" in asm["ptx"] or "rem.s32" in asm["ptx"]
