"""pl.pad_ref (JAX 0.12.1's pl.pad_ref): a view grown past a Ref's edge. Reads of
the padding are zeros and writes to it are dropped under the built-in interpreter,
as under JAX's interpret mode; an older JAX gets one line naming the release."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as jpl

import pallas_frontend as pl

HAS_PAD_REF = hasattr(jpl, "pad_ref")
needs_pad_ref = pytest.mark.skipif(not HAS_PAD_REF, reason="pl.pad_ref needs JAX 0.12.1 or newer")


def _read_kernel(P, rows, padded):
    def kernel(x_ref, o_ref):
        o_ref[...] = P.pad_ref(x_ref, (padded, 128))[...] * 2.0 + 1.0
    return kernel


@needs_pad_ref
@pytest.mark.parametrize("rows,padded", [(6, 8), (13, 16), (8, 8)])
def test_reads_past_the_edge_are_zeros(rng, rows, padded):
    x = rng.standard_normal((rows, 128)).astype(np.float32)
    out = jax.ShapeDtypeStruct((padded, 128), jnp.float32)
    ours = pl.pallas_call(_read_kernel(pl, rows, padded), out_shape=out)(x)
    theirs = jpl.pallas_call(_read_kernel(jpl, rows, padded), out_shape=out, interpret=True)(x)
    expect = np.zeros((padded, 128))
    expect[:rows] = x.astype(np.float64)
    np.testing.assert_allclose(np.asarray(ours), expect * 2.0 + 1.0, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


@needs_pad_ref
def test_writes_past_the_edge_are_dropped(rng):
    x = rng.standard_normal((8, 128)).astype(np.float32)

    def kernel(x_ref, o_ref):
        pl.pad_ref(o_ref, (8, 128))[...] = x_ref[...] - 3.0
    got = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((5, 128), jnp.float32))(x)
    np.testing.assert_allclose(np.asarray(got), x[:5].astype(np.float64) - 3.0, rtol=1e-6)


@needs_pad_ref
@pytest.mark.parametrize("shape", [(4, 128), (8,), (8.0, 128), (8, 128, 1)])
def test_a_bad_shape_is_refused_before_anything_runs(shape):
    def kernel(x_ref, o_ref):
        o_ref[...] = pl.pad_ref(x_ref, shape)[...]
    with pytest.raises(ValueError, match=r"pl\.pad_ref: shape must be 2 Python ints, each at "
                                         r"least the Ref's own dim \[6, 128\]"):
        pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((6, 128), jnp.float32))(
            jnp.zeros((6, 128), jnp.float32))


@pytest.mark.skipif(HAS_PAD_REF, reason="this JAX has pl.pad_ref")
def test_an_older_jax_is_told_which_release_has_it():
    def kernel(x_ref, o_ref):
        o_ref[...] = pl.pad_ref(x_ref, (8, 128))[...]
    with pytest.raises(NotImplementedError, match=r"pl\.pad_ref needs JAX 0\.12\.1 or newer; "
                                                  rf"this is JAX {jax.__version__}"):
        pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32))(
            jnp.zeros((8, 128), jnp.float32))
