"""Autotune search spaces of JAX's shipped TPU kernels
(``jax.experimental.pallas.ops.tpu``, or the same files run through ours):
each a ``pallas_frontend.search_space`` over the kernel's block parameters,
pruned by the kernel's rules, by an estimate of its VMEM (the double-buffered
blocks and scratch its ``pallas_call`` declares) against what a kernel gets on
the chip, and ranked by a roofline model with a size ``limit``::

    space = tuning_spaces.matmul(8192, 8192, 8192, jnp.bfloat16)
    tuned = pl.autotune(matmul, configs=space, name="jax.ops.tpu.matmul")

``chip``: a ``ChipVersion`` value (``"v5e"``) or None for the local TPU (else
v5e); ``budget``: VMEM bytes in place of the chip's default scoped limit.
"""

from __future__ import annotations

import numpy as np

from pallas_frontend import search_space
from pallas_tpu import tuning

F32 = np.float32


def _budget(budget, chip):
    return tuning.scoped_vmem_bytes(chip) if budget is None else int(budget)


def _matmul_vmem(bm, bk, bn, dtype, out_dtype):
    """A tiled matmul's VMEM: double-buffered (bm, bk) and (bk, bn) input blocks and
    (bm, bn) output block, and an f32 (bm, bn) accumulator in scratch."""
    return tuning.pipeline_vmem_bytes([((bm, bk), dtype), ((bk, bn), dtype),
                                       ((bm, bn), out_dtype)], scratch=[((bm, bn), F32)])


