"""Typed PRNG key arrays as kernel operands, values and outputs: a threefry
key (``jax.random.key``) and a Pallas key (``pltpu.to_pallas_key``) on the
built-in interpreter, in TPU interpret mode, and compiled for v5e.

A threefry key's samples inside a kernel are JAX's: equal to XLA's
``jax.random`` outside any kernel and to JAX's Pallas in interpret mode.
A Pallas key draws from the core's PRNG, which the interpreters stand in for
with a threefry stream keyed by the key's words (see keyed_random.py); JAX's
own interpret modes cannot run ``sample_block`` at all (checked below), so
there the reference is the same kernel given the key's words (uint32), which
the tests of test_keyed_random.py check further, and compiled for v5e ours
and JAX's both build."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu

MODES = [pytest.param(True, id="builtin"), pytest.param("tpu", id="tpu_interpret")]
BLOCK, ROWS = (8, 128), 32


def _interpret(mode):
    return pltpu.InterpretParams() if mode == "tpu" else mode


def _seed():
    return int(np.random.default_rng().integers(0, 2**31 - 1))


# --- a threefry key -----------------------------------------------------------------------

def _threefry_program(Pl, T, key_space=None, interpret=False, compiler_params=None):
    """out = x + uniform(fold_in(key, i)) - normal(fold_in(key, i)) per row block i,
    the key a typed operand (in VMEM by default; JAX's Mosaic lowering wants it there)."""
    def kernel(key_ref, x_ref, o_ref):
        key = jax.random.fold_in(key_ref[...], Pl.program_id(0))
        k1, k2 = jax.random.fold_in(key, 1), jax.random.fold_in(key, 2)  # Mosaic: no split
        o_ref[...] = (x_ref[...] + jax.random.uniform(k1, o_ref.shape)
                      - jax.random.normal(k2, o_ref.shape))
    key_spec = Pl.BlockSpec(memory_space=key_space) if key_space is not None else \
        Pl.BlockSpec()
    kw = {} if compiler_params is None else dict(compiler_params=compiler_params)
    return lambda key, x: Pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(x.shape, jnp.float32), grid=(ROWS // BLOCK[0],),
        in_specs=[key_spec, Pl.BlockSpec(BLOCK, lambda i: (i, 0))],
        out_specs=Pl.BlockSpec(BLOCK, lambda i: (i, 0)), interpret=interpret, **kw)(key, x)


def _threefry_reference(key, x):
    """The same samples drawn by XLA outside any kernel, added in float64."""
    rows = []
    for i in range(ROWS // BLOCK[0]):
        k1, k2 = (jax.random.fold_in(jax.random.fold_in(key, i), j) for j in (1, 2))
        rows.append(np.asarray(jax.random.uniform(k1, BLOCK), np.float64)
                    - np.asarray(jax.random.normal(k2, BLOCK), np.float64))
    return np.asarray(x, np.float64) + np.concatenate(rows)


@pytest.mark.parametrize("space", [None, "smem"], ids=["vmem_block", "smem"])
@pytest.mark.parametrize("mode", MODES)
def test_threefry_key_operand_matches_xla_and_jax(mode, space):
    from jax.experimental import pallas as jpl
    key = jax.random.key(_seed())
    x = np.random.default_rng().standard_normal((ROWS, BLOCK[1])).astype(np.float32)
    ours = np.asarray(jax.jit(_threefry_program(
        pl, pltpu, pltpu.SMEM if space else None, _interpret(mode)))(key, x))
    np.testing.assert_allclose(ours, _threefry_reference(key, x), rtol=1e-6, atol=1e-6)
    # JAX's Pallas (interpret=True runs key operands; its TPU interpret mode cannot)
    from jax.experimental.pallas import tpu as jpltpu
    theirs = np.asarray(jax.jit(_threefry_program(
        jpl, jpltpu, jpltpu.SMEM if space else None, True))(key, x))
    np.testing.assert_array_equal(ours, theirs)


def test_threefry_key_operand_compiles_for_v5e_as_jax_does(aot_compile):
    from jax.experimental import pallas as jpl
    from jax.experimental.pallas import tpu as jpltpu
    key = jax.random.key(0)
    x = jnp.zeros((ROWS, BLOCK[1]), jnp.float32)
    for Pl, T, params in ((pl, pltpu, pltpu.CompilerParams()), (jpl, jpltpu, None)):
        _, text = aot_compile(_threefry_program(Pl, T, compiler_params=params), key, x)
        assert "tpu_custom_call" in text


@pytest.mark.parametrize("mode", MODES)
def test_key_output_and_key_values(mode):
    """Keys made, split and folded inside the kernel, written to a key output."""
    seeds = np.random.default_rng().integers(0, 2**31 - 1, (4,)).astype(np.int32)

    def kernel(seed_ref, key_ref, o_ref):
        i = pl.program_id(0)
        key = jax.random.fold_in(key_ref[...], i)
        o_ref[...] = jax.random.split(jax.random.fold_in(key, seed_ref[i]), 2)[1][None]
    key = jax.random.key(_seed())
    out = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((4,), key.dtype), grid=(4,),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec((), lambda i: ())],
        out_specs=pl.BlockSpec((1,), lambda i: (i,)),
        interpret=_interpret(mode))(jnp.asarray(seeds), key)
    assert out.dtype == key.dtype and out.shape == (4,)
    want = [jax.random.split(jax.random.fold_in(jax.random.fold_in(key, i), int(s)), 2)[1]
            for i, s in enumerate(seeds)]
    np.testing.assert_array_equal(np.asarray(jax.random.key_data(out)),
                                  np.stack([np.asarray(jax.random.key_data(k)) for k in want]))


