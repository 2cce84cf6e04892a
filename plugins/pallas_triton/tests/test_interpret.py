"""Generated kernels under Triton's interpreter vs NumPy float64, and vs the frontend interpreter."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import kernels as K
import pallas_frontend as pl
import pallas_triton as pt

TRITON = dict(interpret=pt.InterpretParams())
REF = dict(interpret=True)


def f64(x):
    return np.asarray(x, np.float64)


@pytest.mark.parametrize("n,block", [(1024, 256), (1000, 256)])   # even and ragged grids
def test_add(rng, n, block):
    x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    out = np.asarray(K.add(x, y, block=block, **TRITON))
    np.testing.assert_allclose(out, f64(x) + f64(y), rtol=1e-6, atol=1e-6)


def test_matmul_k_accumulation(rng):
    a = rng.standard_normal((64, 128)).astype(np.float32)
    b = rng.standard_normal((128, 48)).astype(np.float32)   # 48 columns: a masked edge block
    out = np.asarray(K.matmul(a, b, bm=32, bn=32, bk=32, **TRITON))
    np.testing.assert_allclose(out, f64(a) @ f64(b), rtol=1e-4, atol=1e-4)


def test_softmax_ragged_row(rng):
    x = rng.standard_normal((8, 100)).astype(np.float32)
    out = np.asarray(K.softmax(x, **TRITON))
    e = np.exp(f64(x) - f64(x).max(1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_layer_norm(rng):
    x = rng.standard_normal((4, 128)).astype(np.float32)
    w, b = (rng.standard_normal(128).astype(np.float32) for _ in range(2))
    out = np.asarray(K.layer_norm(x, w, b, **TRITON))
    xd = f64(x)
    ref = (xd - xd.mean(1, keepdims=True)) / np.sqrt(xd.var(1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_flash_attention(rng):
    q, k, v = (rng.standard_normal((64, 32)).astype(np.float32) for _ in range(3))
    out = np.asarray(K.flash_attention(q, k, v, **TRITON))
    s = f64(q) @ f64(k).T / np.sqrt(32)
    p = np.exp(s - s.max(1, keepdims=True))
    np.testing.assert_allclose(out, p / p.sum(1, keepdims=True) @ f64(v), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["add", "softmax", "layer_norm"])
def test_parity_with_frontend_interpreter(rng, name):
    if name == "add":
        args = [rng.standard_normal(1000).astype(np.float32) for _ in range(2)]
    elif name == "softmax":
        args = [rng.standard_normal((4, 64)).astype(np.float32)]
    else:
        args = [rng.standard_normal((4, 64)).astype(np.float32),
                rng.standard_normal(64).astype(np.float32), rng.standard_normal(64).astype(np.float32)]
    got = np.asarray(K.KERNELS[name](*args, **TRITON))
    want = np.asarray(K.KERNELS[name](*args, **REF))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_elementwise_table(rng):
    """Many emitters at once: math, comparisons, select, casts, iota, integer_pow, cond."""
    def body(x_ref, o_ref, i_ref):
        x = x_ref[...]
        i = jax.lax.broadcasted_iota(jnp.int32, x.shape, 1)
        y = jnp.where(x > 0, jnp.tanh(x) + jnp.sqrt(jnp.abs(x)), jax.nn.sigmoid(x) * x ** 3)
        y = y + jnp.maximum(x, 0.5) - jnp.minimum(x, -0.5) + jax.lax.rsqrt(1.0 + x * x)
        y = jax.lax.cond(pl.program_id(0) == 1, lambda v: v * 2.0, lambda v: v - 1.0, y)
        o_ref[...] = y
        i_ref[...] = (i * 3 + (x > 0).astype(jnp.int32)) // 2
    x = rng.standard_normal((32, 16)).astype(np.float32)
    spec = pl.BlockSpec((16, 16), lambda g: (g, 0))
    out, ints = pl.pallas_call(
        body, out_shape=(jax.ShapeDtypeStruct(x.shape, jnp.float32),
                         jax.ShapeDtypeStruct(x.shape, jnp.int32)),
        grid=(2,), in_specs=[spec], out_specs=(spec, spec), **TRITON)(x)
    xd = f64(x)
    y = np.where(xd > 0, np.tanh(xd) + np.sqrt(np.abs(xd)), xd ** 3 / (1 + np.exp(-xd)))
    y = y + np.maximum(xd, 0.5) - np.minimum(xd, -0.5) + 1 / np.sqrt(1 + xd * xd)
    y[:16] -= 1.0
    y[16:] *= 2.0
    np.testing.assert_allclose(np.asarray(out), y, rtol=1e-5, atol=1e-5)
    cols = np.broadcast_to(np.arange(16), x.shape)
    np.testing.assert_array_equal(np.asarray(ints), (cols * 3 + (x > 0)) // 2)


def test_debug_prints_generated_source(rng, capsys):
    x = rng.standard_normal(256).astype(np.float32)
    K.add(x, x, block=256, debug=True, **TRITON)
    printed = capsys.readouterr().out
    assert "@triton.jit" in printed and "tl.load" in printed and "tl.store" in printed


def test_generation_is_cached():
    x = jnp.ones(256, jnp.float32)
    ir = pt.kernel_ir_of(lambda a: K.add(a, a, **TRITON), x)
    assert pt.generate_source(ir) is pt.generate_source(ir)
