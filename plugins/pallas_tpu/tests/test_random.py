"""``stateful_{bits,uniform,normal,bernoulli}`` in TPU interpret mode (its
PRNG stream is this backend's threefry substitute, see interpret_mode.py)
and AOT-compiled for v5e.

Statistical bounds: every moment check allows 6 standard deviations of its
estimator over N = 32768 samples (a false failure has probability < 1e-8
per check); the standard deviations are stated next to each check.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu

INTERPRET = pltpu.InterpretParams()
SHAPE = (256, 128)
N = SHAPE[0] * SHAPE[1]
SIGMAS = 6


@pytest.fixture
def rng():
    return np.random.default_rng()


def sampler_kernel(seed_ref, params_ref, bits_ref, u_ref, u2_ref, n_ref, b_ref):
    pltpu.prng_seed(seed_ref[0])
    shape = u_ref.shape
    bits_ref[...] = pltpu.stateful_bits(shape, jnp.int32)
    lo, hi, p = params_ref[0], params_ref[1], params_ref[2]
    u_ref[...] = pltpu.stateful_uniform(shape, minval=lo, maxval=hi)
    u2_ref[...] = pltpu.stateful_uniform(shape, minval=lo, maxval=hi)   # a fresh draw
    n_ref[...] = pltpu.stateful_normal(shape)
    b_ref[...] = pltpu.stateful_bernoulli(p, shape).astype(jnp.int32)


def samples(seed, params, interpret=False):
    """seed: int32[1]; params: float32[3] = (minval, maxval, p)."""
    smem = pl.BlockSpec(memory_space=pltpu.SMEM)
    block = pl.BlockSpec(SHAPE, lambda: (0, 0))
    f32, i32 = (jax.ShapeDtypeStruct(SHAPE, t) for t in (jnp.float32, jnp.int32))
    return pl.pallas_call(
        sampler_kernel, out_shape=[i32, f32, f32, f32, i32],
        in_specs=[smem, smem], out_specs=[block] * 5,
        compiler_params=pltpu.CompilerParams(), interpret=interpret)(seed, params)


# seed and params are operands: one compile serves every draw of the module
_interpreted_samples = jax.jit(functools.partial(samples, interpret=INTERPRET))


def _run(seed, lo=0.0, hi=1.0, p=0.5):
    outs = _interpreted_samples(jnp.asarray([seed], jnp.int32),
                                jnp.asarray([lo, hi, p], jnp.float32))
    return [np.asarray(o) for o in outs]


def _seed(rng):
    return int(rng.integers(0, 2**31 - 2))


def test_samplers_are_deterministic_per_seed_and_differ_across_seeds(rng):
    s = _seed(rng)
    a, b, c = _run(s), _run(s), _run(s + 1)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    bits_a, u_a, u2_a, n_a, _ = a
    bits_c, u_c, _, n_c, _ = c
    # Equal 32-bit words (or 23-bit floats) by chance: ~N * 2**-23 of them.
    assert np.mean(bits_a == bits_c) < 0.001
    assert np.mean(u_a == u_c) < 0.001 and np.mean(n_a == n_c) < 0.001
    assert np.mean(u_a == u2_a) < 0.001          # two calls, two draws


def test_uniform_range_and_moments(rng):
    lo = float(rng.uniform(-5, 0))
    hi = lo + float(rng.uniform(0.5, 10))
    _, u, u2, _, _ = _run(_seed(rng), lo, hi)
    lo32, hi32 = np.float32(lo), np.float32(hi)
    u = np.concatenate([u, u2]).astype(np.float64)
    n, width = u.size, float(hi32) - float(lo32)
    assert u.min() >= lo32 and u.max() < hi32
    # mean: sd = width / sqrt(12 n); variance: sd = width**2 sqrt((1/80 - 1/144) / n)
    assert abs(u.mean() - (float(lo32) + float(hi32)) / 2) < SIGMAS * width / np.sqrt(12 * n)
    assert abs(u.var() - width**2 / 12) < SIGMAS * width**2 * np.sqrt((1 / 80 - 1 / 144) / n)
    # 16 equal bins, each holding 1/16: binomial sd sqrt(p (1 - p) / n)
    hist = np.histogram(u, bins=16, range=(float(lo32), float(hi32)))[0] / n
    np.testing.assert_allclose(hist, 1 / 16, atol=SIGMAS * np.sqrt(1 / 16 * 15 / 16 / n))


def test_uniform_stays_below_maxval_where_rounding_reaches_it(rng):
    # [1, 1 + 2**-20) holds 8 float32s; unclamped, u * 2**-20 + 1 rounds up
    # to maxval for u > 1 - 2**-4, i.e. for ~1/16 of the samples.
    hi = 1.0 + 2.0**-20
    _, u, _, _, _ = _run(_seed(rng), 1.0, hi)
    assert u.min() >= 1.0 and u.max() < np.float32(hi)
    assert len(np.unique(u)) == 8


def test_normal_moments_and_tails(rng):
    _, _, _, z, _ = _run(_seed(rng))
    z = z.astype(np.float64)
    assert np.all(np.isfinite(z))
    # mean: sd 1/sqrt(N); variance: sd sqrt(2/N); 4th moment (3): sd sqrt(96/N)
    assert abs(z.mean()) < SIGMAS / np.sqrt(N)
    assert abs(z.var() - 1) < SIGMAS * np.sqrt(2 / N)
    assert abs(np.mean(z**4) - 3) < SIGMAS * np.sqrt(96 / N)
    # P(|z| > 2) = 0.0455: binomial sd sqrt(p (1 - p) / N)
    p2 = 0.04550026
    assert abs(np.mean(np.abs(z) > 2) - p2) < SIGMAS * np.sqrt(p2 * (1 - p2) / N)
    # erf_inv of |v| <= 1 - 2**-23 reaches about 5.3 sigma, not beyond
    assert np.abs(z).max() < 5.5


def test_bernoulli_frequency(rng):
    p = float(rng.uniform(0.1, 0.9))
    _, _, _, _, b = _run(_seed(rng), p=p)
    assert set(np.unique(b)) <= {0, 1}
    assert abs(b.mean() - p) < SIGMAS * np.sqrt(p * (1 - p) / N)


def test_bits_are_fair_coins(rng):
    bits, *_ = _run(_seed(rng))
    per_bit = (bits.view(np.uint32)[..., None] >> np.arange(32, dtype=np.uint32)) & 1
    # each bit position: mean of N fair coins, sd 0.5 / sqrt(N)
    np.testing.assert_allclose(per_bit.reshape(N, 32).mean(0), 0.5,
                               atol=SIGMAS * 0.5 / np.sqrt(N))


def test_unsupported_dtypes_are_refused():
    with pytest.raises(ValueError, match="stateful_uniform: dtype bfloat16"):
        pltpu.stateful_uniform((8, 128), jnp.bfloat16)
    with pytest.raises(ValueError, match="stateful_bits: dtype uint8"):
        pltpu.stateful_bits((8, 128), jnp.uint8)


def test_samplers_aot(aot_compile):
    compiled, text = aot_compile(samples, jnp.zeros((1,), jnp.int32),
                                 jnp.asarray([0.0, 1.0, 0.5], jnp.float32))
    assert compiled is not None and "tpu_custom_call" in text


def uint32_kernel(seed_ref, o_ref):
    pltpu.prng_seed(seed_ref[0])
    o_ref[...] = pltpu.stateful_bits(o_ref.shape)


def uint32_bits(seed, interpret=False):
    return pl.pallas_call(
        uint32_kernel, out_shape=jax.ShapeDtypeStruct(SHAPE, jnp.uint32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
        out_specs=pl.BlockSpec(SHAPE, lambda: (0, 0)),
        compiler_params=pltpu.CompilerParams(), interpret=interpret)(seed)


def test_uint32_bits_are_the_int32_bits(rng):
    seed = jnp.asarray([_seed(rng)], jnp.int32)
    got = np.asarray(uint32_bits(seed, interpret=INTERPRET))
    assert got.dtype == np.uint32
    want = np.asarray(_run(int(seed[0]))[0]).view(np.uint32)
    np.testing.assert_array_equal(got, want)


def test_uint32_bits_aot(aot_compile):
    compiled, _ = aot_compile(uint32_bits, jnp.zeros((1,), jnp.int32))
    assert compiled is not None
