"""Kernels in the style of JAX's shipped TPU ops (matmul, flash attention
with optional segment ids, paged attention, splash attention, a threefry
PRNG kernel), written here, each a function
of the Pallas modules ``(P, T)``: the very same code runs with
``pallas_frontend``/``pallas_tpu`` and with JAX's ``jax.experimental.pallas``
(TPU interpret mode) on the same fresh random inputs, both checked against
NumPy in float64; ours is also AOT-compiled for v5e."""

import functools

import jax
import jax.extend.random  # threefry2x32_p, for the PRNG kernel
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as jpl
from jax.experimental.pallas import tpu as jpltpu

import pallas_frontend as pl
import pallas_tpu as pltpu

OURS, JAXS = (pl, pltpu), (jpl, jpltpu)


def _rng():
    return np.random.default_rng()


def _both(build, *arrays):
    """(ours, JAX's) outputs of ``build(P, T, interpret)(*arrays)``."""
    return [np.asarray(build(P, T, T.InterpretParams())(*map(jnp.asarray, arrays)))
            for P, T in (OURS, JAXS)]


# --- TPU matmul: k on the grid, f32 accumulator in VMEM scratch --------------------------

def matmul(P, T, interpret, bm=128, bk=128, bn=128):
    def kernel(x_ref, y_ref, o_ref, acc_ref):
        @P.when(P.program_id(2) == 0)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)
        acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

        @P.when(P.program_id(2) == P.num_programs(2) - 1)
        def _():
            o_ref[...] = acc_ref[...].astype(o_ref.dtype)

    def f(x, y):
        m, k = x.shape
        n = y.shape[1]
        return P.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
            grid=(m // bm, n // bn, k // bk),
            in_specs=[P.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
                      P.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))],
            out_specs=P.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
            scratch_shapes=[T.VMEM((bm, bn), jnp.float32)],
            compiler_params=T.CompilerParams(
                dimension_semantics=("parallel", "parallel", "arbitrary")),
            interpret=interpret)(x, y)
    return f


def test_matmul_matches_jax_and_numpy():
    rng = _rng()
    x = rng.standard_normal((256, 384)).astype(np.float32)
    y = rng.standard_normal((384, 256)).astype(np.float32)
    ours, theirs = _both(matmul, x, y)
    want = x.astype(np.float64) @ y.astype(np.float64)
    tol = dict(rtol=2e-5, atol=2e-5 * np.sqrt(384) * 4)
    np.testing.assert_allclose(ours, want, **tol)
    np.testing.assert_allclose(ours, theirs, **tol)


def test_matmul_aot_v5e(aot_compile):
    s = jnp.zeros((256, 384), jnp.bfloat16)
    _, text = aot_compile(matmul(pl, pltpu, False), s, s.T)
    assert "tpu_custom_call" in text


# --- flash attention forward, optional segment ids ----------------------------------------

def flash_attention(P, T, interpret, *, segments: bool, block_q=128, block_k=128):
    """Online-softmax attention over kv blocks (grid: batch*heads, q blocks,
    kv blocks); with ``segments``, q and kv positions attend only within a segment."""
    def kernel(*refs):
        if segments:
            q_ref, k_ref, v_ref, qseg_ref, kseg_ref, o_ref, m_ref, l_ref, acc_ref = refs
        else:
            q_ref, k_ref, v_ref, o_ref, m_ref, l_ref, acc_ref = refs
        kv = P.program_id(2)

        @P.when(kv == 0)
        def _():
            m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
            l_ref[...] = jnp.zeros_like(l_ref)
            acc_ref[...] = jnp.zeros_like(acc_ref)

        q = q_ref[...]
        s = jnp.dot(q, k_ref[...].T, preferred_element_type=jnp.float32) / np.sqrt(q.shape[-1])
        if segments:
            same = qseg_ref[...][:, :1] == kseg_ref[...][:1, :]
            s = jnp.where(same, s, -1e30)
        m_prev = m_ref[...][:, :1]
        m_new = jnp.maximum(m_prev, s.max(axis=-1, keepdims=True))
        p = jnp.exp(s - m_new)
        alpha = jnp.exp(m_prev - m_new)
        l_new = alpha * l_ref[...][:, :1] + p.sum(axis=-1, keepdims=True)
        acc_ref[...] = alpha * acc_ref[...] + jnp.dot(p, v_ref[...],
                                                      preferred_element_type=jnp.float32)
        m_ref[...] = jnp.broadcast_to(m_new, m_ref.shape)
        l_ref[...] = jnp.broadcast_to(l_new, l_ref.shape)

        @P.when(kv == P.num_programs(2) - 1)
        def _():
            o_ref[...] = (acc_ref[...] / l_ref[...][:, :1]).astype(o_ref.dtype)

    def f(q, k, v, *segs):
        bh, sq, d = q.shape
        sk = k.shape[1]
        qspec = P.BlockSpec((None, block_q, d), lambda b, i, j: (b, i, 0))
        kspec = P.BlockSpec((None, block_k, d), lambda b, i, j: (b, j, 0))
        in_specs = [qspec, kspec, kspec]
        if segments:   # segment ids as (S, 128) lane-broadcast int32 tiles
            in_specs += [P.BlockSpec((None, block_q, 128), lambda b, i, j: (b, i, 0)),
                         P.BlockSpec((None, 128, block_k), lambda b, i, j: (b, 0, j))]
        return P.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
            grid=(bh, sq // block_q, sk // block_k), in_specs=in_specs, out_specs=qspec,
            scratch_shapes=[T.VMEM((block_q, 128), jnp.float32)] * 2
            + [T.VMEM((block_q, d), jnp.float32)],
            compiler_params=T.CompilerParams(
                dimension_semantics=("parallel", "parallel", "arbitrary")),
            interpret=interpret)(q, k, v, *segs)
    return f


