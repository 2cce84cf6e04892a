"""The held-out-style kernel list of issue 13, written with the portable API
and run with ``interpret=pallas_mgpu.InterpretParams()`` against NumPy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_mgpu as plgpu

IP = dict(interpret=plgpu.InterpretParams())
S = jax.ShapeDtypeStruct


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_matmul_with_in_kernel_loop(rng):
    bk = 64

    def body(x, y, o):
        def step(kk, acc):
            ks = pl.ds(kk * bk, bk)
            return acc + jnp.dot(x[:, ks], y[ks, :], preferred_element_type=jnp.float32)
        o[...] = jax.lax.fori_loop(0, x.shape[1] // bk, step, jnp.zeros(o.shape, jnp.float32))
    f = pl.pallas_call(body, S((128, 128), jnp.float32), grid=(2, 1),
                       in_specs=[pl.BlockSpec((64, 256), lambda i, j: (i, 0)),
                                 pl.BlockSpec((256, 128), lambda i, j: (0, j))],
                       out_specs=pl.BlockSpec((64, 128), lambda i, j: (i, j)), **IP)
    x, y = _f32(rng, 128, 256), _f32(rng, 256, 128)
    np.testing.assert_allclose(f(x, y), x.astype(np.float64) @ y, rtol=1e-4, atol=1e-3)


def test_portable_flash_attention(rng):
    """One query block per grid point; an in-kernel loop over KV blocks."""
    bq, bkv, d = 64, 64, 64

    def body(q, k, v, o):
        qv = q[...] * (1.0 / np.sqrt(d))

        def step(j, carry):
            acc, m, l = carry
            kb, vb = k[pl.ds(j * bkv, bkv), :], v[pl.ds(j * bkv, bkv), :]
            s = jnp.dot(qv, kb.T, preferred_element_type=jnp.float32)
            m_new = jnp.maximum(m, s.max(axis=1, keepdims=True))
            p = jnp.exp(s - m_new)
            alpha = jnp.exp(m - m_new)
            return (acc * alpha + jnp.dot(p, vb, preferred_element_type=jnp.float32),
                    m_new, l * alpha + p.sum(axis=1, keepdims=True))
        init = (jnp.zeros((bq, d), jnp.float32), jnp.full((bq, 1), -jnp.inf, jnp.float32),
                jnp.zeros((bq, 1), jnp.float32))
        acc, _, l = jax.lax.fori_loop(0, k.shape[0] // bkv, step, init)
        o[...] = acc / l
    seq = 256
    f = pl.pallas_call(body, S((seq, d), jnp.float32), grid=(seq // bq,),
                       in_specs=[pl.BlockSpec((bq, d), lambda i: (i, 0)),
                                 pl.BlockSpec((seq, d), lambda i: (0, 0)),
                                 pl.BlockSpec((seq, d), lambda i: (0, 0))],
                       out_specs=pl.BlockSpec((bq, d), lambda i: (i, 0)), **IP)
    q, k, v = (_f32(rng, seq, d) for _ in range(3))
    s = q.astype(np.float64) @ k.T / np.sqrt(d)
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(f(q, k, v), p / p.sum(-1, keepdims=True) @ v, rtol=1e-4, atol=1e-4)


def test_custom_vjp_grad_through_kernel(rng):
    def square(x):
        def body(x_ref, o_ref):
            o_ref[...] = x_ref[...] * x_ref[...]
        spec = pl.BlockSpec((128,), lambda i: (i,))
        return pl.pallas_call(body, S(x.shape, x.dtype), grid=(x.shape[0] // 128,),
                              in_specs=[spec], out_specs=spec, **IP)(x)

    @jax.custom_vjp
    def f(x):
        return square(x)
    f.defvjp(lambda x: (square(x), x), lambda x, g: (2 * x * g,))
    x = _f32(rng, 256)
    np.testing.assert_allclose(jax.grad(lambda x: f(x).sum())(x), 2 * x.astype(np.float64),
                               rtol=1e-6)


def test_named_grid_pytree_outputs_and_run_scoped(rng):
    def body(x, outs):
        i = pl.program_id("rows")

        def scope(tmp):
            tmp[...] = x[...] * 2.0
            outs["double"][...] = tmp[...]
        pl.run_scoped(scope, plgpu.SMEM((8, 128), jnp.float32))
        outs["plus_row"][...] = x[...] + i.astype(jnp.float32)
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    f = pl.pallas_call(body, {"double": S((32, 128), jnp.float32), "plus_row": S((32, 128), jnp.float32)},
                       grid=(("rows", 4),), in_specs=[spec],
                       out_specs={"double": spec, "plus_row": spec}, **IP)
    x = _f32(rng, 32, 128)
    got = f(x)
    np.testing.assert_allclose(got["double"], 2 * x.astype(np.float64), rtol=1e-6)
    np.testing.assert_allclose(got["plus_row"], x + np.repeat(np.arange(4), 8)[:, None], rtol=1e-6)


def test_squeezed_dims(rng):
    def body(x, o):
        o[...] = x[...] * 3.0
    f = pl.pallas_call(body, S((4, 256), jnp.float32), grid=(4,),
                       in_specs=[pl.BlockSpec((None, 256), lambda i: (i, 0))],
                       out_specs=pl.BlockSpec((None, 256), lambda i: (i, 0)), **IP)
    x = _f32(rng, 4, 256)
    np.testing.assert_allclose(f(x), 3 * x.astype(np.float64), rtol=1e-6)


def test_bf16_dot(rng):
    from pallas_frontend.testing import kernels as K
    x = rng.standard_normal((128, 128)).astype(jnp.bfloat16)
    y = rng.standard_normal((128, 128)).astype(jnp.bfloat16)
    got = K.blocked_matmul(128, 128, 128, 64, 128, 64, **IP)(x, y)
    ref = np.asarray(x, np.float64) @ np.asarray(y, np.float64)
    np.testing.assert_allclose(got, ref, rtol=1e-2, atol=5e-2)


def test_integer_ops_and_while_loop(rng):
    def body(x, o):
        v = x[...]

        def cond(c):
            return c[0] < 3

        def step(c):
            return c[0] + 1, (c[1] * 3) ^ (c[1] >> 1)
        _, r = jax.lax.while_loop(cond, step, (jnp.int32(0), v))
        o[...] = r % 1000
    spec = pl.BlockSpec((256,), lambda i: (i,))
    f = pl.pallas_call(body, S((512,), jnp.int32), grid=(2,), in_specs=[spec], out_specs=spec, **IP)
    x = rng.integers(0, 10000, 512).astype(np.int32)
    r = x.astype(np.int64)
    for _ in range(3):
        r = ((r * 3) ^ (r >> 1)) & 0xFFFFFFFF
    r = r.astype(np.uint32).astype(np.int32).astype(np.int64)
    # int32 wraps; jnp's % takes the divisor's sign, as NumPy's mod does
    np.testing.assert_array_equal(f(x), np.mod(r, 1000))


def test_grid_reduction_over_sequential_axis(rng):
    def body(x, o):
        @pl.when(pl.program_id(0) == 0)
        def _():
            o[...] = jnp.zeros_like(o)
        o[...] += x[...].sum(axis=0, keepdims=True)
    f = pl.pallas_call(body, S((1, 128), jnp.float32), grid=(8,),
                       in_specs=[pl.BlockSpec((16, 128), lambda i: (i, 0))],
                       out_specs=pl.BlockSpec((1, 128), lambda i: (0, 0)), **IP)
    x = _f32(rng, 128, 128)
    np.testing.assert_allclose(f(x), x.astype(np.float64).sum(0, keepdims=True), rtol=1e-5, atol=1e-4)


def test_scan_in_kernel(rng):
    def body(x, o):
        def step(c, row):
            c = c + row
            return c, c
        _, ys = jax.lax.scan(step, jnp.zeros((128,), jnp.float32), x[...])
        o[...] = ys
    f = pl.pallas_call(body, S((8, 128), jnp.float32), in_specs=[pl.BlockSpec((8, 128), lambda: (0, 0))],
                       out_specs=pl.BlockSpec((8, 128), lambda: (0, 0)), **IP)
    x = _f32(rng, 8, 128)
    np.testing.assert_allclose(f(x), np.cumsum(x.astype(np.float64), 0), rtol=1e-5, atol=1e-5)


def test_shard_map(rng):
    from jax.sharding import PartitionSpec as P
    # one device: JAX 0.12's GPU interpreter, run for two devices at once under
    # CPU load, has been seen to trip its own barrier bookkeeping
    devices = jax.devices("cpu")[:1]
    mesh = jax.sharding.Mesh(np.array(devices), ("x",))

    def add(x, y):
        def body(a, b, o):
            o[...] = a[...] + b[...]
        spec = pl.BlockSpec((128,), lambda i: (i,))
        return pl.pallas_call(body, S(x.shape, x.dtype), grid=(x.shape[0] // 128,),
                              in_specs=[spec, spec], out_specs=spec, **IP)(x, y)
    f = jax.jit(jax.shard_map(add, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x")))
    x, y = _f32(rng, 256 * len(devices)), _f32(rng, 256 * len(devices))
    np.testing.assert_allclose(f(x, y), x.astype(np.float64) + y, rtol=1e-6)
