"""Kernels in the style of JAX's shipped Pallas ops (flash attention forward and
backward with optional segment ids, layer norm, RMS norm, softmax, decode
attention), written against a Pallas module ``pl`` passed in: the same code
runs under ``jax.experimental.pallas`` and under ``pallas_frontend``.

Each ``make_*`` takes the Pallas module and the keywords for ``pallas_call``
(``interpret=True`` for JAX on CPU) and returns a jittable function.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

NEG_INF = -1e30


# --- flash attention -------------------------------------------------------------

def _attention_fwd_kernel(pl, q_ref, k_ref, v_ref, qseg_ref, kvseg_ref, o_ref, lse_ref, *,
                          scale, causal, block_q, block_k):
    seq_len = k_ref.shape[0]
    q_start = pl.program_id(2) * block_q
    q = q_ref[...].astype(jnp.float32) * scale
    q_seg = qseg_ref[...] if qseg_ref is not None else None

    def body(j, carry):
        acc, m, l = carry
        ks = pl.ds(pl.multiple_of(j * block_k, block_k), block_k)
        k, v = k_ref[ks, :].astype(jnp.float32), v_ref[ks, :].astype(jnp.float32)
        s = q @ k.T
        if causal:
            rows = q_start + lax.broadcasted_iota(jnp.int32, s.shape, 0)
            cols = j * block_k + lax.broadcasted_iota(jnp.int32, s.shape, 1)
            s = jnp.where(rows >= cols, s, NEG_INF)
        if q_seg is not None:
            s = jnp.where(q_seg[:, None] == kvseg_ref[ks][None, :], s, NEG_INF)
        m_new = jnp.maximum(m, s.max(axis=1))
        p = jnp.exp(s - m_new[:, None])
        alpha = jnp.exp(m - m_new)
        return acc * alpha[:, None] + p @ v, m_new, l * alpha + p.sum(axis=1)

    n_blocks = pl.cdiv(seq_len, block_k)
    if causal:   # later key blocks are masked out entirely
        n_blocks = jnp.minimum(n_blocks, pl.cdiv(q_start + block_q, block_k))
    d = q_ref.shape[-1]
    init = (jnp.zeros((block_q, d), jnp.float32), jnp.full((block_q,), NEG_INF, jnp.float32),
            jnp.zeros((block_q,), jnp.float32))
    acc, m, l = lax.fori_loop(0, n_blocks, body, init)
    o_ref[...] = (acc / l[:, None]).astype(o_ref.dtype)
    lse_ref[...] = m + jnp.log(l)


def _attention_forward(pl, call_kw, q, k, v, segment_ids, *, causal, block_q, block_k):
    batch, seq_q, heads, d = q.shape
    seq_k = k.shape[1]
    scale = 1.0 / d ** 0.5
    kernel = functools.partial(_attention_fwd_kernel, pl, scale=scale, causal=causal,
                               block_q=block_q, block_k=block_k)
    qkv = lambda blk, s: pl.BlockSpec((None, blk, None, d), lambda b, h, i: (b, s(i), h, 0))
    seg_spec = None if segment_ids is None else pl.BlockSpec(
        (None, block_q), lambda b, h, i: (b, i))
    kvseg_spec = None if segment_ids is None else pl.BlockSpec(
        (None, seq_k), lambda b, h, i: (b, 0))
    out, lse = pl.pallas_call(
        kernel, grid=(batch, heads, pl.cdiv(seq_q, block_q)),
        in_specs=[qkv(block_q, lambda i: i), qkv(seq_k, lambda i: 0), qkv(seq_k, lambda i: 0),
                  seg_spec, kvseg_spec],
        out_specs=[qkv(block_q, lambda i: i),
                   pl.BlockSpec((None, None, block_q), lambda b, h, i: (b, h, i))],
        out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype),
                   jax.ShapeDtypeStruct((batch, heads, seq_q), jnp.float32)],
        cost_estimate=pl.estimate_cost(_reference_scores, q, k),
        **call_kw,
    )(q, k, v, segment_ids, segment_ids)
    return out, lse


def _reference_scores(q, k):
    return jnp.einsum("bqhd,bkhd->bhqk", q, k)


def _attention_bwd_dkdv_kernel(pl, q_ref, k_ref, v_ref, qseg_ref, kvseg_ref, do_ref, lse_ref,
                               delta_ref, dk_ref, dv_ref, *, scale, causal, block_q, block_k):
    seq_q = q_ref.shape[0]
    k_start = pl.program_id(2) * block_k
    k = k_ref[...].astype(jnp.float32)
    v = v_ref[...].astype(jnp.float32)
    kv_seg = kvseg_ref[...] if kvseg_ref is not None else None

    def body(i, carry):
        dk, dv = carry
        qs = pl.ds(pl.multiple_of(i * block_q, block_q), block_q)
        q = q_ref[qs, :].astype(jnp.float32)
        do = do_ref[qs, :].astype(jnp.float32)
        s = (q * scale) @ k.T
        if causal:
            rows = i * block_q + lax.broadcasted_iota(jnp.int32, s.shape, 0)
            cols = k_start + lax.broadcasted_iota(jnp.int32, s.shape, 1)
            s = jnp.where(rows >= cols, s, NEG_INF)
        if kv_seg is not None:
            s = jnp.where(qseg_ref[qs][:, None] == kv_seg[None, :], s, NEG_INF)
        p = jnp.exp(s - lse_ref[qs][:, None])
        dv = dv + p.T @ do
        dp = do @ v.T
        ds = p * (dp - delta_ref[qs][:, None])
        return dk + ds.T @ q * scale, dv

    d = k_ref.shape[-1]
    init = (jnp.zeros((block_k, d), jnp.float32), jnp.zeros((block_k, d), jnp.float32))
    dk, dv = lax.fori_loop(0, pl.cdiv(seq_q, block_q), body, init)
    dk_ref[...] = dk.astype(dk_ref.dtype)
    dv_ref[...] = dv.astype(dv_ref.dtype)


def _attention_bwd_dq_kernel(pl, q_ref, k_ref, v_ref, qseg_ref, kvseg_ref, do_ref, lse_ref,
                             delta_ref, dq_ref, *, scale, causal, block_q, block_k):
    seq_k = k_ref.shape[0]
    q_start = pl.program_id(2) * block_q
    q = q_ref[...].astype(jnp.float32)
    do = do_ref[...].astype(jnp.float32)
    lse, delta = lse_ref[...], delta_ref[...]

    @pl.loop(0, pl.cdiv(seq_k, block_k), init_carry=jnp.zeros(q.shape, jnp.float32))
    def dq(j, acc):
        ks = pl.ds(pl.multiple_of(j * block_k, block_k), block_k)
        k, v = k_ref[ks, :].astype(jnp.float32), v_ref[ks, :].astype(jnp.float32)
        s = (q * scale) @ k.T
        if causal:
            rows = q_start + lax.broadcasted_iota(jnp.int32, s.shape, 0)
            cols = j * block_k + lax.broadcasted_iota(jnp.int32, s.shape, 1)
            s = jnp.where(rows >= cols, s, NEG_INF)
        if qseg_ref is not None:
            s = jnp.where(qseg_ref[...][:, None] == kvseg_ref[ks][None, :], s, NEG_INF)
        p = jnp.exp(s - lse[:, None])
        ds = p * (do @ v.T - delta[:, None])
        return acc + ds @ k * scale

    dq_ref[...] = dq.astype(dq_ref.dtype)


def make_flash_attention(pl, *, causal=False, block_q=16, block_k=16, **call_kw):
    """``f(q, k, v, segment_ids=None)`` with q/k/v ``[batch, seq, heads, head_dim]``;
    differentiable (custom_vjp with Pallas backward kernels)."""
    opts = dict(causal=causal, block_q=block_q, block_k=block_k)

    @jax.custom_vjp
    def attention(q, k, v, segment_ids):
        return _attention_forward(pl, call_kw, q, k, v, segment_ids, **opts)[0]

    def fwd(q, k, v, segment_ids):
        out, lse = _attention_forward(pl, call_kw, q, k, v, segment_ids, **opts)
        return out, (q, k, v, segment_ids, out, lse)

    def bwd(res, do):
        q, k, v, segment_ids, out, lse = res
        batch, seq_q, heads, d = q.shape
        seq_k = k.shape[1]
        scale = 1.0 / d ** 0.5
        delta = jnp.einsum("bqhd,bqhd->bhq", out.astype(jnp.float32), do.astype(jnp.float32))
        full = lambda n: pl.BlockSpec((None, n, None, d), lambda b, h, i: (b, 0, h, 0))
        tile = lambda n: pl.BlockSpec((None, n, None, d), lambda b, h, i: (b, i, h, 0))
        row = lambda n, f: pl.BlockSpec((None, None, n), lambda b, h, i: (b, h, f(i)))
        seg = lambda n, f: None if segment_ids is None else pl.BlockSpec(
            (None, n), lambda b, h, i: (b, f(i)))
        args = (q, k, v, segment_ids, segment_ids, do, lse, delta)
        dk, dv = pl.pallas_call(
            functools.partial(_attention_bwd_dkdv_kernel, pl, scale=scale, **opts),
            grid=(batch, heads, pl.cdiv(seq_k, block_k)),
            in_specs=[full(seq_q), tile(block_k), tile(block_k), seg(seq_q, lambda i: 0),
                      seg(block_k, lambda i: i), full(seq_q), row(seq_q, lambda i: 0),
                      row(seq_q, lambda i: 0)],
            out_specs=[tile(block_k), tile(block_k)],
            out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype),
                       jax.ShapeDtypeStruct(v.shape, v.dtype)],
            **call_kw)(*args)
        dq = pl.pallas_call(
            functools.partial(_attention_bwd_dq_kernel, pl, scale=scale, **opts),
            grid=(batch, heads, pl.cdiv(seq_q, block_q)),
            in_specs=[tile(block_q), full(seq_k), full(seq_k), seg(block_q, lambda i: i),
                      seg(seq_k, lambda i: 0), tile(block_q), row(block_q, lambda i: i),
                      row(block_q, lambda i: i)],
            out_specs=tile(block_q),
            out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
            **call_kw)(*args)
        return dq, dk, dv, None     # integer segment ids have no cotangent

    attention.defvjp(fwd, bwd)
    return jax.jit(lambda q, k, v, segment_ids=None: attention(q, k, v, segment_ids))


# --- normalisations and softmax ------------------------------------------------------

def make_layer_norm(pl, *, eps=1e-5, block_rows=4, **call_kw):
    """``f(x, weight, bias) -> (y, mean, rstd)`` over the last axis of ``x[rows, n]``."""
    def kernel(x_ref, w_ref, b_ref, o_ref, mean_ref, rstd_ref):
        x = x_ref[...].astype(jnp.float32)
        mean = x.mean(axis=1)
        xc = x - mean[:, None]
        rstd = lax.rsqrt((xc * xc).mean(axis=1) + eps)
        o_ref[...] = (xc * rstd[:, None] * w_ref[...] + b_ref[...]).astype(o_ref.dtype)
        mean_ref[...] = mean
        rstd_ref[...] = rstd

    @jax.jit
    def f(x, weight, bias):
        rows, n = x.shape
        row_spec = pl.BlockSpec((block_rows, n), lambda i: (i, 0))
        vec_spec = pl.BlockSpec((n,), lambda i: (0,))
        stat_spec = pl.BlockSpec((block_rows,), lambda i: (i,))
        return pl.pallas_call(
            kernel, grid=(pl.cdiv(rows, block_rows),),
            in_specs=[row_spec, vec_spec, vec_spec],
            out_specs=[row_spec, stat_spec, stat_spec],
            out_shape=[jax.ShapeDtypeStruct(x.shape, x.dtype),
                       jax.ShapeDtypeStruct((rows,), jnp.float32),
                       jax.ShapeDtypeStruct((rows,), jnp.float32)], **call_kw)(x, weight, bias)
    return f


def make_rms_norm(pl, *, eps=1e-6, block_cols=32, **call_kw):
    """``f(x, weight) -> y``: one row per program, the row visited in column
    blocks (sum of squares first, then the scaled write), as the GPU kernel does."""
    def kernel(x_ref, w_ref, o_ref):
        n = x_ref.shape[0]

        def sum_sq(j, acc):
            cols = j * block_cols + jnp.arange(block_cols)
            a = x_ref[cols].astype(jnp.float32)          # gather by a column index vector
            return acc + a * a

        ms = lax.fori_loop(0, n // block_cols, sum_sq, jnp.zeros(block_cols)).sum() / n
        rstd = lax.rsqrt(ms + eps)

        @pl.loop(0, n // block_cols)
        def _(j):
            cols = pl.ds(j * block_cols, block_cols)
            o_ref[cols] = (x_ref[cols] * rstd * w_ref[cols]).astype(o_ref.dtype)

    @jax.jit
    def f(x, weight):
        rows, n = x.shape
        assert n % block_cols == 0
        return pl.pallas_call(
            kernel, grid=(rows,),
            in_specs=[pl.BlockSpec((None, n), lambda i: (i, 0)), pl.BlockSpec((n,), lambda i: (0,))],
            out_specs=pl.BlockSpec((None, n), lambda i: (i, 0)),
            out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), **call_kw)(x, weight)
    return f


def make_softmax(pl, *, block_rows=2, **call_kw):
    """Row softmax of ``x[rows, n]``; rows past the end of the array are padding."""
    def kernel(x_ref, o_ref):
        x = x_ref[...].astype(jnp.float32)
        e = jnp.exp(x - x.max(axis=-1, keepdims=True))
        o_ref[...] = (e / e.sum(axis=-1, keepdims=True)).astype(o_ref.dtype)

    @jax.jit
    def f(x):
        rows, n = x.shape
        spec = pl.BlockSpec((block_rows, n), lambda i: (i, 0))
        return pl.pallas_call(kernel, grid=(pl.cdiv(rows, block_rows),), in_specs=[spec],
                              out_specs=spec, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              **call_kw)(x)
    return f


# --- decode attention --------------------------------------------------------------

def make_decode_attention(pl, *, block_k=16, **call_kw):
    """One query token per (batch, head) against a key/value cache of which
    only the first ``lengths[b]`` positions are valid: ``f(q[b, h, d],
    k[b, s, h, d], v[b, s, h, d], lengths[b])``."""
    def kernel(len_ref, q_ref, k_ref, v_ref, o_ref):
        length = len_ref[0]
        q = q_ref[...].astype(jnp.float32) / q_ref.shape[-1] ** 0.5

        def body(j, carry):
            acc, m, l = carry
            ks = pl.ds(j * block_k, block_k)
            s = k_ref[ks, :].astype(jnp.float32) @ q
            s = jnp.where(j * block_k + jnp.arange(block_k) < length, s, NEG_INF)
            m_new = jnp.maximum(m, s.max())
            p = jnp.exp(s - m_new)
            alpha = jnp.exp(m - m_new)
            return acc * alpha + p @ v_ref[ks, :].astype(jnp.float32), m_new, l * alpha + p.sum()

        d = q_ref.shape[-1]
        acc, _, l = lax.fori_loop(0, pl.cdiv(length, block_k), body,
                                  (jnp.zeros((d,), jnp.float32), jnp.float32(NEG_INF),
                                   jnp.float32(0)))
        o_ref[...] = (acc / l).astype(o_ref.dtype)

    @jax.jit
    def f(q, k, v, lengths):
        batch, heads, d = q.shape
        seq = k.shape[1]
        return pl.pallas_call(
            kernel, grid=(batch, heads),
            in_specs=[pl.BlockSpec((1,), lambda b, h: (b,)),
                      pl.BlockSpec((None, None, d), lambda b, h: (b, h, 0)),
                      pl.BlockSpec((None, seq, None, d), lambda b, h: (b, 0, h, 0)),
                      pl.BlockSpec((None, seq, None, d), lambda b, h: (b, 0, h, 0))],
            out_specs=pl.BlockSpec((None, None, d), lambda b, h: (b, h, 0)),
            out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype), **call_kw)(lengths, q, k, v)
    return f
