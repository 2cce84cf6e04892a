"""Scalar prefetch, manual double-buffered DMA and flash attention: each
AOT-compiled for v5e and run in TPU interpret mode against NumPy (float64)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np

import pallas_frontend as pl
import pallas_tpu as pltpu

INTERPRET = pltpu.InterpretParams()


# --- scalar prefetch: a block gather driven by an index vector in SMEM -------------

def gather_kernel(idx_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0 + idx_ref[pl.program_id(0)].astype(jnp.float32)


def gather_blocks(idx, x, interpret=False):
    nb = idx.shape[0]
    return pl.pallas_call(
        gather_kernel,
        out_shape=jax.ShapeDtypeStruct((nb * 8, 128), x.dtype),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(nb,),
            in_specs=[pl.BlockSpec((8, 128), lambda i, idx_ref: (idx_ref[i], 0))],
            out_specs=pl.BlockSpec((8, 128), lambda i, idx_ref: (i, 0))),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
        interpret=interpret)(idx, x)


def test_scalar_prefetch_aot(aot_compile):
    compiled, text = aot_compile(gather_blocks, jnp.zeros((5,), jnp.int32),
                                 jnp.zeros((48, 128), jnp.float32))
    assert "tpu_custom_call" in text


def test_scalar_prefetch_interpret():
    rng = np.random.default_rng()
    x = rng.standard_normal((48, 128)).astype(np.float32)
    idx = rng.integers(0, 6, size=5).astype(np.int32)
    out = np.asarray(gather_blocks(jnp.asarray(idx), jnp.asarray(x), interpret=INTERPRET))
    want = np.concatenate([x[8 * j:8 * j + 8].astype(np.float64) * 2 + j for j in idx])
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


# --- manual double buffering with async_copy out of HBM ------------------------------

def double_buffer_kernel(x_hbm, o_ref, buf, sem):
    n = x_hbm.shape[0] // 8

    def copy(i, slot):
        return pltpu.make_async_copy(x_hbm.at[pl.ds(i * 8, 8)], buf.at[slot], sem.at[slot])

    copy(0, 0).start()
    o_ref[...] = jnp.zeros_like(o_ref)

    def body(i, carry):
        slot = i % 2

        @pl.when(i + 1 < n)
        def _():
            copy(i + 1, 1 - slot).start()
        copy(i, slot).wait()
        o_ref[...] += buf[slot] * (i + 1).astype(jnp.float32)
        return carry
    jax.lax.fori_loop(0, n, body, 0)


def double_buffered_sum(x, interpret=False):
    return pl.pallas_call(
        double_buffer_kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pltpu.ANY)],
        out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
        scratch_shapes=[pltpu.VMEM((2, 8, 128), x.dtype), pltpu.SemaphoreType.DMA((2,))],
        compiler_params=pltpu.CompilerParams(),
        interpret=interpret)(x)


def test_double_buffer_aot(aot_compile):
    compiled, text = aot_compile(double_buffered_sum, jnp.zeros((64, 128), jnp.float32))
    assert "tpu_custom_call" in text


def test_double_buffer_interpret():
    rng = np.random.default_rng()
    x = rng.standard_normal((64, 128)).astype(np.float32)
    out = np.asarray(double_buffered_sum(jnp.asarray(x), interpret=INTERPRET))
    chunks = x.astype(np.float64).reshape(8, 8, 128)
    want = sum(chunks[i] * (i + 1) for i in range(8))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


# --- flash attention forward (online softmax over kv blocks) ---------------------------

def flash_kernel(q_ref, k_ref, v_ref, o_ref, m_scr, l_scr, acc_scr, *, scale):
    kv = pl.program_id(1)

    @pl.when(kv == 0)
    def _():
        m_scr[...] = jnp.full_like(m_scr, -jnp.inf)
        l_scr[...] = jnp.zeros_like(l_scr)
        acc_scr[...] = jnp.zeros_like(acc_scr)

    s = jnp.dot(q_ref[...], k_ref[...].T, preferred_element_type=jnp.float32) * scale
    m_prev = m_scr[...]
    m_new = jnp.maximum(m_prev, s.max(axis=-1, keepdims=True))
    p = jnp.exp(s - m_new)
    alpha = jnp.exp(m_prev - m_new)
    l_scr[...] = alpha * l_scr[...] + p.sum(axis=-1, keepdims=True)
    acc_scr[...] = alpha * acc_scr[...] + jnp.dot(p, v_ref[...], preferred_element_type=jnp.float32)
    m_scr[...] = m_new

    @pl.when(kv == pl.num_programs(1) - 1)
    def _():
        o_ref[...] = (acc_scr[...] * pltpu.reciprocal(l_scr[...])).astype(o_ref.dtype)


def flash_attention(q, k, v, *, bq=128, bk=128, interpret=False):
    n, d = q.shape
    kernel = functools.partial(flash_kernel, scale=1.0 / np.sqrt(d))
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((n, d), q.dtype),
        grid=(n // bq, k.shape[0] // bk),
        in_specs=[pl.BlockSpec((bq, d), lambda i, j: (i, 0)),
                  pl.BlockSpec((bk, d), lambda i, j: (j, 0)),
                  pl.BlockSpec((bk, d), lambda i, j: (j, 0))],
        out_specs=pl.BlockSpec((bq, d), lambda i, j: (i, 0)),
        scratch_shapes=[pltpu.VMEM((bq, 1), jnp.float32), pltpu.VMEM((bq, 1), jnp.float32),
                        pltpu.VMEM((bq, d), jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
        interpret=interpret)(q, k, v)


def test_flash_attention_aot(aot_compile):
    z = jnp.zeros((256, 128), jnp.float32)
    compiled, text = aot_compile(flash_attention, z, z, z)
    assert "tpu_custom_call" in text


def test_flash_attention_interpret():
    rng = np.random.default_rng()
    q, k, v = (rng.standard_normal((256, 128)).astype(np.float32) for _ in range(3))
    out = np.asarray(flash_attention(*map(jnp.asarray, (q, k, v)), interpret=INTERPRET))
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    s = q64 @ k64.T / np.sqrt(128)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    want = (p / p.sum(axis=-1, keepdims=True)) @ v64
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


# --- JAX's INDEX / KEY / ERROR memory spaces are SMEM on TPU, as in JAX ----------

def scale_by_index(idx, x, interpret=False):
    def kernel(i_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...] * i_ref[1].astype(jnp.float32)
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.MemorySpace.INDEX), pl.BlockSpec()],
        compiler_params=pltpu.CompilerParams(), interpret=interpret)(idx, x)


def test_index_memory_space_is_smem(aot_compile):
    rng = np.random.default_rng(11)
    idx = rng.integers(-5, 5, size=4).astype(np.int32)
    x = rng.standard_normal((8, 128)).astype(np.float32)
    got = scale_by_index(idx, x, interpret=INTERPRET)
    np.testing.assert_allclose(np.asarray(got), x.astype(np.float64) * idx[1], rtol=1e-6)
    _, text = aot_compile(scale_by_index, jnp.zeros((4,), jnp.int32), jnp.zeros((8, 128)))
    assert "tpu_custom_call" in text
