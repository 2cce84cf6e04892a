"""Typed PRNG keys as operands of ``emit_pipeline`` (JAX 0.10.2's
PallasCallPipelineTest::test_prng_pallas_vs_pipeline and test_key_memory_space):
the pipeline's window for a key operand is a buffer of keys (in SMEM for
``pl.MemorySpace.KEY``, as JAX places it), so the body loads keys. Ours raised
'Cannot interpret key<pl> as a data type' building that buffer, and refused
the KEY space ('blocks can be buffered in VMEM, SMEM or HBM, not key'). In
TPU interpret mode a DMA of a block of keys applied indexers written over the
keys to their key data (one more dim): steps 2 and 3 got the keys of 0 and 1.

A threefry key's samples are checked against XLA's ``jax.random`` outside any
kernel (float64); a Pallas key's, which the interpreters draw from a stand-in
stream (keyed_random.py), against the same kernel without a pipeline. Both
compile for v5e as JAX's do."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu

BLOCK, STEPS = (8, 128), 4


def _seed():
    return int(np.random.default_rng().integers(0, 2**31 - 1))


def _threefry_pipeline(Pl, T, interpret=False, compiler_params=None):
    """out[i] = x[i] + uniform(keys[i]) per row block i: the (STEPS,) keys and
    the rows both in HBM, windowed block by block (a key per step) into VMEM."""
    def step(key_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...] + jax.random.uniform(key_ref[0], o_ref.shape)

    def kernel(keys_hbm, x_hbm, o_hbm):
        rows = Pl.BlockSpec(BLOCK, lambda i: (i, 0))
        T.emit_pipeline(step, grid=(STEPS,),
                        in_specs=[Pl.BlockSpec((1,), lambda i: (i,)), rows],
                        out_specs=rows)(keys_hbm, x_hbm, o_hbm)

    kw = {} if compiler_params is None else dict(compiler_params=compiler_params)
    return lambda keys, x: Pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(x.shape, jnp.float32),
        in_specs=[Pl.BlockSpec(memory_space=T.HBM)] * 2,
        out_specs=Pl.BlockSpec(memory_space=T.HBM), interpret=interpret, **kw)(keys, x)


def _threefry_data():
    keys = jax.random.split(jax.random.key(_seed()), STEPS)
    x = np.random.default_rng().standard_normal((STEPS * BLOCK[0], BLOCK[1]))
    return keys, x.astype(np.float32)


def test_threefry_keys_windowed_by_a_pipeline_match_xla():
    keys, x = _threefry_data()
    out = np.asarray(jax.jit(_threefry_pipeline(pl, pltpu, pltpu.InterpretParams()))(keys, x))
    want = np.asarray(x, np.float64) + np.concatenate(
        [np.asarray(jax.random.uniform(k, BLOCK), np.float64) for k in keys])
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


def _one_key_pipeline(Pl, T, compiler_params=None):
    """out[i] = x[i] + uniform(key): one threefry key, windowed whole into VMEM."""
    def step(key_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...] + jax.random.uniform(key_ref[...], o_ref.shape)

    def kernel(key_hbm, x_hbm, o_hbm):
        rows = Pl.BlockSpec(BLOCK, lambda i: (i, 0))
        T.emit_pipeline(step, grid=(STEPS,), in_specs=[Pl.BlockSpec((), lambda i: ()), rows],
                        out_specs=rows)(key_hbm, x_hbm, o_hbm)

    kw = {} if compiler_params is None else dict(compiler_params=compiler_params)
    return lambda key, x: Pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(x.shape, jnp.float32),
        in_specs=[Pl.BlockSpec(memory_space=T.HBM)] * 2,
        out_specs=Pl.BlockSpec(memory_space=T.HBM), **kw)(key, x)


def test_threefry_key_pipeline_compiles_for_v5e_as_jax_does(aot_compile):
    """(JAX's Mosaic lowering cannot slice a window of several keys, so the
    compiled form windows one key; ours fails there as JAX's does.)"""
    from jax.experimental import pallas as jpl
    from jax.experimental.pallas import tpu as jpltpu
    x = jnp.zeros((STEPS * BLOCK[0], BLOCK[1]), jnp.float32)
    for Pl, T, params in ((pl, pltpu, pltpu.CompilerParams()), (jpl, jpltpu, None)):
        _, text = aot_compile(_one_key_pipeline(Pl, T, compiler_params=params),
                              jax.random.key(0), x)
        assert "tpu_custom_call" in text


# --- a Pallas key, as JAX's tests pass it ------------------------------------------------

def _pallas_key_program(Pl, T, space, pipelined, interpret=False, compiler_params=None):
    """uniform(key) into an (8, 128) block: the key in SMEM for the kernel
    itself, or in HBM and windowed into ``space`` by a pipeline of no grid."""
    def body(key_ref, o_ref):
        o_ref[...] = jax.random.uniform(key_ref[...], o_ref.shape)

    def pipeline_kernel(key_hbm, o_hbm):
        T.emit_pipeline(body, grid=(), in_specs=[Pl.BlockSpec(memory_space=space)],
                        out_specs=[Pl.BlockSpec(memory_space=T.VMEM)])(key_hbm, o_hbm)

    kw = {} if compiler_params is None else dict(compiler_params=compiler_params)
    outer = T.HBM if pipelined else None
    return lambda key: Pl.pallas_call(
        pipeline_kernel if pipelined else body,
        out_shape=jax.ShapeDtypeStruct(BLOCK, jnp.float32),
        in_specs=[Pl.BlockSpec(memory_space=outer or T.SMEM)],
        out_specs=Pl.BlockSpec(memory_space=outer or T.VMEM), interpret=interpret, **kw)(key)


SPACES = [pytest.param(pltpu.SMEM, id="smem"), pytest.param(pl.MemorySpace.KEY, id="key")]


@pytest.mark.parametrize("space", SPACES)
def test_pallas_key_through_a_pipeline_draws_as_without(space):
    key = pltpu.to_pallas_key(jax.random.key(_seed()))
    interpret = pltpu.InterpretParams()
    piped = np.asarray(jax.jit(_pallas_key_program(pl, pltpu, space, True, interpret))(key))
    plain = np.asarray(jax.jit(_pallas_key_program(pl, pltpu, space, False, interpret))(key))
    np.testing.assert_array_equal(piped, plain)
    # a sample, not a constant: 1024 values in [0, 1), mean within 6 sigma of 1/2
    assert piped.min() >= 0.0 and piped.max() < 1.0 and len(np.unique(piped)) > 1000
    assert abs(piped.mean() - 0.5) < 6 * np.sqrt(1 / 12 / piped.size)


@pytest.mark.parametrize("space", SPACES)
def test_pallas_key_pipeline_compiles_for_v5e_as_jax_does(aot_compile, space):
    from jax.experimental import pallas as jpl
    from jax.experimental.pallas import tpu as jpltpu
    theirs_space = jpltpu.SMEM if space is pltpu.SMEM else jpl.MemorySpace.KEY
    for Pl, T, params, s in ((pl, pltpu, pltpu.CompilerParams(), space),
                             (jpl, jpltpu, None, theirs_space)):
        key = T.to_pallas_key(jax.random.key(0))
        _, text = aot_compile(_pallas_key_program(Pl, T, s, True, compiler_params=params), key)
        assert "tpu_custom_call" in text
