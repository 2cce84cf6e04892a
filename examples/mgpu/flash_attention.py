"""A flash attention forward pass written against pallas_mgpu, in the style
of JAX's Mosaic GPU attention kernel: a CTA per (pair of query blocks, head),
two warpgroup threads (one query block each), SMEM shared by the CTA from
``pl.run_scoped(..., collective_axes="wg")``, TMA copies of Q and of K/V
blocks double-buffered with barriers, ``S = Q K^T`` and ``O += P V`` on
WGMMA, and the online softmax in registers. With JAX's module, only the two
import lines differ:

    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu
"""

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax

import pallas_frontend as pl
import pallas_mgpu as plgpu


def attention(q, k, v, *, block_q=64, block_kv=64, interpret=None):
    """softmax(q k^T / sqrt(d)) v per head; q, k, v: (heads, seq, head_dim) float16."""
    heads, seq_q, head_dim = q.shape
    seq_kv = k.shape[1]
    kv_steps = seq_kv // block_kv
    scale = 1.0 / math.sqrt(head_dim)
    swizzle = plgpu.find_swizzle(head_dim * jnp.dtype(q.dtype).itemsize * 8)
    transforms = (plgpu.TilingTransform((8, swizzle // jnp.dtype(q.dtype).itemsize)),
                  plgpu.SwizzleTransform(swizzle))

    def kernel(q_gmem, k_gmem, v_gmem, o_gmem):
        qi, h, wg = lax.axis_index("q"), lax.axis_index("heads"), lax.axis_index("wg")
        rows = pl.ds((qi * 2 + wg) * block_q, block_q)

        @functools.partial(
            pl.run_scoped,
            q_smem=plgpu.SMEM((2, block_q, head_dim), q.dtype, transforms=transforms),
            k_smem=plgpu.SMEM((2, 2, block_kv, head_dim), k.dtype, transforms=transforms),
            v_smem=plgpu.SMEM((2, 2, block_kv, head_dim), v.dtype, transforms=transforms),
            p_smem=plgpu.SMEM((2, block_q, block_kv), q.dtype, transforms=transforms),
            o_smem=plgpu.SMEM((2, block_q, head_dim), q.dtype, transforms=transforms),
            barriers=plgpu.Barrier(num_barriers=10),   # per wg: q, then (slot, k|v)
            collective_axes="wg",
        )
        def scope(q_smem, k_smem, v_smem, p_smem, o_smem, barriers):
            base = wg * 5
            plgpu.copy_gmem_to_smem(q_gmem.at[h, rows], q_smem.at[wg], barriers.at[base])

            def fetch(step, slot):
                kv = pl.ds(step * block_kv, block_kv)
                bar = base + 1 + slot * 2
                plgpu.copy_gmem_to_smem(k_gmem.at[h, kv], k_smem.at[wg, slot], barriers.at[bar])
                plgpu.copy_gmem_to_smem(v_gmem.at[h, kv], v_smem.at[wg, slot], barriers.at[bar + 1])

            fetch(0, 0)
            plgpu.barrier_wait(barriers.at[base])

            def kv_step(step, carry):
                acc, m_i, l_i = carry
                slot = step % 2

                @pl.when(step + 1 < kv_steps)
                def _():
                    fetch(step + 1, 1 - slot)
                plgpu.barrier_wait(barriers.at[base + 1 + slot * 2])

                def qk_scope(s_ref):
                    plgpu.wgmma(s_ref, q_smem.at[wg], k_smem.at[wg, slot].T)
                    return s_ref[...]
                s = pl.run_scoped(qk_scope, plgpu.ACC((block_q, block_kv), jnp.float32)) * scale
                m_new = jnp.maximum(m_i, s.max(axis=1))
                alpha = jnp.exp(m_i - m_new)
                p = jnp.exp(s - lax.broadcast_in_dim(m_new, s.shape, [0]))
                l_new = l_i * alpha + p.sum(axis=1)
                plgpu.barrier_wait(barriers.at[base + 2 + slot * 2])

                # P goes through SMEM: JAX 0.12's GPU interpreter has no WGMMA
                # with a register operand (the hardware has; JAX's kernel uses it)
                p_smem[wg] = p.astype(v.dtype)
                plgpu.commit_smem()

                def pv_scope(o_ref):
                    plgpu.wgmma(o_ref, p_smem.at[wg], v_smem.at[wg, slot])
                    return o_ref[...]
                pv = pl.run_scoped(pv_scope, plgpu.ACC((block_q, head_dim), jnp.float32))
                acc = acc * lax.broadcast_in_dim(alpha, acc.shape, [0]) + pv
                return acc, m_new, l_new

            m0 = plgpu.layout_cast(jnp.full((block_q,), -jnp.inf, jnp.float32),
                                   plgpu.Layout.WGMMA.reduce(1))
            l0 = plgpu.layout_cast(jnp.full((block_q,), 0.0, jnp.float32),
                                   plgpu.Layout.WGMMA.reduce(1))
            acc0 = plgpu.layout_cast(jnp.full((block_q, head_dim), 0.0, jnp.float32),
                                     plgpu.Layout.WGMMA)
            acc, _, l_i = lax.fori_loop(0, kv_steps, kv_step, (acc0, m0, l0))
            out = acc / lax.broadcast_in_dim(l_i, acc.shape, [0])
            o_smem[wg] = out.astype(q.dtype)
            plgpu.commit_smem()
            plgpu.copy_smem_to_gmem(o_smem.at[wg], o_gmem.at[h, rows])
            plgpu.wait_smem_to_gmem(0)

    f = plgpu.kernel(
        kernel, out_type=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(seq_q // (2 * block_q), heads), grid_names=("q", "heads"),
        num_threads=2, thread_name="wg", interpret=interpret)
    return f(q, k, v)


def reference(q, k, v):
    import numpy as np
    q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
    s = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


if __name__ == "__main__":
    import numpy as np
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 128, 64)).astype(np.float16) for _ in range(3))
    out = attention(q, k, v, interpret=plgpu.InterpretParams())
    print("max abs error vs NumPy:", float(np.abs(np.asarray(out, np.float64) - reference(q, k, v)).max()))