def matmul(m: int, n: int, k: int, dtype, *, chip=None, budget=None, limit: int | None = 10,
           smallest: int = 256, vmem_limit_bytes: int | None = None):
    """``matmul(x, y, *, block_shape=(bm, bn), block_k=bk)`` of ``ops/tpu/matmul.py``:
    an f32 accumulator (bm, bn) in scratch; every block size divides its dim.
    ``vmem_limit_bytes``: for a matmul that takes it (JAX's does not), the VMEM
    the candidates may fill and a config entry passing it on."""
    size = np.dtype(dtype).itemsize

    def vmem(p):
        return _matmul_vmem(p["bm"], p["bk"], p["bn"], dtype, dtype)

    def rank(p):
        bm, bn, bk = p["bm"], p["bn"], p["bk"]
        traffic = size * (m * k * (n // bn) + k * n * (m // bm) + m * n)
        steps = (m // bm) * (n // bn) * (k // bk)
        return tuning.roofline_seconds(2.0 * m * n * k, traffic, steps, chip)
    sizes = dict(smallest=smallest, largest=4096)
    extra = {} if vmem_limit_bytes is None else {"vmem_limit_bytes": vmem_limit_bytes}
    return search_space(
        {"bm": tuning.tile_sizes(m, **sizes), "bn": tuning.tile_sizes(n, **sizes),
         "bk": tuning.tile_sizes(k, **sizes)},
        vmem=vmem, budget=_budget(vmem_limit_bytes if budget is None else budget, chip), rank=rank, limit=limit,
        config=lambda p: {"block_shape": (p["bm"], p["bn"]), "block_k": p["bk"]} | extra)


def _flash_fwd_vmem(p, d, dtype):
    bq, bkm, bk = p["block_q"], p["block_k_major"], p["block_k"]
    blocks = [((bq, d), dtype), ((bkm, d), dtype), ((bkm, d), dtype), ((bq, d), dtype)]
    scratch = [((bq, 128), F32), ((bq, 128), F32), ((bq, d), F32),
               ((bq, bk), F32), ((bq, bk), F32)]          # m, l, acc; the s and p tiles
    return tuning.pipeline_vmem_bytes(blocks, scratch)


def _flash_bwd_vmem(p, d, dtype):
    bq, bkm, bk = p["bwd_q"], p["bwd_k_major"], p["bwd_k"]
    # the dkv kernel: q, do, k, v, dk, dv blocks; l, m, di (bq, 128) f32; dk, dv f32 scratch
    dkv = tuning.pipeline_vmem_bytes(
        [((bq, d), dtype)] * 2 + [((bkm, d), dtype)] * 4 + [((bq, 128), F32)] * 3,
        scratch=[((bkm, d), F32)] * 2 + [((bq, bk), F32)] * 4)
    # the dq kernel: q, do, dq, k, v blocks; l, m, di (bq, 128) f32 (a (bq, bkm) block
    # is the attention bias's, absent without one: counting it pruned the backward
    # blocks 1024/512/512, which compile on a v5e and were the fastest of a wide grid)
    dq = tuning.pipeline_vmem_bytes(
        [((bq, d), dtype)] * 3 + [((bkm, d), dtype)] * 2 + [((bq, 128), F32)] * 3,
        scratch=[((bq, d), F32)] + [((bq, bk), F32)] * 4)
    return max(dkv, dq)


def _major_minor(major, minor):
    return (f"{minor} does not divide {major}" if major % minor else None)


def flash_attention(batch: int, heads: int, q_len: int, kv_len: int, head_dim: int, dtype, *,
                    block_sizes_type, backward: bool = False, chip=None, budget=None,
                    limit: int | None = 12, smallest: int = 256,
                    fwd=None):
    """``flash_attention(..., block_sizes=BlockSizes(...))`` of
    ``ops/tpu/flash_attention.py`` (``block_sizes_type``: the ``BlockSizes`` class
    of the module tuned). Forward: ``block_q``, ``block_k_major``, ``block_k``
    (block_k divides block_k_major). ``backward``: the backward's blocks too,
    ``bwd_q`` (the q blocks of both backward kernels), ``bwd_k_major`` and
    ``bwd_k``; ``fwd`` fixes the forward's three (e.g. its own tuned pick)."""
    q_sizes = tuning.tile_sizes(q_len, smallest=smallest)
    k_sizes = tuning.tile_sizes(kv_len, smallest=smallest)
    params = ({"block_q": q_sizes, "block_k_major": k_sizes, "block_k": k_sizes}
              if fwd is None else {name: [fwd[name]] for name in
                                   ("block_q", "block_k_major", "block_k")})
    if backward:
        params |= {"bwd_q": q_sizes, "bwd_k_major": k_sizes, "bwd_k": k_sizes}
    flops = 4.0 * batch * heads * q_len * kv_len * head_dim * (3.5 if backward else 1.0)
    size = np.dtype(dtype).itemsize

    def check(p):
        why = _major_minor(p["block_k_major"], p["block_k"])
        if why is None and backward:
            why = _major_minor(p["bwd_k_major"], p["bwd_k"])
        # a score tile past 4 MiB of f32 (1024 x 1024) spills the vector registers'
        # VMEM backing many times over per inner step
        if why is None and p["block_q"] * p["block_k"] > 1 << 20:
            why = "the (block_q, block_k) f32 score tile is over 1024 x 1024"
        if why is None and backward and p["bwd_q"] * p["bwd_k"] > 1 << 20:
            why = "the (bwd_q, bwd_k) f32 score tile is over 1024 x 1024"
        return why

    def vmem(p):
        need = _flash_fwd_vmem(p, head_dim, dtype)
        return max(need, _flash_bwd_vmem(p, head_dim, dtype)) if backward else need

    def rank(p):
        bh = batch * heads
        qkv = size * q_len * head_dim
        traffic = bh * (2 * qkv + 2 * (q_len // p["block_q"]) * size * kv_len * head_dim)
        steps = bh * (q_len // p["block_q"]) * (kv_len // p["block_k_major"])
        inner = steps * (p["block_k_major"] // p["block_k"])
        if backward:     # dkv re-reads q and do per kv block, dq k and v per q block
            traffic += bh * size * head_dim * 2 * (
                (kv_len // p["bwd_k_major"]) * q_len + (q_len // p["bwd_q"]) * kv_len)
            grid = bh * (q_len // p["bwd_q"]) * (kv_len // p["bwd_k_major"])
            steps += 2 * grid
            inner += 2 * grid * (p["bwd_k_major"] // p["bwd_k"])
        return tuning.roofline_seconds(flops, traffic, steps + inner // 4, chip)

    def config(p):
        sizes = dict(block_q=p["block_q"], block_k_major=p["block_k_major"],
                     block_k=p["block_k"], block_b=1)
        bq, bkm, bk = ((p["bwd_q"], p["bwd_k_major"], p["bwd_k"]) if backward
                       else (p["block_q"], p["block_k_major"], p["block_k"]))
        sizes |= dict(block_q_major_dkv=bq, block_k_major_dkv=bkm, block_k_dkv=bk,
                      block_q_dkv=bq, block_k_major_dq=bkm, block_k_dq=bk, block_q_dq=bq)
        return {"block_sizes": block_sizes_type(**sizes)}
    return search_space(params, check=check, vmem=vmem, budget=_budget(budget, chip),
                        rank=rank, limit=limit, config=config)


def paged_attention(pages_per_sequence: int, page_size: int, head_dim: int, dtype, *,
                    chip=None, budget=None, limit: int | None = 6, tokens=(128, 4096)):
    """``paged_attention(..., pages_per_compute_block=p)`` of
    ``ops/tpu/paged_attention``: ``p`` divides the pages per sequence; the kernel
    double-buffers ``p`` pages of keys and of values; ``tokens``: the range of
    ``p * page_size`` tokens a step worth trying."""
    def check(p):
        n = p["pages_per_compute_block"]
        if pages_per_sequence % n:
            return f"{n} does not divide the {pages_per_sequence} pages per sequence"
        if not tokens[0] <= n * page_size <= tokens[1]:
            return f"{n * page_size} tokens a step is outside {tokens}"
        return None

    def vmem(p):
        pages = ((p["pages_per_compute_block"] * page_size, head_dim), dtype)
        return tuning.pipeline_vmem_bytes([pages, pages], scratch=[((8, 128), F32)] * 3)
    candidates = [1 << i for i in range(int(np.log2(pages_per_sequence)) + 1)]
    return search_space({"pages_per_compute_block": candidates}, check=check, vmem=vmem,
                        budget=_budget(budget, chip),
                        rank=lambda p: -p["pages_per_compute_block"], limit=limit)


def gmm(m: int, k: int, n: int, dtype, *, out_dtype=F32, chip=None, budget=None,
        limit: int | None = 10, smallest: int = 128):
    """``gmm(lhs, rhs, group_sizes, *, tiling=(tm, tk, tn))`` of
    ``ops/tpu/megablox/gmm.py``: tk and tn divide k and n (tm need not divide m:
    groups end mid-tile); an f32 accumulator (tm, tn); the output in ``out_dtype``
    (the kernel's ``preferred_element_type``, f32 by default)."""
    size = np.dtype(dtype).itemsize

    def vmem(p):
        return _matmul_vmem(p["tm"], p["tk"], p["tn"], dtype, out_dtype)

    def rank(p):
        tm, tk, tn = p["tm"], p["tk"], p["tn"]
        traffic = size * (m * k * (n // tn) + k * n * max(1, m // tm)) + m * n * 4
        steps = max(1, m // tm) * (n // tn) * (k // tk)
        return tuning.roofline_seconds(2.0 * m * k * n, traffic, steps, chip)
    sizes = dict(smallest=smallest, largest=2048)
    return search_space(
        {"tm": tuning.tile_sizes(max(m, 128), **sizes), "tk": tuning.tile_sizes(k, **sizes),
         "tn": tuning.tile_sizes(n, **sizes)},
        vmem=vmem, budget=_budget(budget, chip), rank=rank, limit=limit,
        config=lambda p: {"tiling": (p["tm"], p["tk"], p["tn"])})