# --- a Pallas key ---------------------------------------------------------------------------

TOTAL = (16, 256)


def _sample_program(Pl, T, sampler=jax.random.uniform, interpret=False, compiler_params=None,
                    as_words=False):
    """A (16, 256) array drawn by sample_block over a (2, 2) grid of (8, 128)
    blocks, tiles of (8, 128); the key in SMEM (typed, or its words)."""
    def kernel(key_ref, o_ref):
        key = key_ref if as_words else key_ref[...]
        o_ref[...] = T.sample_block(sampler, key, block_size=BLOCK, tile_size=BLOCK,
                                    total_size=TOTAL)
    kw = {} if compiler_params is None else dict(compiler_params=compiler_params)
    return lambda key: Pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(TOTAL, jnp.float32), grid=(2, 2),
        in_specs=[Pl.BlockSpec(memory_space=T.SMEM)],
        out_specs=Pl.BlockSpec(BLOCK, lambda i, j: (i, j)), interpret=interpret, **kw)(key)


@pytest.mark.parametrize("sampler", [jax.random.uniform, jax.random.normal],
                         ids=["uniform", "normal"])
@pytest.mark.parametrize("mode", MODES)
def test_sample_block_with_a_pallas_key_operand(mode, sampler):
    key = pltpu.to_pallas_key(jax.random.key(_seed()))
    typed = np.asarray(jax.jit(_sample_program(pl, pltpu, sampler, _interpret(mode)))(key))
    words = np.asarray(jax.jit(_sample_program(pl, pltpu, sampler, _interpret(mode),
                                               as_words=True))(jax.random.key_data(key)))
    np.testing.assert_array_equal(typed, words)
    # the interpreters' stand-in stream is the same on both
    other = True if mode == "tpu" else pltpu.InterpretParams()
    np.testing.assert_array_equal(
        typed, np.asarray(jax.jit(_sample_program(pl, pltpu, sampler, other))(key)))
    # a sample, not a constant: 4096 values, moments within 6 sigma
    n = typed.size
    if sampler is jax.random.uniform:
        assert typed.min() >= 0.0 and typed.max() <= 1.0
        assert abs(typed.mean() - 0.5) < 6 * np.sqrt(1 / 12 / n)
    else:
        assert abs(typed.mean()) < 6 / np.sqrt(n) and abs(typed.var() - 1) < 6 * np.sqrt(2 / n)


