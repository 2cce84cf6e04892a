"""``to_pallas_key`` and ``sample_block`` (JAX's pltpu names): the key words are
JAX's; the blocks are invariant to block shape and grid order on the built-in
interpreter and in TPU interpret mode (as JAX's block-invariance test asks on a
TPU), equal to plain ``jax.random`` on the same key outside any kernel, and
distributed as JAX's own samplers on the same key; AOT-compiled for v5e.

Statistical bounds: 6 standard deviations of each estimator (a false failure
has probability < 1e-8 per check); the two-sample Kolmogorov-Smirnov bound is
the one for alpha = 1e-8.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import tpu as jax_pltpu

import pallas_frontend as pl
import pallas_tpu as pltpu
from pallas_tpu import keyed_random

TOTAL = (64, 512)
TILE = (16, 128)
INTERPRETERS = {"builtin": True, "tpu_interpret": pltpu.InterpretParams()}


@pytest.fixture
def key():
    return jax.random.key(int(np.random.default_rng().integers(2**31)))


def _call(sampler, words, block, index_map, grid, interpret, dtype=jnp.float32, **kwargs):
    def body(key_ref, o_ref):
        o_ref[...] = pltpu.sample_block(
            sampler, key_ref, block_size=o_ref.shape, tile_size=TILE, total_size=TOTAL,
            block_index=index_map(pl.program_id(0), pl.program_id(1)), **kwargs)
    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(TOTAL, dtype),
                          in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
                          out_specs=pl.BlockSpec(block, index_map), grid=grid,
                          interpret=interpret)(words)


def _reference(sampler, pallas_key, **kwargs):
    """Tile by tile with plain jax.random on the same Pallas key, no kernel."""
    rows = []
    tiles = (TOTAL[0] // TILE[0], TOTAL[1] // TILE[1])
    with keyed_random.draws_outside_kernels():
        for i in range(tiles[0]):
            rows.append(jnp.concatenate(
                [sampler(jax.random.fold_in(pallas_key, i * tiles[1] + j), shape=TILE, **kwargs)
                 for j in range(tiles[1])], axis=1))
        return np.asarray(jnp.concatenate(rows, axis=0))


@pytest.mark.parametrize("shape", [(1,), (3, 5)])
def test_a_pallas_key_outside_a_kernel_is_refused_as_jax_refuses_it(shape, key):
    # JAX's tpu_pallas_random_test expects NotImplementedError matching this pattern
    with pytest.raises(NotImplementedError, match="MLIR translation rule .* not found") as e:
        jax.random.uniform(pltpu.to_pallas_key(key), shape=shape)
    assert "only inside a kernel" in str(e.value)
    with pytest.raises(NotImplementedError, match="MLIR translation rule .* not found"):
        jax.jit(lambda k: jax.random.bits(k, shape))(pltpu.to_pallas_key(key))


@pytest.mark.parametrize("legacy", [False, True])
def test_to_pallas_key_words_are_jaxs(legacy, key):
    k = jax.random.PRNGKey(7) if legacy else key
    ours, theirs = pltpu.to_pallas_key(k), jax_pltpu.to_pallas_key(k)
    assert jnp.issubdtype(ours.dtype, jax.dtypes.prng_key) and ours.shape == ()
    np.testing.assert_array_equal(jax.random.key_data(ours), jax.random.key_data(theirs))


def test_to_pallas_key_of_a_batch_is_the_batch_of_keys(key):
    keys = jax.random.split(key, 5)
    batched = jax.random.key_data(pltpu.to_pallas_key(keys))
    assert batched.shape == (5, 1, 2)
    np.testing.assert_array_equal(batched, jax.random.key_data(jax.vmap(pltpu.to_pallas_key)(keys)))
    np.testing.assert_array_equal(batched, jax.random.key_data(jax_pltpu.to_pallas_key(keys)))


@pytest.mark.parametrize("interpreter", INTERPRETERS)
def test_block_invariance(interpreter, key):
    words = jax.random.key_data(pltpu.to_pallas_key(key))
    interpret = INTERPRETERS[interpreter]
    small = _call(jax.random.uniform, words, (16, 128), lambda i, j: (i, j), (4, 4), interpret)
    large = _call(jax.random.uniform, words, (32, 256), lambda i, j: (j, i), (2, 2), interpret)
    np.testing.assert_array_equal(small, large)


@pytest.mark.parametrize("sampler, dtype, kwargs", [
    (jax.random.uniform, jnp.float32, dict(minval=-2.0, maxval=3.0)),
    (jax.random.normal, jnp.float32, {}),
    (jax.random.bits, jnp.uint32, {}),
    (jax.random.bernoulli, jnp.bool_, dict(p=0.3)),
])
def test_equals_plain_jax_random_on_the_same_key_on_both_interpreters(sampler, dtype, kwargs, key):
    pallas_key = pltpu.to_pallas_key(key)
    words = jax.random.key_data(pallas_key)
    expected = _reference(sampler, pallas_key, **kwargs)
    for interpret in INTERPRETERS.values():
        got = _call(sampler, words, (32, 256), lambda i, j: (i, j), (2, 2), interpret,
                    dtype=dtype, **kwargs)
        np.testing.assert_array_equal(got, expected)


def _ks_statistic(a, b):
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    return np.max(np.abs(np.searchsorted(a, grid, side="right") / a.size
                         - np.searchsorted(b, grid, side="right") / b.size))


@pytest.mark.parametrize("sampler, mean, var", [
    (jax.random.uniform, 0.5, 1 / 12), (jax.random.normal, 0.0, 1.0)])
def test_statistics_match_jax_samplers_on_the_same_key(sampler, mean, var, key):
    words = jax.random.key_data(pltpu.to_pallas_key(key))
    ours = np.asarray(_call(sampler, words, (16, 128), lambda i, j: (i, j), (4, 4), True),
                      np.float64).ravel()
    jaxs = np.asarray(sampler(key, TOTAL), np.float64).ravel()
    n = ours.size
    fourth = 1 / 80 if sampler is jax.random.uniform else 3.0   # E[(x - mean)^4]
    assert abs(ours.mean() - mean) < 6 * np.sqrt(var / n)
    assert abs(ours.var() - var) < 6 * np.sqrt((fourth - var ** 2) / n)
    ks_bound = np.sqrt(-np.log(1e-8 / 2) / 2) * np.sqrt(2 / n)
    assert _ks_statistic(ours, jaxs) < ks_bound
    # and not a copy of JAX's stream (that one is drawn with another generator)
    assert not np.array_equal(ours, jaxs)


def test_traced_sampler_arguments(key):
    words = jax.random.key_data(pltpu.to_pallas_key(key))
    bounds = jnp.array([-1.5, 4.0], jnp.float32)

    def body(key_ref, b_ref, o_ref):
        o_ref[...] = pltpu.sample_block(jax.random.uniform, key_ref, o_ref.shape, TILE, TOTAL,
                                        minval=b_ref[0], maxval=b_ref[1])
    smem = pl.BlockSpec(memory_space=pltpu.SMEM)
    got = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(TOTAL, jnp.float32),
                         in_specs=[smem, smem], out_specs=pl.BlockSpec(TILE, lambda i, j: (i, j)),
                         grid=(4, 4), interpret=True)(words, bounds)
    expected = _reference(jax.random.uniform, pltpu.to_pallas_key(key), minval=-1.5, maxval=4.0)
    np.testing.assert_array_equal(got, expected)


def test_key_as_words_or_scalars_gives_the_same_block(key):
    words = jax.random.key_data(pltpu.to_pallas_key(key))

    def body(key_ref, a_ref, b_ref):
        a_ref[...] = pltpu.sample_block(jax.random.normal, key_ref[...], TILE, TILE, TOTAL, (1, 2))
        b_ref[...] = pltpu.sample_block(jax.random.normal, (key_ref[0, 0], key_ref[0, 1]),
                                        TILE, TILE, TOTAL, (1, 2))
    out = jax.ShapeDtypeStruct(TILE, jnp.float32)
    a, b = pl.pallas_call(body, out_shape=(out, out), interpret=True)(words)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, _reference(jax.random.normal, pltpu.to_pallas_key(key))[16:32, 256:384])


def test_bad_sizes_and_wide_draws_are_refused(key):
    words = jax.random.key_data(pltpu.to_pallas_key(key))
    with pytest.raises(ValueError, match="must divide"):
        pltpu.sample_block(jax.random.uniform, words, (16, 100), TILE, TOTAL, (0, 0))
    with pytest.raises(ValueError, match="same length"):
        pltpu.sample_block(jax.random.uniform, words, (16,), TILE, TOTAL, (0,))
    with pytest.raises(TypeError, match="global_key"):
        pltpu.sample_block(jax.random.uniform, jnp.zeros((3,), jnp.uint32), TILE, TILE, TOTAL,
                           (0, 0))
    with pytest.raises(NotImplementedError, match="cannot be split"):
        pltpu.sample_block(lambda k, shape: jax.random.uniform(jax.random.split(k)[0], shape),
                           words, TILE, TILE, TOTAL, (0, 0))


def test_sample_block_aot(aot_compile, key):
    words = jax.random.key_data(pltpu.to_pallas_key(key))

    def f(w):
        def body(key_ref, o_ref):
            o_ref[...] = pltpu.sample_block(jax.random.normal, key_ref, o_ref.shape, TILE, TOTAL)
        return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(TOTAL, jnp.float32),
                              in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
                              out_specs=pl.BlockSpec((32, 256), lambda i, j: (i, j)), grid=(2, 2),
                              compiler_params=pltpu.CompilerParams())(w)
    compiled, text = aot_compile(f, words)
    assert compiled is not None and "tpu_custom_call" in text
