"""pallas_call under jit, vmap, jvp, grad (through custom_vjp) and shard_map."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P

import pallas_frontend as pl
from conftest import rand
from test_kernels import blocked_add, blocked_matmul, softmax_kernel
import kernels_ref as ref


def row_softmax(x, rows=8):
    spec = pl.BlockSpec((rows, x.shape[1]), lambda i: (i, 0))
    return pl.pallas_call(softmax_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(pl.cdiv(x.shape[0], rows),), in_specs=[spec], out_specs=spec)(x)


def test_jit(rng):
    x, y = rand(rng, 512), rand(rng, 512)
    out = jax.jit(functools.partial(blocked_add, bs=128))(x, y)
    np.testing.assert_allclose(out, x.astype(np.float64) + y, rtol=1e-6)


def test_vmap_adds_a_grid_axis(rng):
    x = rand(rng, 3, 32, 16)
    out = jax.vmap(row_softmax)(x)
    np.testing.assert_allclose(out, ref.softmax(x), rtol=1e-5, atol=1e-6)


def test_vmap_mixed_batched_and_unbatched_and_axis(rng):
    xs, y = rand(rng, 64, 5), rand(rng, 64)          # batch on axis 1 of x only
    out = jax.vmap(lambda x: blocked_add(x, y, 16), in_axes=1)(xs)
    np.testing.assert_allclose(out, xs.T.astype(np.float64) + y, rtol=1e-6)


def test_nested_vmap_of_matmul(rng):
    x, y = rand(rng, 2, 3, 32, 32), rand(rng, 2, 3, 32, 32)
    out = jax.vmap(jax.vmap(blocked_matmul))(x, y)
    np.testing.assert_allclose(out, x.astype(np.float64) @ y, rtol=1e-4, atol=1e-4)


def test_jvp(rng):
    x, dx = rand(rng, 16, 32), rand(rng, 16, 32)
    sq = lambda x: pl.pallas_call(  # noqa: E731
        lambda x_ref, o_ref: o_ref.__setitem__(..., jnp.sin(x_ref[...]) * x_ref[...]),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
        in_specs=[pl.BlockSpec((8, 32), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 32), lambda i: (i, 0)))(x)
    out, tangent = jax.jvp(sq, (x,), (dx,))
    x64, dx64 = x.astype(np.float64), dx.astype(np.float64)
    np.testing.assert_allclose(out, np.sin(x64) * x64, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tangent, (np.cos(x64) * x64 + np.sin(x64)) * dx64, rtol=1e-4, atol=1e-5)


def test_jvp_with_zero_tangent_input(rng):
    x, y, dx = rand(rng, 256), rand(rng, 256), rand(rng, 256)
    _, t = jax.jvp(lambda a: blocked_add(a, y, 64), (x,), (dx,))
    np.testing.assert_allclose(t, dx, rtol=1e-6)


@jax.custom_vjp
def softmax_op(x):
    return row_softmax(x)


def _softmax_fwd(x):
    y = row_softmax(x)
    return y, y


def _softmax_bwd(y, g):
    # dx = y * (g - sum(g * y)), itself a kernel
    def kernel(y_ref, g_ref, o_ref):
        yv, gv = y_ref[...], g_ref[...]
        o_ref[...] = yv * (gv - jnp.sum(gv * yv, axis=-1, keepdims=True))
    spec = pl.BlockSpec((8, y.shape[1]), lambda i: (i, 0))
    return (pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(y.shape, y.dtype),
                           grid=(y.shape[0] // 8,), in_specs=[spec, spec], out_specs=spec)(y, g),)


softmax_op.defvjp(_softmax_fwd, _softmax_bwd)


def test_grad_through_custom_vjp(rng):
    x, w = rand(rng, 16, 32), rand(rng, 16, 32)
    grad = jax.grad(lambda x: jnp.sum(softmax_op(x) * w))(x)
    y = ref.softmax(x)
    w64 = w.astype(np.float64)
    expect = y * (w64 - (w64 * y).sum(-1, keepdims=True))
    np.testing.assert_allclose(grad, expect, rtol=1e-4, atol=1e-6)


def test_shard_map_over_four_devices(rng):
    devices = jax.devices("cpu")
    assert len(devices) >= 4, "tests/conftest.py asks XLA for 4 CPU devices"
    mesh = Mesh(np.array(devices[:4]), ("x",))
    x, y = rand(rng, 4 * 256), rand(rng, 4 * 256)
    f = jax.shard_map(functools.partial(blocked_add, bs=64), mesh=mesh,
                      in_specs=(P("x"), P("x")), out_specs=P("x"))
    out = jax.jit(f)(x, y)
    np.testing.assert_allclose(out, x.astype(np.float64) + y, rtol=1e-6)
    assert len(out.sharding.device_set) == 4
