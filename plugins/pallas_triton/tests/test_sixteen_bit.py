"""f16/bf16 kernels: under Triton's interpreter vs NumPy float64, and compiled for sm_90.

Before widening.py, bf16 arithmetic under the interpreter ran on the raw bits
(``x * 3`` on ones gave -3.7e19) and the math functions failed inside Triton's
compiler on both 16-bit types ("Expected dtype ['fp32', 'fp64']").
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import pallas_frontend as pl
import pallas_triton as pt

TRITON = dict(interpret=pt.InterpretParams())
DTYPES = {"float16": jnp.float16, "bfloat16": jnp.bfloat16}
# one rounding to the 16-bit type (plus float32 math) vs float64
RTOL = {"float16": 2e-3, "bfloat16": 1.6e-2}

# op -> (jax function, NumPy float64 reference, input range)
MATH = {
    "exp": (jnp.exp, np.exp, (-3, 3)),
    "exp2": (jnp.exp2, np.exp2, (-3, 3)),
    "log": (jnp.log, np.log, (0.1, 4)),
    "log2": (jnp.log2, np.log2, (0.1, 4)),
    "log1p": (jnp.log1p, np.log1p, (-0.5, 3)),
    "expm1": (jnp.expm1, np.expm1, (-3, 3)),
    "sqrt": (jnp.sqrt, np.sqrt, (0.1, 4)),
    "rsqrt": (lax.rsqrt, lambda x: 1 / np.sqrt(x), (0.1, 4)),
    "tanh": (jnp.tanh, np.tanh, (-3, 3)),
    "sin": (jnp.sin, np.sin, (-3, 3)),
    "cos": (jnp.cos, np.cos, (-3, 3)),
    "sigmoid": (jax.nn.sigmoid, lambda x: 1 / (1 + np.exp(-x)), (-3, 3)),
    "erf": (lax.erf, np.vectorize(__import__("math").erf), (-2, 2)),
    "floor": (jnp.floor, np.floor, (-3, 3)),
    "ceil": (jnp.ceil, np.ceil, (-3, 3)),
    "round": (jnp.round, np.round, (-3, 3)),
    "asin": (jnp.arcsin, np.arcsin, (-0.9, 0.9)),
    "cbrt": (jnp.cbrt, np.cbrt, (-8, 8)),
}


def _unary(fn, dtype, **call):
    def body(x_ref, o_ref):
        o_ref[...] = fn(x_ref[...])
    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((8, 32), dtype), **call)


def _data(rng, lo, hi, dtype):
    return jnp.asarray(rng.uniform(lo, hi, (8, 32)).astype(np.float32)).astype(dtype)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("op", MATH)
def test_math_interpreted(rng, op, dt):
    fn, ref, (lo, hi) = MATH[op]
    x = _data(rng, lo, hi, DTYPES[dt])
    out = _unary(fn, DTYPES[dt], **TRITON)(x)
    assert out.dtype == DTYPES[dt]
    np.testing.assert_allclose(np.asarray(out, np.float64), ref(np.asarray(x, np.float64)),
                               rtol=RTOL[dt], atol=RTOL[dt] * 0.1)


@pytest.mark.parametrize("target", [("cuda", 90), ("hip", "gfx942")], ids=str)
@pytest.mark.parametrize("dt", DTYPES)
def test_math_compiles(dt, target):
    """Every op above, one kernel per dtype, through Triton's compiler to PTX/AMDGCN."""
    fns = [MATH[op][0] for op in MATH]

    def body(x_ref, *o_refs):
        for fn, o in zip(fns, o_refs):
            o[...] = fn(x_ref[...])
    x = jax.ShapeDtypeStruct((8, 32), DTYPES[dt])
    call = pl.pallas_call(body, out_shape=[x] * len(fns))
    asm = pt.compile_for_target(lambda a: call(a), x, target=target)
    assert asm["ptx"] if target[0] == "cuda" else asm["hsaco"]


def test_bf16_arithmetic_interpreted(rng):
    """+ - * /, comparisons, max, a reduction and int casts, each rounded to bf16."""
    def body(a_ref, b_ref, i_ref, o_ref, s_ref, c_ref, n_ref):
        a, b = a_ref[...], b_ref[...]
        o_ref[...] = a * 3 - b / (a + 2.5)
        s_ref[...] = jnp.sum(jnp.maximum(a, b), axis=1, keepdims=True)
        c_ref[...] = jnp.where(a < b, a, -b) + i_ref[...].astype(jnp.bfloat16)
        n_ref[...] = (a * 10).astype(jnp.int32)
    bf = jnp.bfloat16
    a, b = (jnp.asarray(rng.uniform(-2, 2, (8, 32)), bf) for _ in range(2))
    i = jnp.asarray(rng.integers(-100, 100, (8, 32)), jnp.int8)
    outs = pl.pallas_call(body, out_shape=[jax.ShapeDtypeStruct((8, 32), bf),
                                           jax.ShapeDtypeStruct((8, 1), bf),
                                           jax.ShapeDtypeStruct((8, 32), bf),
                                           jax.ShapeDtypeStruct((8, 32), jnp.int32)],
                          **TRITON)(a, b, i)
    a64, b64, i64 = (np.asarray(v, np.float64) for v in (a, b, i))
    tol = dict(rtol=1.6e-2, atol=2e-2)
    np.testing.assert_allclose(np.asarray(outs[0], np.float64), a64 * 3 - b64 / (a64 + 2.5), **tol)
    np.testing.assert_allclose(np.asarray(outs[1], np.float64),
                               np.maximum(a64, b64).sum(1, keepdims=True), rtol=2e-2, atol=0.3)
    np.testing.assert_allclose(np.asarray(outs[2], np.float64),
                               np.where(a64 < b64, a64, -b64) + i64, **tol)
    # a * 10 rounds to bf16 before the cast truncates toward zero
    expect = np.trunc(np.asarray((a * 10).astype(bf), np.float64)).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(outs[3]), expect)


def test_bf16_products_round_to_nearest_even(rng):
    """Bit-exact vs ml_dtypes' rounding of the float32 product (the interpreter's own
    float32 -> bf16 conversion truncates); NaN, inf and f16 -> bf16 included."""
    def body(a_ref, b_ref, h_ref, o_ref, c_ref):
        o_ref[...] = a_ref[...] * b_ref[...]
        c_ref[...] = h_ref[...].astype(jnp.bfloat16)
    bf = jnp.bfloat16
    a = rng.standard_normal((16, 32)).astype(np.float32)
    a[0, :4] = [np.nan, np.inf, -np.inf, 0.0]
    b = rng.standard_normal((16, 32)).astype(np.float32)
    h = rng.standard_normal((16, 32)).astype(np.float16)
    a, b = jnp.asarray(a, bf), jnp.asarray(b, bf)
    prod, conv = pl.pallas_call(body, out_shape=[jax.ShapeDtypeStruct((16, 32), bf)] * 2,
                                **TRITON)(a, b, jnp.asarray(h))
    expect = (np.asarray(a, np.float32) * np.asarray(b, np.float32)).astype(bf)
    got = np.asarray(prod)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expect))
    ok = ~np.isnan(expect)
    np.testing.assert_array_equal(got.view(np.uint16)[ok], expect.view(np.uint16)[ok])
    np.testing.assert_array_equal(np.asarray(conv), h.astype(np.float32).astype(bf))
