"""NumPy float64 references of the kernels ``benchmarks/tpu_check.py`` runs.

Pure NumPy on purpose: ``tools/tpu_remote.py`` loads this file by path on a TPU
host whose Python cannot import this project (an older JAX), so nothing here
may import ``jax`` or ``pallas_frontend``. Each function takes the kernel's
inputs as NumPy arrays and returns its outputs (a tuple) in float64.
"""

from __future__ import annotations

import numpy as np


def _f64(*arrays):
    return [np.asarray(a, np.float64) for a in arrays]


def matmul(x, y):
    x, y = _f64(x, y)
    return (x @ y,)


def transpose(x):
    return (np.asarray(x, np.float64).T,)


def _softmax(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _causal_mask(q_len, kv_len):
    return np.tril(np.ones((q_len, kv_len), bool), k=kv_len - q_len)


def _t(a):
    return np.swapaxes(a, -1, -2)


def _scores(q, k, causal, sm_scale):
    s = (q @ _t(k)) * sm_scale      # matmul, not einsum: BLAS at these sizes
    if causal:
        s = np.where(_causal_mask(s.shape[-2], s.shape[-1]), s, -np.inf)
    return s


def attention(q, k, v, *, causal=False, sm_scale=1.0):
    """Plain softmax attention over (..., seq, d) arrays."""
    q, k, v = _f64(q, k, v)
    return (_softmax(_scores(q, k, causal, sm_scale)) @ v,)


def attention_bwd(q, k, v, do, *, causal=False, sm_scale=1.0):
    """(dq, dk, dv) of ``sum(attention(q, k, v) * do)``, by the chain rule
    through the softmax (dS = P * (dP - rowsum(dP * P)))."""
    q, k, v, do = _f64(q, k, v, do)
    p = _softmax(_scores(q, k, causal, sm_scale))
    dv = _t(p) @ do
    dp = do @ _t(v)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True)) * sm_scale
    return ds @ k, _t(ds) @ q, dv


def paged_attention(q, k_pages, v_pages, lengths, page_indices):
    """Decode attention of q (batch, heads, d) over each sequence's pages:
    k_pages/v_pages (kv_heads, pages, page_size, d); a query head h reads kv head
    h // (heads // kv_heads); only the first ``lengths[b]`` tokens count. No
    scaling (JAX's kernel applies none; callers pre-scale q)."""
    q, k_pages, v_pages = _f64(q, k_pages, v_pages)
    batch, heads, d = q.shape
    kv_heads, _, page_size, _ = k_pages.shape
    group = heads // kv_heads
    out = np.zeros((batch, heads, d))
    for b in range(batch):
        n = int(lengths[b])
        pages = np.asarray(page_indices[b])
        for h in range(heads):
            kvh = h // group
            keys = k_pages[kvh, pages].reshape(-1, d)[:n]
            vals = v_pages[kvh, pages].reshape(-1, d)[:n]
            p = _softmax(keys @ q[b, h])
            out[b, h] = p @ vals
    return (out,)


def grouped_matmul(lhs, rhs, group_sizes):
    """Rows of lhs in consecutive groups; group g is multiplied by rhs[g]."""
    lhs, rhs = _f64(lhs, rhs)
    out = np.zeros((lhs.shape[0], rhs.shape[2]))
    start = 0
    for g, size in enumerate(np.asarray(group_sizes)):
        stop = start + int(size)
        out[start:stop] = lhs[start:stop] @ rhs[g]
        start = stop
    return (out,)
