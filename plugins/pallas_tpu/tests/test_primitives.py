"""The TPU primitives and the frontend ops the evaluator replays, each run in
TPU interpret mode against NumPy (float64) and AOT-compiled for v5e.

Tolerances: copies, selects and semaphore counts are exact; float32
arithmetic of one or two ops 1e-6 relative; ``reciprocal(approx=True)``
2**-8 relative (see ``test_reciprocal_approx``).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu

INTERPRET = pltpu.InterpretParams()
TILE = (8, 128)
F32 = dict(rtol=1e-6, atol=1e-6)


@pytest.fixture
def rng():
    return np.random.default_rng()


def _f32(rng, shape=TILE):
    return rng.standard_normal(shape).astype(np.float32)


def _tile_call(kernel, n_in, *, out_dtype=jnp.float32, scratch=(), interpret=False, **kw):
    """One (8, 128) tile in, one out, no grid."""
    spec = pl.BlockSpec(TILE, lambda: (0, 0))
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(TILE, out_dtype),
        in_specs=[spec] * n_in, out_specs=spec, scratch_shapes=list(scratch),
        compiler_params=pltpu.CompilerParams(), interpret=interpret, **kw)


def _aot(aot_compile, fn, *arrays):
    compiled, text = aot_compile(fn, *arrays)
    assert compiled is not None and "tpu_custom_call" in text
    return text


# --- masked load / store ---------------------------------------------------------------

def masked_kernel(x_ref, y_ref, o_ref):
    # The load keeps masked-in lanes and reads zero elsewhere (evaluate._load); the store's mask is kept.
    mask = x_ref[...] > y_ref[...]
    o_ref[...] = y_ref[...]
    # Masked-off lanes of a masked load are unspecified: select them away.
    x = pltpu.load(x_ref, mask=mask)
    pltpu.store(o_ref, jnp.where(mask, x * 2.0, 0.0), mask=mask)


def masked(x, y, interpret=False):
    return _tile_call(masked_kernel, 2, interpret=interpret)(x, y)


def test_masked_load_store_interpret(rng):
    x, y = _f32(rng), _f32(rng)
    got = np.asarray(masked(x, y, interpret=INTERPRET))
    want = np.where(x > y, 2.0 * x.astype(np.float64), y)
    assert 0 < (x > y).sum() < x.size
    np.testing.assert_allclose(got, want, **F32)


def test_masked_load_honours_its_mask(rng):
    """Masked-off lanes of pltpu.load read zero, not memory."""
    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = pltpu.load(x_ref, mask=x_ref[...] > y_ref[...])
    x, y = _f32(rng), _f32(rng)
    got = np.asarray(_tile_call(kernel, 2, interpret=INTERPRET)(x, y))
    np.testing.assert_array_equal(got, np.where(x > y, x, 0.0))


def test_masked_load_store_aot(aot_compile):
    z = jnp.zeros(TILE, jnp.float32)
    _aot(aot_compile, masked, z, z)


# --- hardware PRNG -----------------------------------------------------------------------

def prng_kernel(seed_ref, o_ref):
    pltpu.prng_seed(seed_ref[0])
    o_ref[...] = pltpu.prng_random_bits(o_ref.shape)


def random_bits(seed, rows=64, interpret=False):
    return pl.pallas_call(
        prng_kernel, out_shape=jax.ShapeDtypeStruct((rows, 128), jnp.int32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
        out_specs=pl.BlockSpec((rows, 128), lambda: (0, 0)),
        compiler_params=pltpu.CompilerParams(), interpret=interpret)(seed)


def _seed(s):
    return jnp.asarray([s], jnp.int32)


def test_prng_is_deterministic_per_seed_and_differs_across_seeds(rng):
    s = int(rng.integers(0, 2**31 - 1))
    a = np.asarray(random_bits(_seed(s), interpret=INTERPRET))
    b = np.asarray(random_bits(_seed(s), interpret=INTERPRET))
    c = np.asarray(random_bits(_seed(s + 1), interpret=INTERPRET))
    np.testing.assert_array_equal(a, b)
    assert np.mean(a == c) < 0.01


def test_prng_bits_look_uniform(rng):
    bits = np.asarray(random_bits(_seed(int(rng.integers(0, 2**31 - 1))), interpret=INTERPRET))
    n = bits.size                                    # 8192 words
    assert len(np.unique(bits)) > 0.99 * n           # 32-bit words: collisions are rare
    per_bit = (bits.view(np.uint32)[..., None] >> np.arange(32, dtype=np.uint32)) & 1
    # each bit is a fair coin: 6 standard deviations of a mean of n coins
    np.testing.assert_allclose(per_bit.reshape(n, 32).mean(0), 0.5, atol=6 * 0.5 / np.sqrt(n))
    u = (bits.view(np.uint32) >> 8).astype(np.float64) / 2**24
    np.testing.assert_allclose(np.histogram(u, bins=8, range=(0, 1))[0] / n, 1 / 8, atol=0.02)


def test_prng_aot(aot_compile):
    _aot(aot_compile, random_bits, _seed(0))


# --- reciprocal(approx=True) ----------------------------------------------------------------

def reciprocal_kernel(x_ref, o_ref, e_ref):
    o_ref[...] = pltpu.reciprocal(x_ref[...], approx=True)
    e_ref[...] = pltpu.reciprocal(x_ref[...])


def reciprocals(x, interpret=False):
    spec = pl.BlockSpec(TILE, lambda: (0, 0))
    return pl.pallas_call(
        reciprocal_kernel, out_shape=[jax.ShapeDtypeStruct(TILE, jnp.float32)] * 2,
        in_specs=[spec], out_specs=[spec, spec],
        compiler_params=pltpu.CompilerParams(), interpret=interpret)(x)


def test_reciprocal_approx(rng):
    # Away from 0: magnitudes in [0.1, 10), both signs.
    x = (rng.uniform(0.1, 10, TILE) * rng.choice([-1, 1], TILE)).astype(np.float32)
    approx, exact = (np.asarray(v) for v in reciprocals(x, interpret=INTERPRET))
    want = 1.0 / x.astype(np.float64)
    # 2**-8: looser than the TPU's approximate reciprocal (about 12 good
    # bits); the interpreter computes it exactly.
    np.testing.assert_allclose(approx, want, rtol=2**-8)
    np.testing.assert_allclose(exact, want, **F32)


def test_reciprocal_approx_aot(aot_compile):
    _aot(aot_compile, reciprocals, jnp.ones(TILE, jnp.float32))


# --- sync_copy and run_scoped ------------------------------------------------------------------

def sync_copy_kernel(x_hbm, o_ref):
    def body(buf):
        pltpu.sync_copy(x_hbm.at[pl.ds(8, 8)], buf)     # the second tile, out of HBM
        o_ref[...] = buf[...] * 2.0 + 1.0
    pl.run_scoped(body, pltpu.VMEM(TILE, jnp.float32))


def sync_copied(x, interpret=False):
    return pl.pallas_call(
        sync_copy_kernel, out_shape=jax.ShapeDtypeStruct(TILE, jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.ANY)],
        out_specs=pl.BlockSpec(TILE, lambda: (0, 0)),
        compiler_params=pltpu.CompilerParams(), interpret=interpret)(x)


def test_sync_copy_in_run_scoped_interpret(rng):
    x = _f32(rng, (32, 128))
    got = np.asarray(sync_copied(x, interpret=INTERPRET))
    np.testing.assert_allclose(got, x[8:16].astype(np.float64) * 2 + 1, **F32)


def test_sync_copy_aot(aot_compile):
    _aot(aot_compile, sync_copied, jnp.zeros((32, 128), jnp.float32))


def nested_scopes_kernel(x_ref, o_ref):
    """Two nested scoped buffers, one squeezed block dim in, grid of 4."""
    def outer(a):
        a[...] = x_ref[...] * 3.0

        def inner(b):
            b[...] = a[...] - x_ref[...]
            o_ref[...] = a[...] + b[...]
        pl.run_scoped(inner, pltpu.VMEM(TILE, jnp.float32))
    pl.run_scoped(outer, pltpu.VMEM(TILE, jnp.float32))


def nested_scopes(x, interpret=False):
    return pl.pallas_call(
        nested_scopes_kernel, out_shape=jax.ShapeDtypeStruct((x.shape[0] * 8, 128), jnp.float32),
        grid=(x.shape[0],),
        in_specs=[pl.BlockSpec((pl.Squeezed(), *TILE), lambda i: (i, 0, 0))],
        out_specs=pl.BlockSpec(TILE, lambda i: (i, 0)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
        interpret=interpret)(x)


def test_nested_run_scoped_with_squeezed_block(rng):
    x = _f32(rng, (4, *TILE))
    got = np.asarray(nested_scopes(x, interpret=INTERPRET))
    np.testing.assert_allclose(got, 5.0 * x.astype(np.float64).reshape(32, 128), **F32)


def test_nested_run_scoped_aot(aot_compile):
    _aot(aot_compile, nested_scopes, jnp.zeros((4, *TILE), jnp.float32))


# --- the frontend's semaphore ops -------------------------------------------------------------

def semaphore_kernel(x_ref, o_ref, counted, other, *, read):
    # Whole semaphores: the frontend's semaphore ops keep a view's index in a
    # static parameter, where a traced index cannot go.
    pl.semaphore_signal(counted, 5)
    pl.semaphore_signal(other, 1)
    pl.semaphore_wait(counted, 2)
    left = pl.semaphore_read(counted) if read else jnp.int32(3)
    pl.semaphore_wait(counted, 3)      # both end at zero, as Mosaic requires at exit
    pl.semaphore_wait(other, 1)
    o_ref[...] = x_ref[...] * left.astype(jnp.float32)


def semaphores(x, interpret=False, read=True):
    sem = pltpu.SemaphoreType.REGULAR
    return _tile_call(functools.partial(semaphore_kernel, read=read), 1, scratch=[sem, sem],
                      interpret=interpret)(x)


def test_semaphore_signal_wait_interpret(rng):
    x = _f32(rng)
    got = np.asarray(semaphores(x, interpret=INTERPRET, read=False))
    np.testing.assert_allclose(got, x.astype(np.float64) * 3, **F32)


def test_semaphore_read_is_refused_in_interpret_mode(rng):
    with pytest.raises(NotImplementedError, match="semaphore_read does not run in TPU interpret"):
        semaphores(_f32(rng), interpret=INTERPRET)


def test_semaphores_with_read_aot(aot_compile):
    _aot(aot_compile, semaphores, jnp.zeros(TILE, jnp.float32))


# --- debug_print, debug_check, multiple_of ---------------------------------------------------

def print_kernel(x_ref, o_ref):
    pl.debug_print("pallas_tpu block {}", pl.program_id(0))
    o_ref[...] = x_ref[...] + 1.0


def printed(x, interpret=False):
    spec = pl.BlockSpec(TILE, lambda i: (i, 0))
    return pl.pallas_call(print_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(x.shape[0] // 8,), in_specs=[spec], out_specs=spec,
                          compiler_params=pltpu.CompilerParams(), interpret=interpret)(x)


def test_debug_print_interpret(rng, capfd):
    x = _f32(rng, (24, 128))
    got = np.asarray(printed(x, interpret=INTERPRET))
    jax.effects_barrier()
    out = capfd.readouterr().out
    assert all(f"pallas_tpu block {i}" in out for i in range(3)), out
    np.testing.assert_allclose(got, x.astype(np.float64) + 1, **F32)


def test_debug_print_aot(aot_compile):
    _aot(aot_compile, printed, jnp.zeros((24, 128), jnp.float32))


def check_kernel(x_ref, o_ref):
    pl.debug_check(jnp.all(x_ref[...] > 0), "pallas_tpu: input must be positive")
    o_ref[...] = jnp.sqrt(x_ref[...])


def checked(x, interpret=False):
    return _tile_call(check_kernel, 1, interpret=interpret)(x)


def test_debug_check_passes_and_fails_interpret(rng):
    x = rng.uniform(0.5, 4.0, TILE).astype(np.float32)
    with pl.enable_debug_checks(True):
        got = np.asarray(checked(x, interpret=INTERPRET))
        np.testing.assert_allclose(got, np.sqrt(x.astype(np.float64)), **F32)
        x[3, 7] = -x[3, 7]
        with pytest.raises(Exception, match="input must be positive"):
            jax.block_until_ready(checked(x, interpret=INTERPRET))


def test_debug_check_aot(aot_compile):
    with pl.enable_debug_checks(True):
        _aot(aot_compile, checked, jnp.ones(TILE, jnp.float32))


def multiple_of_kernel(x_ref, o_ref):
    # x and o are whole (32, 128) arrays in VMEM; step i handles rows [8i, 8i+8).
    start = pl.multiple_of(pl.program_id(0) * 8, 8)
    rows = pl.ds(start, 8)
    o_ref[rows, :] = x_ref[rows, :] * (pl.program_id(0) + 1).astype(jnp.float32)


def multiple_of(x, interpret=False):
    whole = pl.BlockSpec(x.shape, lambda i: (0, 0))
    return pl.pallas_call(
        multiple_of_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(x.shape[0] // 8,), in_specs=[whole], out_specs=whole,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
        interpret=interpret)(x)


def test_multiple_of_dynamic_slices_interpret(rng):
    x = _f32(rng, (32, 128))
    got = np.asarray(multiple_of(x, interpret=INTERPRET))
    want = x.astype(np.float64) * np.repeat(np.arange(1, 5), 8)[:, None]
    np.testing.assert_allclose(got, want, **F32)


def test_multiple_of_aot(aot_compile):
    text = _aot(aot_compile, multiple_of, jnp.zeros((32, 128), jnp.float32))
    assert "tpu_custom_call" in text
