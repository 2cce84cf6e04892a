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


def test_uniform_on_a_narrow_range_stays_in_it(rng):
    # [1, 1 + 2**-20] holds 9 float32s; as JAX's, u * 2**-20 + 1 may round up
    # to maxval (for u > 1 - 2**-4, ~1/16 of the samples)
    hi = 1.0 + 2.0**-20
    _, u, _, _, _ = _run(_seed(rng), 1.0, hi)
    assert u.min() >= 1.0 and u.max() <= np.float32(hi)
    assert 8 <= len(np.unique(u)) <= 9


def test_uniform_with_equal_bounds_returns_the_bound(rng):
    for bound in (2.0, -0.75, float(rng.uniform(-10, 10))):
        _, u, u2, _, _ = _run(_seed(rng), bound, bound)
        np.testing.assert_array_equal(u, np.float32(bound))
        np.testing.assert_array_equal(u2, np.float32(bound))


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


# --- the same values as JAX's pltpu.stateful_* from the same words ---------------------------
# JAX's stateful samplers are jax.random's samplers over a key whose random_bits
# is the core's PRNG (jax/_src/pallas/mosaic/random.py). JAX's TPU interpret
# mode cannot run them (its _uniform is a jit, and the PRNG gives zeros there),
# so the reference is jax.random's sampler itself over a key whose random_bits
# returns the words our kernel drew: JAX's code path, given our words.

def _given_words_impl(shape):
    from jax.extend import random as jex_random

    def random_bits(key, bit_width, bits_shape):
        assert bit_width == 32 and tuple(bits_shape) == tuple(shape)
        return jax.lax.bitcast_convert_type(key, jnp.uint32)
    return jex_random.define_prng_impl(
        key_shape=tuple(shape), seed=lambda s: jnp.zeros(shape, jnp.uint32), split=None,
        random_bits=random_bits, fold_in=None, name=f"given_words{shape}", tag="given")


def _first_draw(seed, sample, shape=SHAPE, dtype=jnp.float32):
    """What ``sample(shape)`` returns as the first draw after ``prng_seed(seed)``."""
    def kernel(seed_ref, o_ref):
        pltpu.prng_seed(seed_ref[0])
        o_ref[...] = sample(o_ref.shape).astype(o_ref.dtype)
    return np.asarray(pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(shape, dtype),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)], interpret=INTERPRET)(
            jnp.asarray([seed], jnp.int32)))


def _jax_sampler_key(seed, shape=SHAPE):
    words = _first_draw(seed, pltpu.stateful_bits, shape, jnp.uint32)
    return jax.random.wrap_key_data(jnp.asarray(words), impl=_given_words_impl(shape))


def test_stateful_normal_is_jax_normal_of_the_same_words(rng):
    seed = _seed(rng)
    ours = _first_draw(seed, pltpu.stateful_normal)
    theirs = np.asarray(jax.random.normal(_jax_sampler_key(seed), SHAPE))
    np.testing.assert_array_equal(ours, theirs)
    assert np.all(np.isfinite(ours))


def test_stateful_uniform_is_jax_uniform_of_the_same_words(rng):
    seed = _seed(rng)
    lo = float(rng.uniform(-5, 0))
    for hi in (lo + float(rng.uniform(0.5, 10)), lo):      # equal bounds too
        ours = _first_draw(seed, lambda s: pltpu.stateful_uniform(s, minval=lo, maxval=hi))
        theirs = np.asarray(jax.random.uniform(_jax_sampler_key(seed), SHAPE, minval=lo,
                                               maxval=hi))
        np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("mode", ["low", "high"])
def test_stateful_bernoulli_is_jax_bernoulli_of_the_same_words(rng, mode):
    seed = _seed(rng)
    p = float(rng.uniform(0.05, 0.95)) if mode == "low" else 1e-3
    ours = _first_draw(seed, lambda s: pltpu.stateful_bernoulli(p, s, mode=mode), dtype=jnp.int32)
    words_shape = SHAPE if mode == "low" else (2, *SHAPE)
    theirs = np.asarray(jax.random.bernoulli(_jax_sampler_key(seed, words_shape), p, SHAPE,
                                             mode=mode)).astype(np.int32)
    np.testing.assert_array_equal(ours, theirs)


def test_stateful_bits_are_jax_bits_of_the_same_words(rng):
    seed = _seed(rng)
    ours = _first_draw(seed, pltpu.stateful_bits, dtype=jnp.uint32)
    theirs = np.asarray(jax.random.bits(_jax_sampler_key(seed), SHAPE, jnp.uint32))
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.skipif(jax.default_backend() != "tpu", reason="the hardware PRNG of a TPU chip")
def test_stateful_samplers_on_tpu_match_jax():
    from jax.experimental import pallas as jpl
    from jax.experimental.pallas import tpu as jpltpu
    seed = jnp.asarray([12345], jnp.int32)

    def program(Pl, T):
        def kernel(seed_ref, u_ref, e_ref, n_ref, b_ref, h_ref, w_ref):
            T.prng_seed(seed_ref[0])
            u_ref[...] = T.stateful_uniform(u_ref.shape, minval=-2.0, maxval=3.0)
            e_ref[...] = T.stateful_uniform(e_ref.shape, minval=2.0, maxval=2.0)
            n_ref[...] = T.stateful_normal(n_ref.shape)
            b_ref[...] = T.stateful_bernoulli(0.3, b_ref.shape).astype(jnp.int32)
            h_ref[...] = T.stateful_bernoulli(1e-3, h_ref.shape, mode="high").astype(jnp.int32)
            w_ref[...] = T.stateful_bits(w_ref.shape)
        f32, i32 = (jax.ShapeDtypeStruct(SHAPE, t) for t in (jnp.float32, jnp.int32))
        return Pl.pallas_call(
            kernel, out_shape=[f32, f32, f32, i32, i32, jax.ShapeDtypeStruct(SHAPE, jnp.uint32)],
            in_specs=[Pl.BlockSpec(memory_space=T.SMEM)])
    ours = jax.jit(program(pl, pltpu))(seed)
    theirs = jax.jit(program(jpl, jpltpu))(seed)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(np.asarray(ours[1]), np.float32(2.0))
