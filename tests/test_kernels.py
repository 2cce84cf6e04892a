"""Real kernels on the default CPU path, each against a NumPy float64 reference.

Tolerances: float32 kernels compared with rtol=atol=1e-5 for elementwise
work, 1e-4 for reductions and matmuls.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import pallas_frontend as pl
from conftest import rand
import kernels_ref as ref


def add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def blocked_add(x, y, bs):
    spec = pl.BlockSpec((bs,), lambda i: (i,))
    return pl.pallas_call(add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(pl.cdiv(x.shape[0], bs),), in_specs=[spec, spec],
                          out_specs=spec)(x, y)


def test_vector_add(rng):
    x, y = rand(rng, 4096), rand(rng, 4096)
    np.testing.assert_allclose(blocked_add(x, y, 256), x.astype(np.float64) + y, rtol=1e-6)


def test_ragged_add_grid_not_dividing(rng):
    x, y = rand(rng, 1000), rand(rng, 1000)
    out = blocked_add(x, y, 128)          # 8 blocks, the last one 104 elements in bounds
    assert out.shape == (1000,)
    np.testing.assert_allclose(out, x.astype(np.float64) + y, rtol=1e-6)


def test_ragged_2d_blocks(rng):
    x = rand(rng, 37, 70)
    spec = pl.BlockSpec((16, 32), lambda i, j: (i, j))
    out = pl.pallas_call(lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...] * 2.0 + 1.0),
                         out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(3, 3),
                         in_specs=[spec], out_specs=spec)(x)
    np.testing.assert_allclose(out, x.astype(np.float64) * 2 + 1, rtol=1e-6)


def matmul_kernel(x_ref, y_ref, o_ref, acc_ref, *, nk):
    @pl.when(pl.program_id(2) == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == nk - 1)
    def _():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def blocked_matmul(x, y, bm=32, bn=32, bk=16):
    m, k = x.shape
    _, n = y.shape
    nk = k // bk
    return pl.pallas_call(
        functools.partial(matmul_kernel, nk=nk),
        out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
        grid=(m // bm, n // bn, nk),
        in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
                  pl.BlockSpec((bk, bn), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
        scratch_shapes=[pl.MemorySpace.DEFAULT((bm, bn), jnp.float32)])(x, y)


def test_blocked_matmul_accumulates_over_k(rng):
    x, y = rand(rng, 64, 96), rand(rng, 96, 64)
    np.testing.assert_allclose(blocked_matmul(x, y), x.astype(np.float64) @ y, rtol=1e-4, atol=1e-4)


def test_matmul_accumulating_in_output_block(rng):
    """Accumulate directly into o_ref across the k axis (no scratch)."""
    x, y = rand(rng, 32, 64), rand(rng, 64, 48)

    def kernel(x_ref, y_ref, o_ref):
        @pl.when(pl.program_id(2) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
        o_ref[...] += x_ref[...] @ y_ref[...]

    out = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((32, 48), jnp.float32), grid=(2, 3, 4),
        in_specs=[pl.BlockSpec((16, 16), lambda i, j, k: (i, k)),
                  pl.BlockSpec((16, 16), lambda i, j, k: (k, j))],
        out_specs=pl.BlockSpec((16, 16), lambda i, j, k: (i, j)))(x, y)
    np.testing.assert_allclose(out, x.astype(np.float64) @ y, rtol=1e-4, atol=1e-4)


def test_in_kernel_loop_matmul_with_ds(rng):
    x, y = rand(rng, 32, 128), rand(rng, 128, 32)
    bk = 32

    def kernel(x_ref, y_ref, o_ref):
        @pl.loop(0, 128, step=bk, init_carry=jnp.zeros((16, 32), jnp.float32))
        def acc(k, acc):
            xs = x_ref[:, pl.ds(pl.multiple_of(k, bk), bk)]
            ys = y_ref[pl.ds(k, bk), :]
            return acc + jnp.dot(xs, ys, preferred_element_type=jnp.float32)
        o_ref[...] = acc

    out = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((32, 32), jnp.float32), grid=(2,),
        in_specs=[pl.BlockSpec((16, 128), lambda i: (i, 0)), pl.BlockSpec((128, 32), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((16, 32), lambda i: (i, 0)))(x, y)
    np.testing.assert_allclose(out, x.astype(np.float64) @ y, rtol=1e-4, atol=1e-4)


def softmax_kernel(x_ref, o_ref):
    x = x_ref[...]
    e = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))
    o_ref[...] = e / jnp.sum(e, axis=-1, keepdims=True)


def test_row_softmax(rng):
    x = rand(rng, 100, 64) * 3
    out = pl.pallas_call(softmax_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                         grid=(pl.cdiv(100, 16),), in_specs=[pl.BlockSpec((16, 64), lambda i: (i, 0))],
                         out_specs=pl.BlockSpec((16, 64), lambda i: (i, 0)))(x)
    np.testing.assert_allclose(out, ref.softmax(x), rtol=1e-5, atol=1e-6)


def test_layer_norm(rng):
    x, w, b = rand(rng, 64, 128), rand(rng, 128), rand(rng, 128)
    eps = 1e-5

    def kernel(x_ref, w_ref, b_ref, o_ref):
        x = x_ref[...]
        mu = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
        o_ref[...] = (x - mu) * lax.rsqrt(var + eps) * w_ref[...] + b_ref[...]

    row = pl.BlockSpec((8, 128), lambda i: (i, 0))
    vec = pl.BlockSpec((128,), lambda i: (0,))
    out = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(8,),
                         in_specs=[row, vec, vec], out_specs=row)(x, w, b)
    np.testing.assert_allclose(out, ref.layer_norm(x, w, b, eps), rtol=1e-4, atol=1e-4)


def flash_attention_kernel(q_ref, k_ref, v_ref, o_ref, *, block_k, seq_len):
    q = q_ref[...] / np.sqrt(q_ref.shape[-1]).astype(np.float32)
    bq, d = q.shape

    def body(j, carry):
        m, l, acc = carry
        k = k_ref[pl.ds(j * block_k, block_k), :]
        v = v_ref[pl.ds(j * block_k, block_k), :]
        s = q @ k.T
        m_new = jnp.maximum(m, s.max(-1))
        p = jnp.exp(s - m_new[:, None])
        alpha = jnp.exp(m - m_new)
        return m_new, l * alpha + p.sum(-1), acc * alpha[:, None] + p @ v

    init = (jnp.full((bq,), -jnp.inf, jnp.float32), jnp.zeros((bq,), jnp.float32),
            jnp.zeros((bq, d), jnp.float32))
    _, l, acc = lax.fori_loop(0, seq_len // block_k, body, init)
    o_ref[...] = acc / l[:, None]


def flash_attention(q, k, v, block_q=32, block_k=32):
    h, n, d = q.shape
    kern = functools.partial(flash_attention_kernel, block_k=block_k, seq_len=n)
    return pl.pallas_call(
        kern, out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype), grid=(h, n // block_q),
        in_specs=[pl.BlockSpec((None, block_q, d), lambda h, i: (h, i, 0)),
                  pl.BlockSpec((None, n, d), lambda h, i: (h, 0, 0)),
                  pl.BlockSpec((None, n, d), lambda h, i: (h, 0, 0))],
        out_specs=pl.BlockSpec((None, block_q, d), lambda h, i: (h, i, 0)))(q, k, v)


def test_flash_attention_forward(rng):
    q, k, v = rand(rng, 2, 128, 32), rand(rng, 2, 128, 32), rand(rng, 2, 128, 32)
    np.testing.assert_allclose(flash_attention(q, k, v), ref.attention(q, k, v), rtol=1e-4, atol=1e-4)


def test_carried_value_across_sequential_grid_steps(rng):
    """A running total carried in a scratch buffer across grid steps (a cumsum)."""
    x = rand(rng, 8, 32)

    def kernel(x_ref, o_ref, total_ref):
        @pl.when(pl.program_id(0) == 0)
        def _():
            total_ref[...] = jnp.zeros_like(total_ref)
        total_ref[...] += x_ref[...]
        o_ref[...] = total_ref[...]

    out = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(8,),
                         in_specs=[pl.BlockSpec((None, 32), lambda i: (i, 0))],
                         out_specs=pl.BlockSpec((None, 32), lambda i: (i, 0)),
                         scratch_shapes=[pl.MemorySpace.ANY((32,), jnp.float32)])(x)
    np.testing.assert_allclose(out, np.cumsum(x.astype(np.float64), 0), rtol=1e-5, atol=1e-5)


def test_aliasing_updates_in_place(rng):
    x, y = rand(rng, 64), rand(rng, 64)

    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = o_ref[...] + 2.0 * y_ref[...]    # o starts as x (aliased)

    spec = pl.BlockSpec((16,), lambda i: (i,))
    out = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
                         in_specs=[spec, spec], out_specs=spec,
                         input_output_aliases={0: 0})(x, y)
    np.testing.assert_allclose(out, x.astype(np.float64) + 2 * y, rtol=1e-6)


def test_aliased_output_keeps_unwritten_blocks(rng):
    x = rand(rng, 64)
    spec = pl.BlockSpec((16,), lambda i: (2 * i,))   # writes blocks 0 and 2 only

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 10.0

    out = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
                         in_specs=[spec], out_specs=spec, input_output_aliases={0: 0})(x)
    expect = x.astype(np.float64).copy()
    expect[0:16] *= 10
    expect[32:48] *= 10
    np.testing.assert_allclose(out, expect, rtol=1e-6)


def test_2d_gridspec_with_transposing_out_index_map(rng):
    x = rand(rng, 64, 96)

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...].T

    gs = pl.GridSpec(grid=(4, 3), in_specs=[pl.BlockSpec((16, 32), lambda i, j: (i, j))],
                     out_specs=pl.BlockSpec((32, 16), lambda i, j: (j, i)))
    out = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((96, 64), x.dtype), grid_spec=gs)(x)
    np.testing.assert_array_equal(out, x.T)


def test_named_grid_program_id_by_name(rng):
    x = rand(rng, 4, 6)

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + (10 * pl.program_id("row") + pl.program_id("col")).astype(jnp.float32)
        assert pl.num_programs("row") == 4 and pl.num_programs(1) == 6

    spec = pl.BlockSpec((None, None), lambda r, c: (r, c))
    out = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                         grid=(("row", 4), ("col", 6)), in_specs=[spec], out_specs=spec)(x)
    rows, cols = np.meshgrid(np.arange(4), np.arange(6), indexing="ij")
    np.testing.assert_allclose(out, x.astype(np.float64) + 10 * rows + cols, rtol=1e-6)


def test_pytree_inputs_and_outputs(rng):
    a, b = rand(rng, 32), rand(rng, 32)

    def kernel(xs, outs):
        outs["sum"][...] = xs["a"][...] + xs["b"][...]
        outs["prod"][...] = xs["a"][...] * xs["b"][...]

    sds = jax.ShapeDtypeStruct((32,), jnp.float32)
    out = pl.pallas_call(kernel, out_shape={"sum": sds, "prod": sds})({"a": a, "b": b})
    np.testing.assert_allclose(out["sum"], a.astype(np.float64) + b, rtol=1e-6)
    np.testing.assert_allclose(out["prod"], a.astype(np.float64) * b, rtol=1e-6)


def test_conditionals_and_while_in_kernel(rng):
    x = rand(rng, 8, 16)

    def kernel(x_ref, o_ref):
        i = pl.program_id(0)
        v = lax.cond(i % 2 == 0, lambda v: v * 2.0, lambda v: -v, x_ref[...])
        n = lax.while_loop(lambda c: c[0] < i, lambda c: (c[0] + 1, c[1] + 1.0),
                           (0, jnp.float32(0)))[1]
        o_ref[...] = v + n

    spec = pl.BlockSpec((None, 16), lambda i: (i, 0))
    out = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(8,),
                         in_specs=[spec], out_specs=spec)(x)
    i = np.arange(8)[:, None]
    expect = np.where(i % 2 == 0, 2 * x.astype(np.float64), -x.astype(np.float64)) + i
    np.testing.assert_allclose(out, expect, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.int32, np.float64])
def test_dtypes(rng, dtype):
    with jax.enable_x64(dtype == np.float64):
        x = (rng.integers(-1000, 1000, 300) if dtype == np.int32 else rand(rng, 300)).astype(dtype)
        y = (rng.integers(-1000, 1000, 300) if dtype == np.int32 else rand(rng, 300)).astype(dtype)
        out = blocked_add(x, y, 64)
        assert out.dtype == dtype
        np.testing.assert_array_equal(out, x.astype(np.float64) + y)