@pytest.mark.parametrize("mode", MODES)
def test_jax_random_on_a_pallas_key_in_a_kernel(mode):
    """jax.random.bits on a Pallas key draws the words sample_block's sampler
    gets for the same (folded) key."""
    key = pltpu.to_pallas_key(jax.random.key(_seed()))

    def kernel(key_ref, o_ref):
        o_ref[...] = jax.random.bits(jax.random.fold_in(key_ref[...], 3), BLOCK)

    out = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(BLOCK, jnp.uint32),
                         in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
                         interpret=_interpret(mode))(key)
    want = pl.pallas_call(
        lambda k_ref, o_ref: o_ref.__setitem__(..., pltpu.sample_block(
            jax.random.bits, k_ref[...], BLOCK, BLOCK, (32, 128), block_index=(3, 0))),
        out_shape=jax.ShapeDtypeStruct(BLOCK, jnp.uint32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)], interpret=_interpret(mode))(key)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(want))
    assert len(np.unique(np.asarray(out))) > 1000


def test_jax_interpret_modes_cannot_run_jax_sample_block():
    """Why the references above are ours (if this starts to pass, compare with JAX's)."""
    from jax.experimental import pallas as jpl
    from jax.experimental.pallas import tpu as jpltpu
    key = jpltpu.to_pallas_key(jax.random.key(0))
    for interpret in (True, jpltpu.InterpretParams()):
        with pytest.raises(Exception):
            jax.block_until_ready(_sample_program(jpl, jpltpu, interpret=interpret)(key))


def test_sample_block_with_a_pallas_key_compiles_for_v5e_as_jax_does(aot_compile):
    from jax.experimental import pallas as jpl
    from jax.experimental.pallas import tpu as jpltpu
    for Pl, T, params in ((pl, pltpu, pltpu.CompilerParams()), (jpl, jpltpu, None)):
        for sampler in (jax.random.uniform, jax.random.normal):
            key = T.to_pallas_key(jax.random.key(0))
            _, text = aot_compile(_sample_program(Pl, T, sampler, compiler_params=params), key)
            assert "tpu_custom_call" in text


@pytest.mark.skipif(jax.default_backend() != "tpu", reason="the hardware PRNG of a TPU chip")
def test_sample_block_on_tpu_matches_jax():
    from jax.experimental import pallas as jpl
    from jax.experimental.pallas import tpu as jpltpu
    seed = _seed()
    for sampler in (jax.random.uniform, jax.random.normal):
        ours = jax.jit(_sample_program(pl, pltpu, sampler))(
            pltpu.to_pallas_key(jax.random.key(seed)))
        theirs = jax.jit(_sample_program(jpl, jpltpu, sampler))(
            jpltpu.to_pallas_key(jax.random.key(seed)))
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


@pytest.mark.skipif(jax.default_backend() != "tpu", reason="runs on a TPU chip")
def test_threefry_key_operand_on_tpu_matches_xla():
    key = jax.random.key(_seed())
    x = np.random.default_rng().standard_normal((ROWS, BLOCK[1])).astype(np.float32)
    ours = np.asarray(jax.jit(functools.partial(_threefry_program(pl, pltpu)))(key, x))
    np.testing.assert_allclose(ours, _threefry_reference(key, x), rtol=1e-5, atol=1e-5)


# --- prng_seed with a Pallas key --------------------------------------------------------------

