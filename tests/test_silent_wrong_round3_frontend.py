"""Issue 32, frontend: block indices that would wrap in int32, and
``input_output_aliases`` given as pairs. Each test failed before its fix;
references are NumPy on fresh random data."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
from conftest import rand


def _copy_block(index, rows=8):
    def k(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0
    return pl.pallas_call(
        k, out_shape=jax.ShapeDtypeStruct((rows, 128), jnp.float32), grid=(1,),
        in_specs=[pl.BlockSpec((rows, 128), lambda i: (index, 0))],
        out_specs=pl.BlockSpec((rows, 128), lambda i: (0, 0)), interpret=True)


@pytest.mark.parametrize("index", [np.int64(2 ** 40), np.int64(2 ** 32), 2 ** 40,
                                   np.uint64(2 ** 63), np.array(2 ** 40)],
                         ids=["np.int64(2**40)", "np.int64(2**32)", "int(2**40)",
                              "np.uint64(2**63)", "0-d array"])
def test_constant_block_index_beyond_int32_is_refused(rng, index):
    x = rand(rng, 32, 128)
    with pytest.raises(pl.BlockIndexError, match=r"does not fit in int32.*would wrap to"):
        _copy_block(index)(x)


def test_constant_numpy_block_index_in_range_runs(rng):
    x = rand(rng, 32, 128)
    got = _copy_block(np.int64(3))(x)
    np.testing.assert_array_equal(np.asarray(got), x[24:32].astype(np.float64) * 2.0)


def _prefetch_gather(rows_per_block):
    import pallas_tpu

    def k(idx_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...] + idx_ref[pl.program_id(0)].astype(jnp.float32)
    spec = pl.BlockSpec((rows_per_block, 128), lambda i, idx: (idx[i], 0))
    gs = pallas_tpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(2,), in_specs=[spec],
        out_specs=pl.BlockSpec((rows_per_block, 128), lambda i, idx: (i, 0)))
    return pl.pallas_call(k, out_shape=jax.ShapeDtypeStruct((2 * rows_per_block, 128),
                                                           jnp.float32),
                          grid_spec=gs, interpret=True)


@pytest.mark.parametrize("bad", [2 ** 25 + 1, 2 ** 24 * 3 + 2, 2 ** 31 - 1])
def test_prefetched_block_index_whose_offset_wraps_is_refused(rng, bad):
    pytest.importorskip("pallas_tpu")
    x = rand(rng, 512, 128)
    # (2**25 + 1) * 128 rows wraps in int32 to row 128: block 1, in range
    with pytest.raises(pl.BlockIndexError, match="selected a block outside the array"):
        jax.block_until_ready(_prefetch_gather(128)(np.array([0, bad], np.int32), x))


def test_prefetched_block_index_in_range_still_runs(rng):
    pytest.importorskip("pallas_tpu")
    x = rand(rng, 512, 128)
    idx = rng.permutation(4)[:2].astype(np.int32)
    got = _prefetch_gather(128)(idx, x)
    want = np.concatenate([x[128 * b:128 * (b + 1)].astype(np.float64) + b for b in idx])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)


def _two_aliases(aliases):
    def k(a_ref, b_ref, o0_ref, o1_ref):
        o0_ref[0:2, :] = a_ref[0:2, :] + 1.0      # rows 2.. of each output are never written
        o1_ref[4:6, :] = b_ref[4:6, :] * 3.0
    shape = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    return pl.pallas_call(k, out_shape=(shape, shape), input_output_aliases=aliases,
                          interpret=True)


@pytest.mark.parametrize("aliases", [[(0, 0), (1, 1)], ((0, 1), (1, 0)), [[1, 0]]])
def test_alias_pairs_as_a_sequence_are_honoured(rng, aliases):
    a, b = rand(rng, 8, 128), rand(rng, 8, 128)
    got = _two_aliases(aliases)(a, b)
    want_dict = _two_aliases(dict((i, o) for i, o in aliases))(a, b)
    for g, w in zip(got, want_dict):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    # NumPy: an aliased output starts as its input
    ins, start = (a, b), {o: i for i, o in aliases}
    o0 = ins[start[0]].astype(np.float64) if 0 in start else None
    o1 = ins[start[1]].astype(np.float64) if 1 in start else None
    if o0 is not None:
        o0[0:2] = a[0:2].astype(np.float64) + 1.0
        np.testing.assert_allclose(np.asarray(got[0]), o0, rtol=1e-6, atol=1e-6)
    if o1 is not None:
        o1[4:6] = b[4:6].astype(np.float64) * 3.0
        np.testing.assert_allclose(np.asarray(got[1]), o1, rtol=1e-6, atol=1e-6)


def test_alias_pairs_repeating_an_input_are_refused(rng):
    a, b = rand(rng, 8, 128), rand(rng, 8, 128)
    with pytest.raises(ValueError, match="aliases input 0 to output 0 and to output 1"):
        _two_aliases([(0, 0), (0, 1)])(a, b)


@pytest.mark.parametrize("aliases", [[0, 1], [(0, 0, 1)], "01", {0, 1}])
def test_alias_sequences_that_are_not_pairs_are_refused(rng, aliases):
    a, b = rand(rng, 8, 128), rand(rng, 8, 128)
    with pytest.raises(TypeError, match="input_output_aliases"):
        _two_aliases(aliases)(a, b)