def _attention_reference(q, k, v, qseg=None, kseg=None):
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    if qseg is not None:
        s = np.where(qseg[:, :, None] == kseg[:, None, :], s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


@pytest.mark.parametrize("segments", [False, True])
def test_flash_attention_matches_jax_and_numpy(segments):
    rng = _rng()
    bh, s, d = 2, 256, 128
    q, k, v = (rng.standard_normal((bh, s, d)).astype(np.float32) for _ in range(3))
    args = [q, k, v]
    qseg = kseg = None
    if segments:
        seg = np.sort(rng.integers(0, 3, (bh, s)), axis=1).astype(np.int32)
        qseg = kseg = seg
        args += [np.repeat(seg[:, :, None], 128, 2), np.repeat(seg[:, None, :], 128, 1)]
    build = functools.partial(flash_attention, segments=segments)
    ours, theirs = _both(build, *args)
    want = _attention_reference(q, k, v, qseg, kseg)
    np.testing.assert_allclose(ours, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("segments", [False, True])
def test_flash_attention_aot_v5e(aot_compile, segments):
    z = jnp.zeros((2, 256, 128), jnp.float32)
    args = [z, z, z]
    if segments:
        args += [jnp.zeros((2, 256, 128), jnp.int32), jnp.zeros((2, 128, 256), jnp.int32)]
    _, text = aot_compile(flash_attention(pl, pltpu, False, segments=segments), *args)
    assert "tpu_custom_call" in text


# --- paged attention (decode): pages gathered by scalar-prefetched page tables ----------------

def paged_attention(P, T, interpret, *, pages_per_seq: int, page_size: int):
    """One query row per sequence; its keys/values live in pages of a shared
    pool, listed by a page table that is prefetched to SMEM; the kernel DMAs
    each page from HBM and keeps an online softmax over them."""
    def kernel(table_ref, q_ref, k_pool, v_pool, o_ref, k_buf, v_buf, sem, m_ref, l_ref, acc_ref):
        b = P.program_id(0)
        m_ref[...] = jnp.full_like(m_ref, -jnp.inf)
        l_ref[...] = jnp.zeros_like(l_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

        def page(i, carry):
            pid = table_ref[b, i]
            T.async_copy(k_pool.at[pid], k_buf, sem).wait()
            T.async_copy(v_pool.at[pid], v_buf, sem).wait()
            q = q_ref[...]                                       # (8, d): row 0 is the query
            s = jnp.dot(q, k_buf[...].T, preferred_element_type=jnp.float32)
            s = s / np.sqrt(q.shape[-1])
            m_prev = m_ref[...][:, :1]
            m_new = jnp.maximum(m_prev, s.max(-1, keepdims=True))
            p = jnp.exp(s - m_new)
            alpha = jnp.exp(m_prev - m_new)
            l_ref[...] = jnp.broadcast_to(alpha * l_ref[...][:, :1] + p.sum(-1, keepdims=True),
                                          l_ref.shape)
            acc_ref[...] = alpha * acc_ref[...] + jnp.dot(p, v_buf[...],
                                                          preferred_element_type=jnp.float32)
            m_ref[...] = jnp.broadcast_to(m_new, m_ref.shape)
            return carry
        jax.lax.fori_loop(0, pages_per_seq, page, 0)
        o_ref[...] = acc_ref[...] / l_ref[...][:, :1]

    def f(table, q, k_pool, v_pool):
        nseq, _, d = q.shape
        return P.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct(q.shape, jnp.float32),
            grid_spec=T.PrefetchScalarGridSpec(
                num_scalar_prefetch=1, grid=(nseq,),
                in_specs=[P.BlockSpec((None, 8, d), lambda b, t: (b, 0, 0)),
                          P.BlockSpec(memory_space=P.ANY), P.BlockSpec(memory_space=P.ANY)],
                out_specs=P.BlockSpec((None, 8, d), lambda b, t: (b, 0, 0)),
                scratch_shapes=[T.VMEM((page_size, d), jnp.float32)] * 2
                + [T.SemaphoreType.DMA, T.VMEM((8, 128), jnp.float32),
                   T.VMEM((8, 128), jnp.float32), T.VMEM((8, d), jnp.float32)]),
            compiler_params=T.CompilerParams(dimension_semantics=("arbitrary",)),
            interpret=interpret)(table, q, k_pool, v_pool)
    return f


def test_paged_attention_matches_jax_and_numpy():
    rng = _rng()
    nseq, pages_per_seq, page_size, d, pool = 3, 4, 128, 128, 16
    table = rng.permutation(pool)[:nseq * pages_per_seq].reshape(nseq, pages_per_seq)
    table = table.astype(np.int32)
    q = rng.standard_normal((nseq, 8, d)).astype(np.float32)
    k_pool, v_pool = (rng.standard_normal((pool, page_size, d)).astype(np.float32)
                      for _ in range(2))
    build = functools.partial(paged_attention, pages_per_seq=pages_per_seq, page_size=page_size)
    ours, theirs = _both(build, table, q, k_pool, v_pool)
    keys = k_pool[table].reshape(nseq, -1, d)
    vals = v_pool[table].reshape(nseq, -1, d)
    want = _attention_reference(q, keys, vals)
    np.testing.assert_allclose(ours, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


def test_paged_attention_aot_v5e(aot_compile):
    build = paged_attention(pl, pltpu, False, pages_per_seq=4, page_size=128)
    _, text = aot_compile(build, jnp.zeros((3, 4), jnp.int32), jnp.zeros((3, 8, 128), jnp.float32),
                          jnp.zeros((16, 128, 128), jnp.float32),
                          jnp.zeros((16, 128, 128), jnp.float32))
    assert "tpu_custom_call" in text


# --- splash attention: block-sparse causal attention driven by a prefetched block mask ---------

def splash_attention(P, T, interpret, *, block=128):
    """Causal attention that skips kv blocks the block mask (SMEM, scalar
    prefetch) marks empty; partially masked blocks mask element-wise."""
    def kernel(mask_ref, q_ref, k_ref, v_ref, o_ref, m_ref, l_ref, acc_ref):
        qi, kv = P.program_id(1), P.program_id(2)

        @P.when(kv == 0)
        def _():
            m_ref[...] = jnp.full_like(m_ref, -1e30)
            l_ref[...] = jnp.zeros_like(l_ref)
            acc_ref[...] = jnp.zeros_like(acc_ref)

        @P.when(mask_ref[qi, kv] != 0)
        def _():
            q = q_ref[...]
            s = jnp.dot(q, k_ref[...].T, preferred_element_type=jnp.float32)
            s = s / np.sqrt(q.shape[-1])
            rows = qi * block + jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
            cols = kv * block + jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
            s = jnp.where(cols <= rows, s, -1e30)
            m_prev = m_ref[...][:, :1]
            m_new = jnp.maximum(m_prev, s.max(-1, keepdims=True))
            p = jnp.exp(s - m_new)
            alpha = jnp.exp(m_prev - m_new)
            l_ref[...] = jnp.broadcast_to(alpha * l_ref[...][:, :1] + p.sum(-1, keepdims=True),
                                          l_ref.shape)
            acc_ref[...] = alpha * acc_ref[...] + jnp.dot(p, v_ref[...],
                                                          preferred_element_type=jnp.float32)
            m_ref[...] = jnp.broadcast_to(m_new, m_ref.shape)

        @P.when(kv == P.num_programs(2) - 1)
        def _():
            o_ref[...] = (acc_ref[...] / l_ref[...][:, :1]).astype(o_ref.dtype)

    def f(block_mask, q, k, v):
        bh, s, d = q.shape
        nb = s // block
        qspec = P.BlockSpec((None, block, d), lambda b, i, j, m: (b, i, 0))
        kspec = P.BlockSpec((None, block, d), lambda b, i, j, m: (b, j, 0))
        return P.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
            grid_spec=T.PrefetchScalarGridSpec(
                num_scalar_prefetch=1, grid=(bh, nb, nb), in_specs=[qspec, kspec, kspec],
                out_specs=qspec,
                scratch_shapes=[T.VMEM((block, 128), jnp.float32)] * 2
                + [T.VMEM((block, d), jnp.float32)]),
            compiler_params=T.CompilerParams(
                dimension_semantics=("parallel", "parallel", "arbitrary")),
            interpret=interpret)(block_mask, q, k, v)
    return f


def test_splash_attention_matches_jax_and_numpy():
    rng = _rng()
    bh, s, d, block = 2, 384, 128, 128
    q, k, v = (rng.standard_normal((bh, s, d)).astype(np.float32) for _ in range(3))
    nb = s // block
    block_mask = np.tril(np.ones((nb, nb), np.int32))      # causal: upper blocks are skipped
    ours, theirs = _both(splash_attention, block_mask, q, k, v)
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    sc = q64 @ k64.transpose(0, 2, 1) / np.sqrt(d)
    sc = np.where(np.tril(np.ones((s, s), bool)), sc, -np.inf)
    p = np.exp(sc - sc.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ v64
    np.testing.assert_allclose(ours, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


def test_splash_attention_aot_v5e(aot_compile):
    z = jnp.zeros((2, 384, 128), jnp.float32)
    _, text = aot_compile(splash_attention(pl, pltpu, False), jnp.ones((3, 3), jnp.int32), z, z, z)
    assert "tpu_custom_call" in text


# --- PRNG: counter-based threefry bits per block (JAX's shipped PRNG-kernel style) -------------

def threefry_bits(P, T, interpret, *, rows=32, block_rows=8):
    """uint32 bits: threefry2x32 of the key (SMEM) and each element's global
    counter, one (block_rows, 128) block per grid step."""
    def kernel(key_ref, o_ref):
        i = P.program_id(0)
        shape = o_ref.shape
        row = jax.lax.broadcasted_iota(jnp.uint32, shape, 0) + (i * shape[0]).astype(jnp.uint32)
        counters = row * jnp.uint32(shape[1]) + jax.lax.broadcasted_iota(jnp.uint32, shape, 1)
        k0 = jnp.full(shape, key_ref[0], jnp.uint32)
        k1 = jnp.full(shape, key_ref[1], jnp.uint32)
        hi, lo = jax.extend.random.threefry2x32_p.bind(k0, k1, counters, jnp.zeros_like(counters))
        o_ref[...] = hi ^ lo

    def f(key):
        return P.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct((rows, 128), jnp.uint32),
            grid=(rows // block_rows,), in_specs=[P.BlockSpec(memory_space=T.SMEM)],
            out_specs=P.BlockSpec((block_rows, 128), lambda i: (i, 0)),
            compiler_params=T.CompilerParams(), interpret=interpret)(key)
    return f


def _threefry2x32_numpy(k0, k1, x0, x1):
    """Threefry-2x32, 20 rounds (Salmon et al. 2011), in NumPy uint32."""
    rot = [(13, 15, 26, 6), (17, 29, 16, 24)]
    ks = [np.uint32(k0), np.uint32(k1), np.uint32(k0) ^ np.uint32(k1) ^ np.uint32(0x1BD11BDA)]
    x0, x1 = x0 + ks[0], x1 + ks[1]
    for group in range(5):
        for r in rot[group % 2]:
            x0 = x0 + x1
            x1 = (x1 << np.uint32(r)) | (x1 >> np.uint32(32 - r))
            x1 = x1 ^ x0
        x0 = x0 + ks[(group + 1) % 3]
        x1 = x1 + ks[(group + 2) % 3] + np.uint32(group + 1)
    return x0, x1


def test_threefry_kernel_matches_jax_and_numpy():
    key = _rng().integers(0, 2**32, 2, dtype=np.uint64).astype(np.uint32)
    ours, theirs = _both(threefry_bits, key)
    counters = np.arange(32 * 128, dtype=np.uint32).reshape(32, 128)
    with np.errstate(over="ignore"):
        hi, lo = _threefry2x32_numpy(key[0], key[1], counters, np.zeros_like(counters))
    np.testing.assert_array_equal(ours, hi ^ lo)
    np.testing.assert_array_equal(ours, theirs)


def test_threefry_kernel_aot_v5e(aot_compile):
    _, text = aot_compile(threefry_bits(pl, pltpu, False), jnp.zeros((2,), jnp.uint32))
    assert "tpu_custom_call" in text
