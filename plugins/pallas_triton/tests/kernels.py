"""Kernels shared by the tests and the benchmark, written against pallas_frontend only."""


import jax
import jax.numpy as jnp
from jax import lax

import pallas_frontend as pl


def add(x, y, *, block=256, **call_kw):
    def body(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + y_ref[...]
    n = x.shape[0]
    spec = pl.BlockSpec((block,), lambda i: (i,))
    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(pl.cdiv(n, block),), in_specs=[spec, spec], out_specs=spec,
                          **call_kw)(x, y)


def matmul(a, b, *, bm=32, bn=32, bk=32, out_dtype=jnp.float32, **call_kw):
    m, k = a.shape
    _, n = b.shape
    assert k % bk == 0

    def body(a_ref, b_ref, o_ref):
        def step(kk, acc):
            blk_a = a_ref[:, pl.ds(kk * bk, bk)]
            blk_b = b_ref[pl.ds(kk * bk, bk), :]
            return acc + jnp.dot(blk_a, blk_b, preferred_element_type=jnp.float32)
        acc = lax.fori_loop(0, k // bk, step, jnp.zeros((bm, bn), jnp.float32))
        o_ref[...] = acc.astype(o_ref.dtype)
    return pl.pallas_call(
        body, out_shape=jax.ShapeDtypeStruct((m, n), out_dtype), grid=(pl.cdiv(m, bm), pl.cdiv(n, bn)),
        in_specs=[pl.BlockSpec((bm, k), lambda i, j: (i, 0)),
                  pl.BlockSpec((k, bn), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)), **call_kw)(a, b)


def softmax(x, *, block_cols=None, **call_kw):
    rows, cols = x.shape
    bc = block_cols or pl.next_power_of_2(cols)

    def body(x_ref, o_ref):
        v = x_ref[...].astype(jnp.float32)
        col = lax.broadcasted_iota(jnp.int32, v.shape, 0)
        v = jnp.where(col < cols, v, -jnp.inf)       # the edge block's padding
        v = v - jnp.max(v, axis=0)
        e = jnp.exp(v)
        o_ref[...] = (e / jnp.sum(e, axis=0)).astype(o_ref.dtype)
    return pl.pallas_call(
        body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(rows,),
        in_specs=[pl.BlockSpec((pl.squeezed, bc), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((pl.squeezed, bc), lambda i: (i, 0)), **call_kw)(x)


def layer_norm(x, w, b, *, eps=1e-5, **call_kw):
    rows, cols = x.shape

    def body(x_ref, w_ref, b_ref, o_ref):
        v = x_ref[...].astype(jnp.float32)
        mean = jnp.mean(v)
        c = v - mean
        var = jnp.mean(c * c)
        o_ref[...] = (c * lax.rsqrt(var + eps) * w_ref[...] + b_ref[...]).astype(o_ref.dtype)
    row = pl.BlockSpec((pl.squeezed, cols), lambda i: (i, 0))
    vec = pl.BlockSpec((cols,), lambda i: (0,))
    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(rows,),
                          in_specs=[row, vec, vec], out_specs=row, **call_kw)(x, w, b)


def flash_attention(q, k, v, *, bq=16, bk=16, **call_kw):
    """Single-head forward attention with online softmax; q,k,v: (seq, d)."""
    seq, d = q.shape
    scale = 1.0 / (d ** 0.5)

    def body(q_ref, k_ref, v_ref, o_ref):
        qb = q_ref[...].astype(jnp.float32) * scale

        def step(j, carry):
            m, l, acc = carry
            kb = k_ref[pl.ds(j * bk, bk), :].astype(jnp.float32)
            vb = v_ref[pl.ds(j * bk, bk), :].astype(jnp.float32)
            s = jnp.dot(qb, kb.T, preferred_element_type=jnp.float32)
            m_new = jnp.maximum(m, jnp.max(s, axis=1))
            p = jnp.exp(s - m_new[:, None])
            alpha = jnp.exp(m - m_new)
            l_new = l * alpha + jnp.sum(p, axis=1)
            acc = acc * alpha[:, None] + jnp.dot(p, vb, preferred_element_type=jnp.float32)
            return m_new, l_new, acc
        init = (jnp.full((bq,), -jnp.inf, jnp.float32), jnp.zeros((bq,), jnp.float32),
                jnp.zeros((bq, d), jnp.float32))
        _, l, acc = lax.fori_loop(0, seq // bk, step, init)
        o_ref[...] = (acc / l[:, None]).astype(o_ref.dtype)
    return pl.pallas_call(
        body, out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype), grid=(seq // bq,),
        in_specs=[pl.BlockSpec((bq, d), lambda i: (i, 0)),
                  pl.BlockSpec((seq, d), lambda i: (0, 0)),
                  pl.BlockSpec((seq, d), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((bq, d), lambda i: (i, 0)), **call_kw)(q, k, v)


KERNELS = {"add": add, "matmul": matmul, "softmax": softmax, "layer_norm": layer_norm,
           "flash_attention": flash_attention}
