"""JAX-style kernels (tests/jax_style_ops.py) under JAX's Pallas interpret mode
and under ours, on the same fresh random inputs: the two agree, and both agree
with NumPy in float64."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_style_ops as ops
import pallas_frontend as pl

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from jax.experimental import pallas as jpl


@pytest.fixture
def rng():
    return np.random.default_rng()


def run_both(make, *args, **opts):
    theirs = make(jpl, interpret=True, **opts)(*args)
    ours = make(pl, **opts)(*args)
    return theirs, ours


def close(a, b, tol):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64),
                                   rtol=tol, atol=tol)


# --- NumPy float64 references -----------------------------------------------------

def attention_ref(q, k, v, seg, causal):
    q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
    s = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    mask = np.ones(s.shape, bool)
    if causal:
        mask &= np.tril(np.ones(s.shape[-2:], bool))
    if seg is not None:
        seg = np.asarray(seg)
        mask &= (seg[:, :, None] == seg[:, None, :])[:, None]
    s = np.where(mask, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bhqk,bkhd->bqhd", p, v)


def attention_grads_ref(q, k, v, seg, causal, do):
    """d(sum(out * do)) by the chain rule in float64."""
    q, k, v, do = (np.asarray(t, np.float64) for t in (q, k, v, do))
    scale = 1 / np.sqrt(q.shape[-1])
    s = np.einsum("bqhd,bkhd->bhqk", q, k) * scale
    mask = np.ones(s.shape, bool)
    if causal:
        mask &= np.tril(np.ones(s.shape[-2:], bool))
    if seg is not None:
        seg = np.asarray(seg)
        mask &= (seg[:, :, None] == seg[:, None, :])[:, None]
    s = np.where(mask, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dv = np.einsum("bhqk,bqhd->bkhd", p, do)
    dp = np.einsum("bqhd,bkhd->bhqk", do, v)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    dq = np.einsum("bhqk,bkhd->bqhd", ds, k) * scale
    dk = np.einsum("bhqk,bqhd->bkhd", ds, q) * scale
    return dq, dk, dv


def _qkv(rng, batch=1, seq=32, heads=2, d=16):
    return [jnp.asarray(rng.standard_normal((batch, seq, heads, d)), jnp.float32)
            for _ in range(3)]


def _segments(rng, batch, seq):
    # sorted segment ids: each query sees at least itself
    cuts = np.sort(rng.integers(1, seq, (batch, 2)), axis=1)
    pos = np.arange(seq)[None, :]
    return jnp.asarray((pos >= cuts[:, :1]).astype(np.int32) + (pos >= cuts[:, 1:]), jnp.int32)


# --- tests -----------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("with_segments", [False, True])
def test_flash_attention_forward(rng, causal, with_segments):
    q, k, v = _qkv(rng)
    seg = _segments(rng, 1, 32) if with_segments else None
    theirs, ours = run_both(ops.make_flash_attention, q, k, v, seg, causal=causal)
    close(ours, theirs, 2e-5)
    close(ours, attention_ref(q, k, v, seg, causal), 2e-4)


@pytest.mark.parametrize("causal,with_segments", [(False, False), (True, True)])
def test_flash_attention_backward(rng, causal, with_segments):
    q, k, v = _qkv(rng)
    do = jnp.asarray(rng.standard_normal(q.shape), jnp.float32)
    seg = _segments(rng, 1, 32) if with_segments else None

    def grads(P, **kw):
        f = ops.make_flash_attention(P, causal=causal, **kw)
        return jax.grad(lambda q, k, v: jnp.sum(f(q, k, v, seg) * do), argnums=(0, 1, 2))(q, k, v)

    theirs, ours = grads(jpl, interpret=True), grads(pl)
    close(ours, theirs, 5e-5)
    close(ours, attention_grads_ref(q, k, v, seg, causal, do), 5e-4)


def test_layer_norm(rng):
    x = jnp.asarray(rng.standard_normal((10, 96)) * 3 + 1, jnp.float32)   # 10 rows: ragged last block
    w = jnp.asarray(rng.standard_normal(96), jnp.float32)
    b = jnp.asarray(rng.standard_normal(96), jnp.float32)
    theirs, ours = run_both(ops.make_layer_norm, x, w, b)
    close([o[:10] for o in ours], [t[:10] for t in theirs], 1e-5)
    xs = np.asarray(x, np.float64)
    mean, var = xs.mean(1), xs.var(1)
    want = (xs - mean[:, None]) / np.sqrt(var[:, None] + 1e-5) * np.asarray(w) + np.asarray(b)
    close(ours[0], want, 1e-4)
    close(ours[1], mean, 1e-5)
    close(ours[2], 1 / np.sqrt(var + 1e-5), 1e-4)


def test_rms_norm(rng):
    x = jnp.asarray(rng.standard_normal((6, 128)), jnp.float32)
    w = jnp.asarray(rng.standard_normal(128), jnp.float32)
    theirs, ours = run_both(ops.make_rms_norm, x, w)
    close(ours, theirs, 1e-5)
    xs = np.asarray(x, np.float64)
    close(ours, xs / np.sqrt((xs ** 2).mean(1, keepdims=True) + 1e-6) * np.asarray(w), 1e-4)


def test_softmax(rng):
    x = jnp.asarray(rng.standard_normal((7, 64)) * 4, jnp.float32)
    theirs, ours = run_both(ops.make_softmax, x)
    close(ours, theirs, 1e-6)
    xs = np.asarray(x, np.float64)
    e = np.exp(xs - xs.max(1, keepdims=True))
    close(ours, e / e.sum(1, keepdims=True), 1e-5)


def test_decode_attention(rng):
    batch, heads, seq, d = 3, 2, 64, 16
    q = jnp.asarray(rng.standard_normal((batch, heads, d)), jnp.float32)
    k, v = (jnp.asarray(rng.standard_normal((batch, seq, heads, d)), jnp.float32)
            for _ in range(2))
    lengths = jnp.asarray(rng.integers(1, seq + 1, (batch,)), jnp.int32)
    theirs, ours = run_both(ops.make_decode_attention, q, k, v, lengths)
    close(ours, theirs, 2e-5)
    want = np.zeros((batch, heads, d))
    for b in range(batch):
        n = int(lengths[b])
        s = np.einsum("hd,shd->hs", np.asarray(q[b], np.float64),
                      np.asarray(k[b, :n], np.float64)) / np.sqrt(d)
        p = np.exp(s - s.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        want[b] = np.einsum("hs,shd->hd", p, np.asarray(v[b, :n], np.float64))
    close(ours, want, 2e-4)
