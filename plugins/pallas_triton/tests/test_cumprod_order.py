"""cumprod under Triton's interpreter follows XLA's association order on CPU
(interpret_scan.py): against NumPy float64 on fresh data, XLA's bits, and a running
product that passes through the denormal range (issue 39: was 0, XLA and float64
give a normal float32)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import pallas_frontend as pl
import pallas_triton as pt

TRITON = dict(interpret=pt.InterpretParams())
TINY = float(np.finfo(np.float32).tiny)


def _cumprod_kernel(shape, axis, reverse, dtype=jnp.float32):
    def body(x_ref, o_ref):
        o_ref[...] = lax.cumprod(x_ref[...], axis=axis, reverse=reverse)
    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(shape, dtype), **TRITON)


def _f64_cumprod(x, axis, reverse):
    x = np.asarray(x, np.float64)
    if reverse:
        return np.flip(np.cumprod(np.flip(x, axis), axis), axis)
    return np.cumprod(x, axis)


@pytest.mark.parametrize("shape,axis", [((4, 40), 1), ((300, 2), 0), ((2, 1024), 1),
                                        ((3, 9), 1)])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumprod_matches_float64_and_xla_bits(rng, shape, axis, reverse):
    # magnitudes spread over 2**-9..2**3 with random signs: long products reach the
    # denormal range, where XLA flushes
    x = (np.exp2(rng.uniform(-9, 3, shape)) * rng.choice([-1.0, 1.0], shape)).astype(np.float32)
    got = np.asarray(_cumprod_kernel(shape, axis, reverse)(x))
    want = np.asarray(jax.jit(lambda v: lax.cumprod(v, axis=axis, reverse=reverse))(x))
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    truth = _f64_cumprod(x, axis, reverse)
    normal = (np.abs(truth) > 4 * TINY) & (np.abs(truth) < 1e38)
    n = shape[axis]
    np.testing.assert_allclose(got[normal], truth[normal], rtol=2 * n * 2.0 ** -24)


def _through_denormals(rng, n=40):
    """A row whose float64 running product is below float32's smallest normal at
    index 38 and normal again at 39 (a factor of 8 there)."""
    x = np.empty(n)
    x[:32] = 2.0 ** -3 * rng.uniform(1.0, 1.03, 32) * rng.choice([-1.0, 1.0], 32)
    x[32:39] = 2.0 ** -4.5 * rng.choice([-1.0, 1.0], 7)
    x[39] = 8.0
    x[40:] = rng.uniform(0.9, 1.1, n - 40)
    x = x.astype(np.float32)
    truth = np.cumprod(x.astype(np.float64))
    assert abs(truth[38]) < TINY < abs(truth[39]) < 1e-30      # the construction holds
    return x, truth


def test_cumprod_product_through_denormal_range(rng):
    x, truth = _through_denormals(rng)
    x = np.stack([x, x[::-1]])
    got = np.asarray(_cumprod_kernel(x.shape, 1, False)(x))
    want = np.asarray(jax.jit(lambda v: lax.cumprod(v, axis=1))(x))
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    # index 39: a normal float32 in float64 and in XLA; a running product gave 0
    assert got[0, 39] != 0
    np.testing.assert_allclose(got[0, 39], truth[39], rtol=40 * 2.0 ** -24)
    rev = np.asarray(_cumprod_kernel(x.shape, 1, True)(x))
    want_rev = np.asarray(jax.jit(lambda v: lax.cumprod(v, axis=1, reverse=True))(x))
    np.testing.assert_array_equal(rev.view(np.uint32), want_rev.view(np.uint32))
    np.testing.assert_allclose(rev[1, 0], truth[39], rtol=40 * 2.0 ** -24)


def test_cumprod_bfloat16_through_denormal_range(rng):
    # bfloat16 has float32's exponent range: the probe's triton-cumprod_bf16 case
    x, _ = _through_denormals(rng)
    xs = jnp.asarray(np.stack([x, x]), jnp.bfloat16)
    got = np.asarray(_cumprod_kernel(xs.shape, 1, False, jnp.bfloat16)(xs), np.float64)
    want = np.asarray(jax.jit(lambda v: lax.cumprod(v, axis=1))(xs), np.float64)
    truth = np.cumprod(np.asarray(xs, np.float64), axis=1)
    assert abs(truth[0, 38]) < TINY < abs(truth[0, 39])
    assert got[0, 39] != 0
    eps = float(jnp.finfo(jnp.bfloat16).eps)
    normal = np.abs(truth) > 4 * TINY
    np.testing.assert_allclose(got[normal], truth[normal], rtol=40 * eps)
    np.testing.assert_allclose(got, want, rtol=8 * eps, atol=0)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumprod_16_bit_matches_float64(rng, dtype, reverse):
    x = rng.uniform(0.8, 1.25, (4, 100)) * rng.choice([-1.0, 1.0], (4, 100))
    xs = jnp.asarray(x, dtype)
    got = np.asarray(_cumprod_kernel(xs.shape, 1, reverse, dtype)(xs), np.float64)
    truth = _f64_cumprod(xs, 1, reverse)
    # 16-bit products round at every step in XLA; here bfloat16 is computed in float32
    # and rounded once, float16 rounds at every step
    np.testing.assert_allclose(got, truth, rtol=100 * float(jnp.finfo(dtype).eps))
