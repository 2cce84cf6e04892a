"""What the interpreter hands XLA on a first call: the program's size, and the
sequential fallback when the batched body cannot be traced (no timing here)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import mlir

import pallas_frontend as pl
from conftest import rand
from pallas_frontend import backend_api

H, S, D, BQ, BK = 2, 64, 16, 16, 16


def _attention_call():
    # The flash-attention shape of issue 27: grid (heads, query blocks), whole
    # K/V per head, a fori_loop over K/V blocks read with pl.ds.
    def kernel(q_ref, k_ref, v_ref, o_ref):
        q = q_ref[...]

        def body(t, carry):
            m, l, acc = carry
            kb = k_ref[pl.ds(t * BK, BK), :]
            vb = v_ref[pl.ds(t * BK, BK), :]
            s = jnp.dot(q, kb.T, precision="highest")
            m_new = jnp.maximum(m, s.max(axis=1))
            p = jnp.exp(s - m_new[:, None])
            corr = jnp.exp(m - m_new)
            return (m_new, l * corr + p.sum(axis=1),
                    acc * corr[:, None] + jnp.dot(p, vb, precision="highest"))

        init = (jnp.full((BQ,), -jnp.inf, jnp.float32), jnp.zeros((BQ,), jnp.float32),
                jnp.zeros((BQ, D), jnp.float32))
        _, l, acc = jax.lax.fori_loop(0, S // BK, body, init)
        o_ref[...] = acc / l[:, None]

    qspec = pl.BlockSpec((None, BQ, D), lambda h, i: (h, i, 0))
    kvspec = pl.BlockSpec((None, S, D), lambda h, i: (h, 0, 0))
    return pl.pallas_call(kernel, jax.ShapeDtypeStruct((H, S, D), jnp.float32),
                          grid=(H, S // BQ), in_specs=[qspec, kvspec, kvspec], out_specs=qspec)


def _blocked_jnp(q, k, v):
    # The same online-softmax algorithm on all heads and query blocks at once.
    qb = q.reshape(H, S // BQ, BQ, D)

    def body(t, carry):
        m, l, acc = carry
        kb = jax.lax.dynamic_slice_in_dim(k, t * BK, BK, axis=1)
        vb = jax.lax.dynamic_slice_in_dim(v, t * BK, BK, axis=1)
        s = jnp.einsum("hnqd,hkd->hnqk", qb, kb, precision="highest")
        m_new = jnp.maximum(m, s.max(axis=-1))
        p = jnp.exp(s - m_new[..., None])
        corr = jnp.exp(m - m_new)
        return (m_new, l * corr + p.sum(axis=-1),
                acc * corr[..., None] + jnp.einsum("hnqk,hkd->hnqd", p, vb, precision="highest"))

    shape = (H, S // BQ, BQ)
    init = (jnp.full(shape, -jnp.inf, jnp.float32), jnp.zeros(shape, jnp.float32),
            jnp.zeros(shape + (D,), jnp.float32))
    _, l, acc = jax.lax.fori_loop(0, S // BK, body, init)
    return (acc / l[..., None]).reshape(H, S, D)


def _ops(text: str) -> list[str]:
    return re.findall(r"= (?:\"?)(stablehlo\.[a-z_]+)", text)


def test_fori_loop_attention_lowers_to_one_loop_of_jnp_size(rng):
    q, k, v = (rand(rng, H, S, D) for _ in range(3))
    call = _attention_call()
    ours = _ops(jax.jit(call).lower(q, k, v).as_text())
    ref = _ops(jax.jit(_blocked_jnp).lower(q, k, v).as_text())
    # One while loop for the whole grid (not one per grid point or grid step),
    # and a program of the jnp version's size, not the loop unrolled.
    assert ours.count("stablehlo.while") == 1
    assert len(ours) <= 2 * len(ref), (len(ours), len(ref))
    s = np.einsum("hqd,hkd->hqk", q.astype(np.float64), k.astype(np.float64))
    p = np.exp(s - s.max(-1, keepdims=True))
    want = np.einsum("hqk,hkd->hqd", p / p.sum(-1, keepdims=True), v.astype(np.float64))
    np.testing.assert_allclose(np.asarray(call(q, k, v)), want, rtol=1e-4, atol=1e-5)


_twice_p = Primitive("first_call_test_twice")      # no batching rule: vmap refuses it
_twice_p.def_impl(lambda x: 2 * x)
_twice_p.def_abstract_eval(lambda x: x)


def _twice_rule(ctx, x):
    return mlir.lower_fun(lambda y: 2 * y, multiple_results=False)(ctx, x)


mlir.register_lowering(_twice_p, _twice_rule)
backend_api.register_interpret_rule(_twice_p)


def test_body_vmap_refuses_runs_sequentially(rng):
    x = rand(rng, 8, 16)
    total = rand(rng, 1, 16)

    def kernel(x_ref, t_ref, o_ref):
        o_ref[...] = _twice_p.bind(x_ref[...]) + t_ref[...]

    spec = pl.BlockSpec((2, 16), lambda i: (i, 0))
    call = pl.pallas_call(kernel, jax.ShapeDtypeStruct((8, 16), jnp.float32), grid=(4,),
                          in_specs=[spec, pl.BlockSpec((1, 16), lambda i: (0, 0))],
                          out_specs=spec)
    got = np.asarray(jax.jit(call)(x, total))
    np.testing.assert_allclose(got, 2 * x.astype(np.float64) + total, rtol=1e-6)
