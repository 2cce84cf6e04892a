"""JAX-GPU-ops-style kernels (tests/gpu_kernels.py) under Triton's interpreter, against
the frontend's reference interpreter and NumPy float64 on fresh random data."""

import numpy as np

import gpu_kernels as G
import pallas_triton as pt

TRITON = dict(interpret=pt.InterpretParams())
REF = dict(interpret=True)


def _qkv(rng, shape=(1, 32, 2, 16)):
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(3)]


def _close(got, want, tol):
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                               rtol=tol, atol=tol)


def test_flash_attention_forward(rng):
    q, k, v = _qkv(rng)
    o, lse = G.flash_attention_fwd(q, k, v, **TRITON)
    o_ref, lse_ref = G.flash_attention_fwd(q, k, v, **REF)
    want, _, scores = G.attention_ref(q, k, v)
    _close(o, want, 1e-4)
    m = scores.max(-1)
    _close(lse, m + np.log(np.exp(scores - m[..., None]).sum(-1)), 1e-4)
    _close(o, o_ref, 1e-5)
    _close(lse, lse_ref, 1e-5)


def test_flash_attention_backward(rng):
    q, k, v = _qkv(rng)
    do = rng.standard_normal(q.shape).astype(np.float32)
    o, lse = G.flash_attention_fwd(q, k, v, **REF)
    got = G.flash_attention_bwd(q, k, v, o, lse, do, **TRITON)
    ref = G.flash_attention_bwd(q, k, v, o, lse, do, **REF)
    want = G.attention_bwd_ref(q, k, v, do)
    for g, r, w in zip(got, ref, want):
        _close(g, w, 2e-4)
        _close(g, r, 1e-5)


def test_layer_norm_masked_array_offsets(rng):
    x = rng.standard_normal((4, 200)).astype(np.float32) * 3 + 1
    w, b = (rng.standard_normal(200).astype(np.float32) for _ in range(2))
    got = G.layer_norm_fwd(x, w, b, **TRITON)
    ref = G.layer_norm_fwd(x, w, b, **REF)
    for g, r, want in zip(got, ref, G.layer_norm_ref(x, w, b)):
        _close(g, want, 1e-4)
        _close(g, r, 1e-5)


def test_softmax_masked_array_offsets(rng):
    x = rng.standard_normal((6, 300)).astype(np.float32)
    got = G.softmax(x, **TRITON)
    _close(got, G.softmax_ref(x), 1e-5)
    _close(got, G.softmax(x, **REF), 1e-6)


def test_decode_attention(rng):
    q = rng.standard_normal((2, 2, 32)).astype(np.float32)
    k, v = (rng.standard_normal((2, 2, 64, 32)).astype(np.float32) for _ in range(2))
    got = G.decode_attention(q, k, v, **TRITON)
    _close(got, G.decode_attention_ref(q, k, v), 1e-5)
    _close(got, G.decode_attention(q, k, v, **REF), 1e-5)
