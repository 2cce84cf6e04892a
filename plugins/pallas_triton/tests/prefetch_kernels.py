"""Scalar-prefetch kernels: block indices read from data inside the index maps.

``gather_blocks``: out block i = x block idx[i] (a gather of whole row blocks).
``block_sparse_attention``: splash-attention style. Per head and query block,
a prefetched list of the kv blocks that hold any unmasked key (``kv_idx``) and
its length (``kv_cnt``) drive the k/v/mask index maps; the kernel walks the
list along the last grid axis with an online (masked) softmax in scratch.
Each comes with a NumPy float64 reference and a random-input builder.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

import pallas_frontend as pl
import pallas_triton as pt

F32 = jnp.float32


# --- gather of blocks ------------------------------------------------------------------

def gather_blocks(idx, x, *, block_rows, **call):
    n_out = idx.shape[0]
    rows, cols = x.shape

    def body(idx_ref, x_ref, o_ref):
        # the prefetched index is also readable in the body
        o_ref[...] = x_ref[...] + idx_ref[pl.program_id(0)].astype(x_ref.dtype)

    return pl.pallas_call(
        body, jax.ShapeDtypeStruct((n_out * block_rows, cols), x.dtype),
        grid_spec=pt.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(n_out,),
            in_specs=[pl.BlockSpec((block_rows, cols), lambda i, idx: (idx[i], 0))],
            out_specs=pl.BlockSpec((block_rows, cols), lambda i, idx: (i, 0))),
        **call)(idx, x)


def gather_blocks_ref(idx, x, block_rows):
    x = np.asarray(x, np.float64)
    return np.concatenate([x[b * block_rows:(b + 1) * block_rows] + b for b in np.asarray(idx)])


def gather_inputs(rng, n_blocks=6, n_out=8, block_rows=8, cols=32):
    x = rng.standard_normal((n_blocks * block_rows, cols)).astype(np.float32)
    idx = rng.integers(0, n_blocks, n_out).astype(np.int32)
    return idx, x


# --- block-sparse attention ----------------------------------------------------------------

def block_sparse_attention(kv_idx, kv_cnt, q, k, v, mask, *, bq, bk, **call):
    """softmax(q k^T * scale, masked) v per head, visiting only the listed kv blocks."""
    heads, lq, d = q.shape
    max_kv = kv_idx.shape[-1]
    scale = 1.0 / np.sqrt(d)

    def last_listed(h, i, j, idx, cnt):
        # past the list's end keep the last listed block (no new fetch), as splash does
        return idx[h, i, jnp.minimum(j, cnt[h, i] - 1)]

    def body(idx_ref, cnt_ref, q_ref, k_ref, v_ref, mask_ref, o_ref, m_scr, l_scr, acc_scr):
        h, i, j = pl.program_id(0), pl.program_id(1), pl.program_id(2)

        @pl.when(j == 0)
        def _():
            m_scr[...] = jnp.full_like(m_scr, -jnp.inf)
            l_scr[...] = jnp.zeros_like(l_scr)
            acc_scr[...] = jnp.zeros_like(acc_scr)

        @pl.when(j < cnt_ref[h, i])
        def _():
            s = jax.lax.dot_general(q_ref[...], k_ref[...], (((1,), (1,)), ((), ())),
                                    precision=jax.lax.Precision.HIGHEST) * scale
            # the causal part of the mask comes from positions (the listed block's index)
            col0 = idx_ref[h, i, j] * bk
            rows = i * bq + jax.lax.broadcasted_iota(jnp.int32, (bq, bk), 0)
            cols = col0 + jax.lax.broadcasted_iota(jnp.int32, (bq, bk), 1)
            keep = (rows >= cols) & (mask_ref[...] != 0)
            s = jnp.where(keep, s, -jnp.inf)
            m_old = m_scr[...]
            m_new = jnp.maximum(m_old, s.max(axis=1, keepdims=True))
            # a row with nothing kept so far has m_new = -inf: keep its exponents at 0
            safe = jnp.where(m_new == -jnp.inf, 0.0, m_new)
            p = jnp.exp(s - safe)
            alpha = jnp.exp(m_old - safe)
            l_scr[...] = alpha * l_scr[...] + p.sum(axis=1, keepdims=True)
            acc_scr[...] = alpha * acc_scr[...] + jax.lax.dot_general(
                p, v_ref[...], (((1,), (0,)), ((), ())), precision=jax.lax.Precision.HIGHEST)
            m_scr[...] = m_new

        @pl.when(j == max_kv - 1)
        def _():
            o_ref[...] = (acc_scr[...] / l_scr[...]).astype(o_ref.dtype)

    kv_map = lambda h, i, j, idx, cnt: (h, last_listed(h, i, j, idx, cnt), 0)  # noqa: E731
    return pl.pallas_call(
        body, jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid_spec=pt.PrefetchScalarGridSpec(
            num_scalar_prefetch=2, grid=(heads, lq // bq, max_kv),
            in_specs=[pl.BlockSpec((None, bq, d), lambda h, i, j, idx, cnt: (h, i, 0)),
                      pl.BlockSpec((None, bk, d), kv_map),
                      pl.BlockSpec((None, bk, d), kv_map),
                      pl.BlockSpec((bq, bk), lambda h, i, j, idx, cnt:
                                   (i, last_listed(h, i, j, idx, cnt)))],
            out_specs=pl.BlockSpec((None, bq, d), lambda h, i, j, idx, cnt: (h, i, 0)),
            scratch_shapes=[pl.MemorySpace.DEFAULT((bq, 1), F32),
                            pl.MemorySpace.DEFAULT((bq, 1), F32),
                            pl.MemorySpace.DEFAULT((bq, d), F32)]),
        **call)(kv_idx, kv_cnt, q, k, v, mask)


def attention_inputs(rng, heads=2, lq=64, lkv=64, d=16, bq=16, bk=16, keep=0.6):
    """Random q/k/v, a random element mask, and per (head, q block) a random sorted
    subset of the causal kv blocks (the diagonal block always in, so every query
    row keeps at least its own key); list padding is random junk past the count."""
    nq, nk = lq // bq, lkv // bk
    q, k, v = (rng.standard_normal((heads, n, d)).astype(np.float32) for n in (lq, lkv, lkv))
    mask = (rng.random((lq, lkv)) < 0.8).astype(np.int32)
    np.fill_diagonal(mask, 1)
    kv_idx = rng.integers(0, nk, (heads, nq, nk)).astype(np.int32)
    kv_cnt = np.zeros((heads, nq), np.int32)
    for h in range(heads):
        for i in range(nq):
            diag = i * bq // bk
            listed = [b for b in range(nk) if b <= diag and (b == diag or rng.random() < keep)]
            kv_idx[h, i, :len(listed)] = listed
            kv_cnt[h, i] = len(listed)
    return kv_idx, kv_cnt, q, k, v, mask


def block_sparse_attention_ref(kv_idx, kv_cnt, q, k, v, mask, *, bq, bk):
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    heads, lq, d = q.shape
    out = np.empty_like(q)
    rows, cols = np.indices((lq, k.shape[1]))
    for h in range(heads):
        allowed = np.zeros((lq, k.shape[1]), bool)
        for i in range(lq // bq):
            for b in kv_idx[h, i, :kv_cnt[h, i]]:
                allowed[i * bq:(i + 1) * bq, b * bk:(b + 1) * bk] = True
        allowed &= (rows >= cols) & (np.asarray(mask) != 0)
        s = np.where(allowed, q[h] @ k[h].T / np.sqrt(d), -np.inf)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        out[h] = (p / p.sum(axis=1, keepdims=True)) @ v[h]
    return out


attention = functools.partial(block_sparse_attention, bq=16, bk=16)


# --- scatter: the output's block comes from data ----------------------------------------

def scatter_blocks(perm, x, *, block_rows, **call):
    """out block perm[i] = 2 * x block i: the output index map reads the prefetched
    permutation, so no grid axis can be proven independent (the grid loops)."""
    rows, cols = x.shape

    def body(perm_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    return pl.pallas_call(
        body, jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid_spec=pt.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(rows // block_rows,),
            in_specs=[pl.BlockSpec((block_rows, cols), lambda i, perm: (i, 0))],
            out_specs=pl.BlockSpec((block_rows, cols), lambda i, perm: (perm[i], 0))),
        **call)(perm, x)


def scatter_blocks_ref(perm, x, block_rows):
    x = np.asarray(x, np.float64)
    out = np.empty_like(x)
    for i, b in enumerate(np.asarray(perm)):
        out[b * block_rows:(b + 1) * block_rows] = 2 * x[i * block_rows:(i + 1) * block_rows]
    return out


def aot_cases():
    """name -> (fn, operand structs, num_warps, programs): for tests/gpu_aot_cases.py."""
    params = pt.CompilerParams(num_warps=4, num_stages=2)

    def s(*shape, dtype=F32):
        return jax.ShapeDtypeStruct(shape, dtype)
    i32 = jnp.int32
    # heads 2, 64 queries in blocks of 16, up to 4 kv blocks each: programs = 2 * 4
    attention_structs = [s(2, 4, 4, dtype=i32), s(2, 4, dtype=i32), s(2, 64, 16), s(2, 64, 16),
                         s(2, 64, 16), s(64, 64, dtype=i32)]
    return {
        "prefetch_gather_blocks": (
            lambda idx, x: gather_blocks(idx, x, block_rows=8, compiler_params=params),
            [s(8, dtype=i32), s(48, 32)], 4, 8),
        "prefetch_block_sparse_attention": (
            lambda *a: attention(*a, compiler_params=params), attention_structs, 4, 8),
    }
