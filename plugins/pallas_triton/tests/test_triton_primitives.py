"""pallas_triton's own primitives: under Triton's interpreter and under the frontend interpreter."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_triton as pt

# Each primitive runs under Triton's interpreter and under the frontend's reference
# interpreter (through the interpret rules the plugin registers).
MODES = {"triton": pt.InterpretParams(), "frontend": True}
MODE_PARAMS = ["triton", "frontend"]


@pytest.mark.parametrize("mode", MODE_PARAMS)
def test_masked_load_store(rng, mode):
    def body(x_ref, o_ref):
        idx = jax.lax.broadcasted_iota(jnp.int32, (64,), 0)
        v = pt.load(x_ref, mask=idx < 40, other=-1.0)
        o_ref[...] = jnp.zeros((64,), jnp.float32)
        pt.store(o_ref, v * 2.0, mask=idx % 2 == 0)
    x = rng.standard_normal(64).astype(np.float32)
    out = np.asarray(pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((64,), jnp.float32),
                                    interpret=MODES[mode])(x))
    want = np.where(np.arange(64) < 40, x.astype(np.float64), -1.0) * 2
    want[1::2] = 0
    np.testing.assert_allclose(out, want, rtol=1e-6)


@pytest.mark.parametrize("mode", MODE_PARAMS)
def test_atomic_add_returns_old(rng, mode):
    def body(x_ref, o_ref, old_ref):
        o_ref[...] = x_ref[...]
        old_ref[...] = pt.atomic_add(o_ref, pl.ds(0, 16), x_ref[pl.ds(16, 16)])
    x = rng.standard_normal(32).astype(np.float32)
    out, old = pl.pallas_call(
        body, out_shape=(jax.ShapeDtypeStruct((32,), jnp.float32),
                         jax.ShapeDtypeStruct((16,), jnp.float32)), interpret=MODES[mode])(x)
    want = x.astype(np.float64).copy()
    want[:16] += x[16:]
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(old), x[:16], rtol=1e-6)


@pytest.mark.parametrize("mode", MODE_PARAMS)
def test_atomic_max_and_approx_tanh(rng, mode):
    def body(x_ref, o_ref, t_ref):
        o_ref[...] = x_ref[pl.ds(0, 16)]
        pt.atomic_max(o_ref, pl.ds(0, 16), x_ref[pl.ds(16, 16)])
        t_ref[...] = pt.approx_tanh(pt.max_contiguous(x_ref[pl.ds(0, 16)], 16))
        pt.debug_barrier()
    x = rng.standard_normal(32).astype(np.float32)
    out, t = pl.pallas_call(
        body, out_shape=(jax.ShapeDtypeStruct((16,), jnp.float32),) * 2,
        interpret=MODES[mode])(x)
    np.testing.assert_allclose(np.asarray(out), np.maximum(x[:16], x[16:]), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(t), np.tanh(x[:16].astype(np.float64)), rtol=1e-5, atol=1e-6)


def test_inline_asm_cannot_be_interpreted():
    def body(x_ref, o_ref):
        (o_ref[...],) = pt.elementwise_inline_asm(
            "mov.b32 $0, $1;", args=[x_ref[...]], constraints="=r,r", pack=1,
            result_shape_dtypes=[jax.ShapeDtypeStruct((16,), jnp.float32)])
    f = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((16,), jnp.float32),
                       interpret=pt.InterpretParams())
    with pytest.raises(NotImplementedError, match="elementwise_inline_asm"):
        f(jnp.ones(16, jnp.float32))