def _seeded_by_key_program(Pl, T, interpret=False, compiler_params=None):
    """pltpu.prng_seed(key) then stateful samplers: the key's two words seed the PRNG."""
    def kernel(key_ref, n_ref, u_ref):
        T.prng_seed(key_ref[...])
        n_ref[...] = T.stateful_normal(n_ref.shape)
        u_ref[...] = T.stateful_uniform(u_ref.shape, minval=-1.0, maxval=4.0)
    kw = {} if compiler_params is None else dict(compiler_params=compiler_params)
    f32 = jax.ShapeDtypeStruct(BLOCK, jnp.float32)
    return lambda key: Pl.pallas_call(kernel, out_shape=(f32, f32),
                                      in_specs=[Pl.BlockSpec(memory_space=T.SMEM)],
                                      interpret=interpret, **kw)(key)


def test_prng_seed_with_a_pallas_key_seeds_with_its_words():
    key = pltpu.to_pallas_key(jax.random.key(_seed()))
    by_key = jax.jit(_seeded_by_key_program(pl, pltpu, pltpu.InterpretParams()))(key)

    def kernel(w_ref, n_ref, u_ref):
        pltpu.prng_seed(w_ref[0, 0], w_ref[0, 1])
        n_ref[...] = pltpu.stateful_normal(n_ref.shape)
        u_ref[...] = pltpu.stateful_uniform(u_ref.shape, minval=-1.0, maxval=4.0)
    f32 = jax.ShapeDtypeStruct(BLOCK, jnp.float32)
    words = jax.lax.bitcast_convert_type(jax.random.key_data(key), jnp.int32)
    by_words = pl.pallas_call(kernel, out_shape=(f32, f32),
                              in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
                              interpret=pltpu.InterpretParams())(words)
    for a, b in zip(by_key, by_words):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    u = np.asarray(by_key[1])
    assert u.min() >= -1.0 and u.max() <= 4.0 and len(np.unique(u)) > 900


def test_prng_seed_with_a_pallas_key_compiles_for_v5e_as_jax_does(aot_compile):
    from jax.experimental import pallas as jpl
    from jax.experimental.pallas import tpu as jpltpu
    for Pl, T, params in ((pl, pltpu, pltpu.CompilerParams()), (jpl, jpltpu, None)):
        key = T.to_pallas_key(jax.random.key(0))
        _, text = aot_compile(_seeded_by_key_program(Pl, T, compiler_params=params), key)
        assert "tpu_custom_call" in text


@pytest.mark.skipif(jax.default_backend() != "tpu", reason="the hardware PRNG of a TPU chip")
def test_prng_seed_with_a_pallas_key_on_tpu_matches_jax():
    from jax.experimental import pallas as jpl
    from jax.experimental.pallas import tpu as jpltpu
    seed = _seed()
    ours = jax.jit(_seeded_by_key_program(pl, pltpu))(pltpu.to_pallas_key(jax.random.key(seed)))
    theirs = jax.jit(_seeded_by_key_program(jpl, jpltpu))(
        jpltpu.to_pallas_key(jax.random.key(seed)))
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_keys_in_the_memory_mosaic_cannot_read_them_from_are_refused_by_name(aot_compile):
    """JAX's lowering loads a Pallas key's words from SMEM and a threefry key's
    data as a vector (not from SMEM): refused before Mosaic, naming the operand."""
    from pallas_frontend.backend_api import BackendCapabilityError
    x = jnp.zeros((ROWS, BLOCK[1]), jnp.float32)
    with pytest.raises(BackendCapabilityError, match="from SMEM \\(JAX's lowering"):
        aot_compile(_threefry_program(pl, pltpu, pltpu.SMEM,
                                      compiler_params=pltpu.CompilerParams()),
                    jax.random.key(0), x)

    def kernel(key_ref, o_ref):
        o_ref[...] = jax.random.uniform(key_ref[...], o_ref.shape)
    with pytest.raises(BackendCapabilityError, match="from SMEM only"):
        aot_compile(lambda k: pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct(BLOCK, jnp.float32),
            compiler_params=pltpu.CompilerParams())(k),
            pltpu.to_pallas_key(jax.random.key(0)))
