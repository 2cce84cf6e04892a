"""Kernels in the style of JAX's GPU ops (jax/experimental/pallas/ops/gpu), written for
pallas_frontend + pallas_triton: flash attention forward and backward, layer norm and
softmax with masked loads at array offsets, and split-k decode attention.

Each builder takes the call keywords (``interpret=...`` or ``compiler_params=...``), so
the same kernel runs under Triton's interpreter, the frontend's reference interpreter,
and compiles for a GPU. NumPy float64 references are at the end.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import pallas_frontend as pl
import pallas_triton as pt


# --- flash attention: q, k, v are (batch, seq, heads, head_dim) -------------------------

def flash_attention_fwd(q, k, v, *, bq=16, bk=16, **call):
    """Returns (out, lse): lse = log-sum-exp of each query's scores, for the backward."""
    batch, seq, heads, dim = q.shape
    scale = 1.0 / dim ** 0.5

    def body(q_ref, k_ref, v_ref, o_ref, lse_ref):
        qb = q_ref[...].astype(jnp.float32)

        def step(j, carry):
            m, l, acc = carry
            kb = k_ref[pl.ds(j * bk, bk), :].astype(jnp.float32)
            vb = v_ref[pl.ds(j * bk, bk), :].astype(jnp.float32)
            s = jnp.dot(qb, kb.T, preferred_element_type=jnp.float32) * scale
            m_new = jnp.maximum(m, jnp.max(s, axis=1))
            p = jnp.exp(s - m_new[:, None])
            alpha = jnp.exp(m - m_new)
            acc = acc * alpha[:, None] + jnp.dot(p, vb, preferred_element_type=jnp.float32)
            return m_new, l * alpha + jnp.sum(p, axis=1), acc
        init = (jnp.full((bq,), -jnp.inf, jnp.float32), jnp.zeros((bq,), jnp.float32),
                jnp.zeros((bq, dim), jnp.float32))
        m, l, acc = lax.fori_loop(0, seq // bk, step, init)
        o_ref[...] = (acc / l[:, None]).astype(o_ref.dtype)
        lse_ref[...] = m + jnp.log(l)

    q_spec = pl.BlockSpec((None, bq, None, dim), lambda b, h, i: (b, i, h, 0))
    kv_spec = pl.BlockSpec((None, seq, None, dim), lambda b, h, i: (b, 0, h, 0))
    return pl.pallas_call(
        body, grid=(batch, heads, seq // bq),
        out_shape=(jax.ShapeDtypeStruct(q.shape, q.dtype),
                   jax.ShapeDtypeStruct((batch, heads, seq), jnp.float32)),
        in_specs=[q_spec, kv_spec, kv_spec],
        out_specs=(q_spec, pl.BlockSpec((None, None, bq), lambda b, h, i: (b, h, i))),
        name="flash_attention_fwd", **call)(q, k, v)


def flash_attention_bwd(q, k, v, o, lse, do, *, bq=16, bk=16, **call):
    """(dq, dk, dv) from two kernels: one per query block, one per key/value block."""
    batch, seq, heads, dim = q.shape
    scale = 1.0 / dim ** 0.5

    def dq_body(q_ref, k_ref, v_ref, o_ref, lse_ref, do_ref, dq_ref):
        qb = q_ref[...].astype(jnp.float32)
        dob = do_ref[...].astype(jnp.float32)
        lse_b = lse_ref[...]
        delta = jnp.sum(o_ref[...].astype(jnp.float32) * dob, axis=1)

        def step(j, dq):
            kb = k_ref[pl.ds(j * bk, bk), :].astype(jnp.float32)
            vb = v_ref[pl.ds(j * bk, bk), :].astype(jnp.float32)
            p = jnp.exp(jnp.dot(qb, kb.T, preferred_element_type=jnp.float32) * scale
                        - lse_b[:, None])
            dp = jnp.dot(dob, vb.T, preferred_element_type=jnp.float32)
            ds = p * (dp - delta[:, None])
            return dq + jnp.dot(ds, kb, preferred_element_type=jnp.float32) * scale
        dq = lax.fori_loop(0, seq // bk, step, jnp.zeros((bq, dim), jnp.float32))
        dq_ref[...] = dq.astype(dq_ref.dtype)

    def dkv_body(q_ref, k_ref, v_ref, o_ref, lse_ref, do_ref, dk_ref, dv_ref):
        kb = k_ref[...].astype(jnp.float32)
        vb = v_ref[...].astype(jnp.float32)

        def step(i, carry):
            dk, dv = carry
            rows = pl.ds(i * bq, bq)
            qb = q_ref[rows, :].astype(jnp.float32)
            dob = do_ref[rows, :].astype(jnp.float32)
            delta = jnp.sum(o_ref[rows, :].astype(jnp.float32) * dob, axis=1)
            p = jnp.exp(jnp.dot(qb, kb.T, preferred_element_type=jnp.float32) * scale
                        - lse_ref[rows][:, None])
            dv = dv + jnp.dot(p.T, dob, preferred_element_type=jnp.float32)
            dp = jnp.dot(dob, vb.T, preferred_element_type=jnp.float32)
            ds = p * (dp - delta[:, None])
            dk = dk + jnp.dot(ds.T, qb, preferred_element_type=jnp.float32) * scale
            return dk, dv
        zeros = jnp.zeros((bk, dim), jnp.float32)
        dk, dv = lax.fori_loop(0, seq // bq, step, (zeros, zeros))
        dk_ref[...] = dk.astype(dk_ref.dtype)
        dv_ref[...] = dv.astype(dv_ref.dtype)

    whole = pl.BlockSpec((None, seq, None, dim), lambda b, h, i: (b, 0, h, 0))
    blk_q = pl.BlockSpec((None, bq, None, dim), lambda b, h, i: (b, i, h, 0))
    blk_k = pl.BlockSpec((None, bk, None, dim), lambda b, h, i: (b, i, h, 0))
    lse_blk = pl.BlockSpec((None, None, bq), lambda b, h, i: (b, h, i))
    lse_all = pl.BlockSpec((None, None, seq), lambda b, h, i: (b, h, 0))
    dq = pl.pallas_call(
        dq_body, grid=(batch, heads, seq // bq), out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        in_specs=[blk_q, whole, whole, blk_q, lse_blk, blk_q], out_specs=blk_q,
        name="flash_attention_dq", **call)(q, k, v, o, lse, do)
    dk, dv = pl.pallas_call(
        dkv_body, grid=(batch, heads, seq // bk),
        out_shape=(jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)),
        in_specs=[whole, blk_k, blk_k, whole, lse_all, whole], out_specs=(blk_k, blk_k),
        name="flash_attention_dkv", **call)(q, k, v, o, lse, do)
    return dq, dk, dv


# --- layer norm and softmax over rows, with masked loads at array offsets ------------------

def layer_norm_fwd(x, w, b, *, eps=1e-5, block=64, **call):
    """One row per program; the row (any length) is walked in column blocks of ``block``
    with masked loads at array offsets. Returns (out, mean, rstd)."""
    rows, cols = x.shape
    nblocks = pl.cdiv(cols, block)

    def body(x_ref, w_ref, b_ref, o_ref, mean_ref, rstd_ref):
        def cols_of(j):
            idx = j * block + jnp.arange(block)
            return idx, idx < cols

        def total(j, acc):
            idx, mask = cols_of(j)
            return acc + pt.load(x_ref.at[idx], mask=mask, other=0.0).astype(jnp.float32)
        mean = jnp.sum(lax.fori_loop(0, nblocks, total, jnp.zeros((block,), jnp.float32))) / cols

        def spread(j, acc):
            idx, mask = cols_of(j)
            a = pt.load(x_ref.at[idx], mask=mask, other=0.0).astype(jnp.float32)
            c = jnp.where(mask, a - mean, 0.0)
            return acc + c * c
        var = jnp.sum(lax.fori_loop(0, nblocks, spread, jnp.zeros((block,), jnp.float32))) / cols
        rstd = lax.rsqrt(var + eps)

        def write(j, carry):
            idx, mask = cols_of(j)
            a = pt.load(x_ref.at[idx], mask=mask, other=0.0).astype(jnp.float32)
            wv = pt.load(w_ref.at[idx], mask=mask)
            bv = pt.load(b_ref.at[idx], mask=mask)
            pt.store(o_ref.at[idx], ((a - mean) * rstd * wv + bv).astype(o_ref.dtype), mask=mask)
            return carry
        lax.fori_loop(0, nblocks, write, 0)
        mean_ref[...] = mean
        rstd_ref[...] = rstd

    row = pl.BlockSpec((None, cols), lambda i: (i, 0))
    vec = pl.BlockSpec((cols,), lambda i: (0,))
    scalar = pl.BlockSpec((None,), lambda i: (i,))
    return pl.pallas_call(
        body, grid=(rows,),
        out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct((rows,), jnp.float32),
                   jax.ShapeDtypeStruct((rows,), jnp.float32)),
        in_specs=[row, vec, vec], out_specs=(row, scalar, scalar), name="layer_norm_fwd",
        **call)(x, w, b)


def softmax(x, **call):
    """One row per program, the whole row in one masked load at array offsets."""
    rows, cols = x.shape
    block = pl.next_power_of_2(cols)

    def body(x_ref, o_ref):
        idx = jnp.arange(block)
        mask = idx < cols
        row = pt.load(x_ref.at[idx], mask=mask, other=-jnp.inf).astype(jnp.float32)
        e = jnp.exp(row - jnp.max(row))
        pt.store(o_ref.at[idx], (e / jnp.sum(e)).astype(o_ref.dtype), mask=mask)
    spec = pl.BlockSpec((None, cols), lambda i: (i, 0))
    return pl.pallas_call(body, grid=(rows,), out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          in_specs=[spec], out_specs=spec, name="softmax_rows", **call)(x)


# --- decode attention: one query per head, keys split across programs ---------------------

def decode_attention(q, k, v, *, splits=4, **call):
    """q: (batch, heads, dim); k, v: (batch, heads, seq, dim). Each program reduces one
    split of the keys to a partial (o, max, sum); the splits are combined in JAX."""
    batch, heads, seq, dim = k.shape
    chunk = seq // splits
    scale = 1.0 / dim ** 0.5

    def body(q_ref, k_ref, v_ref, o_ref, m_ref, l_ref):
        qv = q_ref[...].astype(jnp.float32) * scale
        kb = k_ref[...].astype(jnp.float32)
        s = jnp.sum(kb * qv[None, :], axis=1)                   # (chunk,)
        m = jnp.max(s)
        p = jnp.exp(s - m)
        o_ref[...] = jnp.sum(p[:, None] * v_ref[...].astype(jnp.float32), axis=0)
        m_ref[...] = m
        l_ref[...] = jnp.sum(p)

    part = jax.ShapeDtypeStruct((batch, heads, splits), jnp.float32)
    o, m, l = pl.pallas_call(
        body, grid=(batch, heads, splits),
        out_shape=(jax.ShapeDtypeStruct((batch, heads, splits, dim), jnp.float32), part, part),
        in_specs=[pl.BlockSpec((None, None, dim), lambda b, h, s: (b, h, 0)),
                  pl.BlockSpec((None, None, chunk, dim), lambda b, h, s: (b, h, s, 0)),
                  pl.BlockSpec((None, None, chunk, dim), lambda b, h, s: (b, h, s, 0))],
        out_specs=(pl.BlockSpec((None, None, None, dim), lambda b, h, s: (b, h, s, 0)),
                   pl.BlockSpec((None, None, None), lambda b, h, s: (b, h, s)),
                   pl.BlockSpec((None, None, None), lambda b, h, s: (b, h, s))),
        name="decode_attention", **call)(q, k, v)
    m_all = jnp.max(m, axis=-1, keepdims=True)
    w = jnp.exp(m - m_all) * 1.0
    return (jnp.sum(o * w[..., None], axis=2) / jnp.sum(l * w, axis=-1)[..., None]).astype(q.dtype)


# --- NumPy float64 references ---------------------------------------------------------------

def attention_ref(q, k, v):
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    s = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bhqk,bkhd->bqhd", p, v), p, s


def attention_bwd_ref(q, k, v, do):
    q, k, v, do = (np.asarray(a, np.float64) for a in (q, k, v, do))
    o, p, _ = attention_ref(q, k, v)
    scale = 1 / np.sqrt(q.shape[-1])
    dv = np.einsum("bhqk,bqhd->bkhd", p, do)
    dp = np.einsum("bqhd,bkhd->bhqk", do, v)
    delta = np.einsum("bqhd,bqhd->bhq", o, do)
    ds = p * (dp - delta[..., None])
    dq = np.einsum("bhqk,bkhd->bqhd", ds, k) * scale
    dk = np.einsum("bhqk,bqhd->bkhd", ds, q) * scale
    return dq, dk, dv


def layer_norm_ref(x, w, b, eps=1e-5):
    x = np.asarray(x, np.float64)
    mean = x.mean(1)
    var = ((x - mean[:, None]) ** 2).mean(1)
    rstd = 1 / np.sqrt(var + eps)
    return (x - mean[:, None]) * rstd[:, None] * w + b, mean, rstd


def softmax_ref(x):
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def decode_attention_ref(q, k, v):
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    s = np.einsum("bhd,bhsd->bhs", q, k) / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bhs,bhsd->bhd", p, v)


# --- the device-less compile cases (tests/gpu_aot_cases.py) ---------------------------------

def aot_cases():
    """name -> (fn, operand structs, num_warps, programs of its one pallas_call)."""
    params = pt.CompilerParams(num_warps=4, num_stages=2)
    f32 = jnp.float32

    def s(*shape, dtype=f32):
        return jax.ShapeDtypeStruct(shape, dtype)
    qkv = [s(2, 64, 2, 32, dtype=jnp.bfloat16)] * 3

    def fwd(q, k, v):
        return flash_attention_fwd(q, k, v, bq=32, bk=32, compiler_params=params)

    def bwd_dq(q, k, v, o, lse, do):   # the dq kernel alone (one custom call)
        return flash_attention_bwd(q, k, v, o, lse, do, bq=32, bk=32, compiler_params=params)[0]

    def bwd_dkv(q, k, v, o, lse, do):
        return flash_attention_bwd(q, k, v, o, lse, do, bq=32, bk=32, compiler_params=params)[1:]
    bwd_args = qkv + [s(2, 64, 2, 32, dtype=jnp.bfloat16), s(2, 2, 64), s(2, 64, 2, 32, dtype=jnp.bfloat16)]
    return {
        "flash_attention_fwd": (fwd, qkv, 4, 2 * 2 * 2),
        "flash_attention_dq": (bwd_dq, bwd_args, 4, 2 * 2 * 2),
        "flash_attention_dkv": (bwd_dkv, bwd_args, 4, 2 * 2 * 2),
        "layer_norm_fwd": (lambda x, w, b: layer_norm_fwd(x, w, b, compiler_params=params),
                           [s(8, 200), s(200), s(200)], 4, 8),
        "softmax_rows": (lambda x: softmax(x, compiler_params=params), [s(16, 300)], 4, 16),
        "decode_attention": (lambda q, k, v: decode_attention(q, k, v, compiler_params=params),
                             [s(2, 4, 32), s(2, 4, 128, 32), s(2, 4, 128, 32)], 4, 2 * 4 * 4),
    }
