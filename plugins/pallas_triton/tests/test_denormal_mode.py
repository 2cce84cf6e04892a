"""Triton's interpreter computes in XLA's CPU denormal mode whatever mode its host
callback starts in (JAX 0.12.1's callbacks start with denormals kept; 0.12.0.1's
inherited XLA's flushing mode), and gives the caller's mode back."""

import platform

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_triton as pt
from pallas_triton import denormal_mode

SETTABLE = pytest.mark.skipif(denormal_mode._control() is None,
                              reason=f"no denormal mode control known on {platform.machine()}")


def _planted(rng, n=512):
    """Random normals with float32 denormals of both signs planted."""
    x = rng.standard_normal(n).astype(np.float32)
    picks = rng.choice(n, 64, replace=False)
    x[picks] = rng.integers(1, 1 << 23, 64).astype(np.uint32).view(np.float32) * \
        rng.choice([-1, 1], 64).astype(np.float32)
    return x


@SETTABLE
def test_the_mode_is_set_inside_and_given_back(rng):
    x = _planted(rng)
    assert not denormal_mode.flushing()       # the main thread's default: IEEE
    with denormal_mode.as_xla_cpu():
        assert denormal_mode.flushing()
        inside = np.maximum(x, np.float32(0.0))
    outside = np.maximum(x, np.float32(0.0))
    assert not denormal_mode.flushing()
    tiny = np.abs(x) < np.finfo(np.float32).tiny
    # NumPy float64 reference: denormals read as zero inside, kept outside
    np.testing.assert_array_equal(inside, np.where(tiny, 0.0, np.maximum(x.astype(np.float64), 0)))
    np.testing.assert_array_equal(outside, np.maximum(x.astype(np.float64), 0).astype(np.float32))


@SETTABLE
def test_a_kernel_reads_denormals_as_zero_in_any_callback_mode(rng):
    x = jnp.asarray(_planted(rng).reshape(8, 64))

    def body(x_ref, o_ref):
        o_ref[...] = jnp.maximum(x_ref[...], 0.0) * 2.0

    got = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                         interpret=pt.InterpretParams())(x)
    wide = np.asarray(x, np.float64)
    wide = np.where(np.abs(wide) < np.finfo(np.float32).tiny, 0.0, wide)
    np.testing.assert_array_equal(np.asarray(got), (np.maximum(wide, 0) * 2).astype(np.float32))
    # and the kernel left no flushing mode behind on the callback's thread
    seen = jax.pure_callback(lambda _: np.bool_(denormal_mode.flushing()),
                             jax.ShapeDtypeStruct((), jnp.bool_), x)
    xla_flushes_in_callbacks = bool(seen)
    assert not denormal_mode.flushing()
    # JAX 0.12.1 and newer run callbacks with denormals kept: ours must not change that
    if jax.__version_info__ >= (0, 12, 1):
        assert not xla_flushes_in_callbacks


def test_float64_sin_reads_a_denormal_input_as_zero(rng):
    with jax.enable_x64(True):
        x = rng.standard_normal((8, 64))
        x.reshape(-1)[rng.choice(x.size, 40, replace=False)] = \
            rng.uniform(-1, 1, 40) * np.finfo(np.float64).tiny
        x = jnp.asarray(x, jnp.float64)

        def body(x_ref, o_ref):
            o_ref[...] = jnp.sin(x_ref[...])
        got = np.asarray(pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                        interpret=pt.InterpretParams())(x))
    wide = np.asarray(x)
    flushed = np.where(np.abs(wide) < np.finfo(np.float64).tiny, np.copysign(0.0, wide), wide)
    np.testing.assert_allclose(got, np.sin(flushed), rtol=4e-16, atol=0)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(np.sin(flushed)))
