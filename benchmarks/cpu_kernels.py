"""The kernels the CPU benchmarks time, each written once against a ``pl`` module.

Each factory returns ``(build, xla_fn, args)``: ``build(pl)`` gives the Pallas
call for ``pallas_frontend`` (default CPU path, no flags) or for
``jax.experimental.pallas`` (``interpret=True``); ``xla_fn`` is the same math
written with jax.numpy on whole arrays, the XLA anchor (for flash attention the
same blocked online-softmax algorithm, not a different one).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as jax_pl


def randn(seed, shape):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), jnp.float32)


def _call(pl, kernel, out_shape, grid, in_specs, out_specs):
    kw = {"interpret": True} if pl is jax_pl else {}
    return pl.pallas_call(kernel, out_shape=out_shape, grid=grid, in_specs=in_specs,
                          out_specs=out_specs, **kw)


def vector_add(n=1 << 20, b=1024):
    b = min(b, n)
    x, y = randn(0, (n,)), randn(1, (n,))

    def build(pl):
        def kernel(x_ref, y_ref, o_ref):
            o_ref[...] = x_ref[...] + y_ref[...]
        spec = pl.BlockSpec((b,), lambda i: (i,))
        return _call(pl, kernel, jax.ShapeDtypeStruct((n,), jnp.float32), (n // b,),
                     [spec, spec], spec)
    return build, lambda x, y: x + y, (x, y)


def matmul(n=512, block=128):
    block = min(block, n)
    a, b = randn(2, (n, n)), randn(3, (n, n))

    def build(pl):
        def kernel(a_ref, b_ref, o_ref):
            @pl.when(pl.program_id(2) == 0)
            def _():
                o_ref[...] = jnp.zeros_like(o_ref)
            o_ref[...] += jnp.dot(a_ref[...], b_ref[...])
        g = n // block
        return _call(pl, kernel, jax.ShapeDtypeStruct((n, n), jnp.float32), (g, g, g),
                     [pl.BlockSpec((block, block), lambda i, j, kk: (i, kk)),
                      pl.BlockSpec((block, block), lambda i, j, kk: (kk, j))],
                     pl.BlockSpec((block, block), lambda i, j, kk: (i, j)))
    return build, lambda a, b: a @ b, (a, b)


def _softmax_rows(v):
    e = jnp.exp(v - jnp.max(v, axis=-1, keepdims=True))
    return e / jnp.sum(e, axis=-1, keepdims=True)


def softmax(rows=4096, cols=1024, br=16):
    x = randn(4, (rows, cols))

    def build(pl):
        def kernel(x_ref, o_ref):
            o_ref[...] = _softmax_rows(x_ref[...])
        spec = pl.BlockSpec((br, cols), lambda i: (i, 0))
        return _call(pl, kernel, jax.ShapeDtypeStruct((rows, cols), jnp.float32), (rows // br,),
                     [spec], spec)
    return build, _softmax_rows, (x,)


def layer_norm(rows=4096, cols=1024, br=16, eps=1e-5):
    x, w, bias = randn(5, (rows, cols)), randn(6, (cols,)), randn(7, (cols,))

    def norm(v, w, b):
        mean = jnp.mean(v, axis=-1, keepdims=True)
        var = jnp.mean((v - mean) ** 2, axis=-1, keepdims=True)
        return (v - mean) * jax.lax.rsqrt(var + eps) * w + b

    def build(pl):
        def kernel(x_ref, w_ref, b_ref, o_ref):
            o_ref[...] = norm(x_ref[...], w_ref[...], b_ref[...])
        row = pl.BlockSpec((br, cols), lambda i: (i, 0))
        vec = pl.BlockSpec((cols,), lambda i: (0,))
        return _call(pl, kernel, jax.ShapeDtypeStruct((rows, cols), jnp.float32), (rows // br,),
                     [row, vec, vec], row)
    return build, norm, (x, w, bias)


def flash_attention(heads=8, seq=1024, d=64, bq=128, bk=128, anchor="blocked"):
    q, k, v = (randn(s, (heads, seq, d)) for s in (8, 9, 10))
    scale = 1.0 / np.sqrt(d)

    def build(pl):
        def kernel(q_ref, k_ref, v_ref, o_ref):
            qb = q_ref[...] * scale

            def body(t, carry):
                m, l, acc = carry
                kb = k_ref[pl.ds(t * bk, bk), :]
                vb = v_ref[pl.ds(t * bk, bk), :]
                s = qb @ kb.T
                m_new = jnp.maximum(m, s.max(axis=1))
                p = jnp.exp(s - m_new[:, None])
                corr = jnp.exp(m - m_new)
                return m_new, l * corr + p.sum(axis=1), acc * corr[:, None] + p @ vb

            init = (jnp.full((bq,), -jnp.inf, jnp.float32), jnp.zeros((bq,), jnp.float32),
                    jnp.zeros((bq, d), jnp.float32))
            _, l, acc = jax.lax.fori_loop(0, seq // bk, body, init)
            o_ref[...] = acc / l[:, None]
        qspec = pl.BlockSpec((None, bq, d), lambda h, i: (h, i, 0))
        kvspec = pl.BlockSpec((None, seq, d), lambda h, i: (h, 0, 0))
        return _call(pl, kernel, jax.ShapeDtypeStruct((heads, seq, d), jnp.float32),
                     (heads, seq // bq), [qspec, kvspec, kvspec], qspec)

    def ref(q, k, v):
        # The same online-softmax algorithm over the same kv blocks, on all heads
        # and query blocks at once: the kernel's math, written with jax.numpy.
        nq = seq // bq
        qb = (q * scale).reshape(heads, nq, bq, d)

        def body(t, carry):
            m, l, acc = carry
            kb = jax.lax.dynamic_slice_in_dim(k, t * bk, bk, axis=1)
            vb = jax.lax.dynamic_slice_in_dim(v, t * bk, bk, axis=1)
            s = jnp.einsum("hnqd,hkd->hnqk", qb, kb)
            m_new = jnp.maximum(m, s.max(axis=-1))
            p = jnp.exp(s - m_new[..., None])
            corr = jnp.exp(m - m_new)
            return (m_new, l * corr + p.sum(axis=-1),
                    acc * corr[..., None] + jnp.einsum("hnqk,hkd->hnqd", p, vb))

        init = (jnp.full((heads, nq, bq), -jnp.inf, jnp.float32),
                jnp.zeros((heads, nq, bq), jnp.float32),
                jnp.zeros((heads, nq, bq, d), jnp.float32))
        _, l, acc = jax.lax.fori_loop(0, seq // bk, body, init)
        return (acc / l[..., None]).reshape(heads, seq, d)
    def plain(q, k, v):
        # Attention as one would write it in jax.numpy: whole score matrix, no blocks.
        s = jnp.einsum("hqd,hkd->hqk", q * scale, k)
        return jnp.einsum("hqk,hkd->hqd", jax.nn.softmax(s, axis=-1), v)
    return build, (plain if anchor == "plain" else ref), (q, k, v)


def scan_ema(batch=64, seq=256, d=128, decay=0.9):
    """An in-kernel ``lax.scan`` (an exponential moving average along the sequence)."""
    x = randn(12, (batch, seq, d))

    def ema(rows):                      # rows: (seq, ...) -> running averages
        def step(c, xt):
            c = decay * c + xt
            return c, c
        return jax.lax.scan(step, jnp.zeros(rows.shape[1:], rows.dtype), rows)[1]

    def build(pl):
        def kernel(x_ref, o_ref):
            o_ref[...] = ema(x_ref[...])
        spec = pl.BlockSpec((None, seq, d), lambda b: (b, 0, 0))
        return _call(pl, kernel, jax.ShapeDtypeStruct((batch, seq, d), jnp.float32), (batch,),
                     [spec], spec)
    return build, lambda x: jnp.swapaxes(ema(jnp.swapaxes(x, 0, 1)), 0, 1), (x,)


def cumsum(n=1 << 20, b=1024):
    b = min(b, n)
    x = randn(11, (n,))

    def build(pl):
        # The running total is a second output revisited at every step: a
        # carried state, so the grid axis is sequential.
        def kernel(x_ref, o_ref, total_ref):
            @pl.when(pl.program_id(0) == 0)
            def _():
                total_ref[...] = jnp.zeros_like(total_ref)
            c = jnp.cumsum(x_ref[...]) + total_ref[0]
            o_ref[...] = c
            total_ref[...] = c[-1:]
        call = _call(pl, kernel, (jax.ShapeDtypeStruct((n,), jnp.float32),
                                  jax.ShapeDtypeStruct((1,), jnp.float32)), (n // b,),
                     [pl.BlockSpec((b,), lambda i: (i,))],
                     (pl.BlockSpec((b,), lambda i: (i,)), pl.BlockSpec((1,), lambda i: (0,))))
        return lambda x: call(x)[0]
    return build, jnp.cumsum, (x,)
