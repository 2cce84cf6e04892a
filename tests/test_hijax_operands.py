"""pallas_call with operands and outputs of a hijax type (JAX's ``HiType``),
run by the built-in interpreter: the kernel sees one Ref of the type, the
launch moves its arrays (hijax_operands.py). NumPy reference on random data."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
from hijax_pair import Pair, PairType

pytestmark = pytest.mark.skipif(PairType is None, reason="this JAX has no hijax types")


def _blocks_reversed(x, rows):
    n = x.shape[0] // rows
    return x.reshape(n, rows, *x.shape[1:])[::-1].reshape(x.shape)


def _pair(rng, shape):
    return (rng.standard_normal(shape).astype(np.float32),
            rng.standard_normal(shape).astype(np.float32))


def test_pair_in_and_out_with_plain_operands_beside():
    rng = np.random.default_rng(0)
    a, b = _pair(rng, (32, 128))
    y = rng.standard_normal((32, 128)).astype(np.float32)

    def kernel(x_ref, y_ref, o_ref, p_ref):
        o_ref[...] = x_ref[...]        # a Pair value: both arrays' blocks
        p_ref[...] = y_ref[...] * 2.0

    fwd = pl.BlockSpec((8, 128), lambda i: (i, 0))
    rev = pl.BlockSpec((8, 128), lambda i: (3 - i, 0))
    out, p = pl.pallas_call(
        kernel, grid=(4,), in_specs=[fwd, fwd], out_specs=(rev, fwd),
        out_shape=(PairType((32, 128), jnp.float32), jax.ShapeDtypeStruct((32, 128), jnp.float32)),
    )(Pair(jnp.asarray(a), jnp.asarray(b)), jnp.asarray(y))
    assert isinstance(out, Pair)
    np.testing.assert_array_equal(np.asarray(out.a), _blocks_reversed(a, 8))
    np.testing.assert_array_equal(np.asarray(out.b), _blocks_reversed(b, 8))
    np.testing.assert_allclose(np.asarray(p), y.astype(np.float64) * 2, rtol=1e-6)


def test_pair_under_jit_with_squeezed_blocks_and_an_alias():
    rng = np.random.default_rng(1)
    a, b = _pair(rng, (4, 16, 128))

    def kernel(x_ref, o_ref):
        assert x_ref.shape == (16, 128)    # the Pair's block: squeezed dim dropped
        o_ref[...] = x_ref[...]

    # blocks 3, 2 go to 0, 1; blocks 2, 3 keep the aliased input's arrays
    call = pl.pallas_call(kernel, grid=(2,),
                          in_specs=[pl.BlockSpec((None, 16, 128), lambda i: (3 - i, 0, 0))],
                          out_specs=pl.BlockSpec((None, 16, 128), lambda i: (i, 0, 0)),
                          out_shape=PairType((4, 16, 128), jnp.float32),
                          input_output_aliases={0: 0})

    @jax.jit
    def f(x, z):
        out = call(Pair(x, z))
        return out.a, out.b
    oa, ob = f(jnp.asarray(a), jnp.asarray(b))
    for got, x in ((oa, a), (ob, b)):
        np.testing.assert_array_equal(np.asarray(got), np.concatenate([x[3:1:-1], x[2:]]))


def test_a_type_without_lower_block_spec_is_refused_naming_the_output():
    class Unsplittable(PairType):
        lower_block_spec = None

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    x = jnp.zeros((8, 128), jnp.float32)
    with pytest.raises(ValueError, match=r"output 0 .*lower_block_spec"):
        pl.pallas_call(kernel, out_shape=Unsplittable((8, 128), jnp.float32))(Pair(x, x))
