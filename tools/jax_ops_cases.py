"""The kernels of JAX's ``jax/experimental/pallas/ops/``, each called the way
JAX's own tests call it on CPU, on fresh random inputs.

A ``Case`` names the module (relative to the ops package), builds inputs for
a size ("small" for CI, "large" for the full table) and calls the entry point
of a loaded module (ours or JAX's). ``grad`` cases differentiate the sum of
the output with respect to the float inputs (files that define a VJP).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import numpy as np

SIZES = ("small", "large")


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    module: str
    inputs: Callable[[np.random.Generator, str], tuple]   # (rng, size) -> args
    call: Callable[[Any, tuple], Any]                        # (module, args) -> outputs
    grad: bool = False                                       # also jax.grad of sum(out)
    kind: str = "gpu"                                        # "gpu" (Triton-style) or "tpu"
    rtol: float = 1e-3


def _normal(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# --- GPU (Triton-style) kernels, interpret=True as in JAX's gpu_ops_test -----------

def _mha_inputs(rng, size):
    b, s, h, d = (1, 64, 2, 32) if size == "small" else (2, 256, 2, 64)
    return tuple(_normal(rng, b, s, h, d) for _ in range(3))


def _mha(mod, args, causal=False):
    q, k, v = args
    bs = mod.BlockSizes(block_q=32, block_k=32, block_q_dkv=32, block_kv_dkv=32,
                        block_q_dq=32, block_kv_dq=32)
    return mod.mha(q, k, v, None, causal=causal, block_sizes=bs, interpret=True)


def _norm_inputs(rng, size):
    b, s, n = (2, 16, 128) if size == "small" else (4, 64, 512)   # gpu_ops_test's layout
    return _normal(rng, b, s, n), _normal(rng, n), _normal(rng, n)


def _layer_norm(mod, args):
    return mod.layer_norm(*args, interpret=True)


def _rms_norm(mod, args):
    return mod.rms_norm(*args, interpret=True)


def _softmax_inputs(rng, size):
    return (_normal(rng, *((16, 128) if size == "small" else (128, 1024))),)


def _softmax(mod, args):
    return mod.softmax(args[0], axis=-1, interpret=True)


def _decode_inputs(rng, size):
    b, h, s, d = (2, 16, 256, 32) if size == "small" else (4, 16, 1024, 64)
    q, k, v = _normal(rng, b, h, d), _normal(rng, b, s, d), _normal(rng, b, s, d)
    start = rng.integers(0, s // 2, size=(b,)).astype(np.int32)
    return q, k, v, start


def _mqa(mod, args, with_start=False):
    q, k, v, start = args
    return mod.mqa(q, k, v, start_idx=start if with_start else None, block_k=64, k_splits=4,
                   interpret=True)


def _gqa_inputs(rng, size):
    b, hq, hkv, s, d = (2, 8, 2, 256, 32) if size == "small" else (4, 16, 4, 1024, 64)
    return (_normal(rng, b, hq, d), _normal(rng, b, s, hkv, d), _normal(rng, b, s, hkv, d))


def _gqa(mod, args):
    q, k, v = args
    return mod.gqa(q, k, v, block_k=64, k_splits=4, interpret=True)


def _paged_inputs(rng, size):
    b, page, max_len, hkv, ratio, d = ((2, 16, 128, 1, 16, 32) if size == "small"
                                       else (4, 16, 512, 2, 16, 64))
    pages_per_seq = max_len // page
    total = b * pages_per_seq
    k_pages = _normal(rng, hkv, total, page, d)
    v_pages = _normal(rng, hkv, total, page, d)
    tables = rng.permutation(total).astype(np.int32).reshape(b, pages_per_seq)
    q = _normal(rng, b, hkv * ratio, d)
    lengths = rng.integers(1, max_len + 1, size=(b,)).astype(np.int32)
    return q, k_pages, v_pages, tables, lengths


def _paged(mod, args):
    q, kp, vp, tables, lengths = args
    return mod.paged_attention(q, kp, vp, tables, lengths, block_h=16,
                               pages_per_compute_block=4, k_splits=2, interpret=True)


GPU_CASES = (
    Case("gpu.attention.mha", "gpu.attention", _mha_inputs, _mha, grad=True),
    Case("gpu.attention.mha(causal)", "gpu.attention", _mha_inputs,
         functools.partial(_mha, causal=True), grad=True),
    Case("gpu.layer_norm", "gpu.layer_norm", _norm_inputs, _layer_norm, grad=True),
    Case("gpu.rms_norm", "gpu.rms_norm", _norm_inputs, _rms_norm, grad=True),
    Case("gpu.softmax", "gpu.softmax", _softmax_inputs, _softmax),
    Case("gpu.decode_attention.mqa", "gpu.decode_attention", _decode_inputs, _mqa),
    Case("gpu.decode_attention.mqa(start_idx)", "gpu.decode_attention", _decode_inputs,
         functools.partial(_mqa, with_start=True)),
    Case("gpu.decode_attention.gqa", "gpu.decode_attention", _gqa_inputs, _gqa),
    Case("gpu.paged_attention", "gpu.paged_attention", _paged_inputs, _paged),
)

CASES = GPU_CASES
