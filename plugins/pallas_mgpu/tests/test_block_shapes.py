"""Block shapes of portable kernels that Mosaic GPU's native tiles do not fit
(issue 25): blocks past the 256-element TMA box, 1-D blocks below a
warpgroup's 128 lanes, 2-D tiles of 8-32 rows, 32-row and float32 matmuls.
Each runs in Mosaic GPU interpret mode against NumPy (float64) on fresh random
data and lowers for cuda (no CUDA plugin needed); what cannot map is refused
before lowering with the operand and the line. The device-less H100 compiles
(ptxas, spills) of the same kernels are in test_cuda_aot.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_mgpu as plgpu
from pallas_frontend.backend_api import BackendCapabilityError
from pallas_frontend.testing import kernels as K
from pallas_mgpu import aot

CP = {"compiler_params": plgpu.CompilerParams()}
S = jax.ShapeDtypeStruct


def small_add(n: int, **call):
    """The quickstart's add: no grid, the whole (n,) arrays as one block."""
    def body(x, y, o):
        o[...] = x[...] + y[...]
    return pl.pallas_call(body, S((n,), jnp.float32), **call)


def matmul_rhs_nk(m, n, k, bm, **call):
    """x @ w.T with w blocks given as (n, k) (an attention's q @ k.T)."""
    def body(x, w, o):
        o[...] = jax.lax.dot_general(x[...], w[...], (((1,), (1,)), ((), ())),
                                     preferred_element_type=jnp.float32)
    return pl.pallas_call(body, S((m, n), jnp.float32), grid=(m // bm,),
                          in_specs=[pl.BlockSpec((bm, k), lambda i: (i, 0)),
                                    pl.BlockSpec((n, k), lambda i: (0, 0))],
                          out_specs=pl.BlockSpec((bm, n), lambda i: (i, 0)), **call)


def flash_attention(seq: int, d: int, bq: int, bkv: int, dtype, **call):
    """The seed API's attention: one query block per grid point, an in-kernel
    loop over KV blocks with the running max and sum as (bq, 1) carries and
    q @ k.T as a dot_general contracting both minor dims."""
    def body(q, k, v, o):
        qv = (q[...].astype(jnp.float32) * (1.0 / np.sqrt(d))).astype(dtype)

        def step(j, carry):
            acc, m, l = carry
            kb, vb = k[pl.ds(j * bkv, bkv), :], v[pl.ds(j * bkv, bkv), :]
            s = jax.lax.dot_general(qv, kb, (((1,), (1,)), ((), ())),
                                    preferred_element_type=jnp.float32)
            m_new = jnp.maximum(m, s.max(axis=1, keepdims=True))
            p = jnp.exp(s - m_new)
            alpha = jnp.exp(m - m_new)
            pv = jnp.dot(p.astype(dtype), vb, preferred_element_type=jnp.float32)
            return acc * alpha + pv, m_new, l * alpha + p.sum(axis=1, keepdims=True)
        init = (jnp.zeros((bq, d), jnp.float32), jnp.full((bq, 1), -jnp.inf, jnp.float32),
                jnp.zeros((bq, 1), jnp.float32))
        acc, _, l = jax.lax.fori_loop(0, seq // bkv, step, init)
        o[...] = acc / l
    return pl.pallas_call(body, S((seq, d), jnp.float32), grid=(seq // bq,),
                          in_specs=[pl.BlockSpec((bq, d), lambda i: (i, 0)),
                                    pl.BlockSpec((seq, d), lambda i: (0, 0)),
                                    pl.BlockSpec((seq, d), lambda i: (0, 0))],
                          out_specs=pl.BlockSpec((bq, d), lambda i: (i, 0)), **call)


def attention_ref(q, k, v):
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    s = q @ k.T / np.sqrt(q.shape[1])
    p = np.exp(s - s.max(-1, keepdims=True))
    return p / p.sum(-1, keepdims=True) @ v


def _mm_ref(x, y):
    return np.asarray(x, np.float64) @ np.asarray(y, np.float64)


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# name -> (builder(**call), operand shapes and dtypes, reference, rtol)
CASES = {
    "add_block_1024_ragged": (lambda **c: K.vector_add(3000, 1024, **c), [((3000,), "float32")] * 2,
                              K.vector_add_ref, 1e-6),
    "add_8_no_grid": (lambda **c: small_add(8, **c), [((8,), "float32")] * 2,
                      K.vector_add_ref, 1e-6),
    "add_200_no_grid": (lambda **c: small_add(200, **c), [((200,), "float32")] * 2,
                        K.vector_add_ref, 1e-6),
    "softmax_rows_8": (lambda **c: K.softmax(128, 64, 8, **c), [((128, 64), "float32")],
                       K.softmax_ref, 1e-5),
    "layer_norm_rows_8": (lambda **c: K.layer_norm(32, 64, 8, 1e-5, **c),
                          [((32, 64), "float32"), ((64,), "float32"), ((64,), "float32")],
                          lambda x, w, b: K.layer_norm_ref(x, w, b, 1e-5), 1e-4),
    "layer_norm_rows_64": (lambda **c: K.layer_norm(128, 128, 64, 1e-5, **c),
                           [((128, 128), "float32"), ((128,), "float32"), ((128,), "float32")],
                           lambda x, w, b: K.layer_norm_ref(x, w, b, 1e-5), 1e-4),
    "matmul_rows_32_f16": (lambda **c: K.blocked_matmul(64, 256, 256, 32, 128, 128, **c),
                           [((64, 256), "float16"), ((256, 256), "float16")],
                           _mm_ref, 1e-3),
    "matmul_rows_32_f32": (lambda **c: K.blocked_matmul(64, 256, 256, 32, 128, 128, **c),
                           [((64, 256), "float32"), ((256, 256), "float32")],
                           _mm_ref, 1e-5),
    "matmul_rows_32_rhs_nk_f16": (lambda **c: matmul_rhs_nk(64, 128, 128, 32, **c),
                                  [((64, 128), "float16"), ((128, 128), "float16")],
                                  lambda x, w: _mm_ref(x, np.asarray(w).T), 1e-3),
    "flash_attention_f16": (lambda **c: flash_attention(256, 64, 64, 64, jnp.float16, **c),
                            [((256, 64), "float16")] * 3, attention_ref, 1e-2),
    "flash_attention_f32": (lambda **c: flash_attention(256, 64, 64, 64, jnp.float32, **c),
                            [((256, 64), "float32")] * 3, attention_ref, 1e-4),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_interpret_mode_matches_numpy(case, rng):
    build, operands, ref, rtol = CASES[case]
    args = [rng.standard_normal(shape).astype(dtype) for shape, dtype in operands]
    got = np.asarray(build(interpret=plgpu.InterpretParams())(*args), np.float64)
    want = ref(*args)
    scale = np.abs(want).max()
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale)


@pytest.mark.parametrize("case", sorted(CASES))
def test_lowers_for_cuda(case):
    build, operands, _, _ = CASES[case]
    aot.lower_for_cuda(build(**CP), *[S(shape, dtype) for shape, dtype in operands])


def test_block_past_the_tma_box_that_is_not_contiguous_is_refused():
    def body(x, o):
        o[...] = x[...] * 2
    spec = pl.BlockSpec((8, 512), lambda i, j: (i, j))
    f = pl.pallas_call(body, S((64, 1024), jnp.float32), grid=(8, 2), in_specs=[spec],
                       out_specs=spec, **CP)
    with pytest.raises(BackendCapabilityError,
                       match=r"block \(8, 512\) of args\[0\].*TMA box.*test_block_shapes.py"):
        aot.lower_for_cuda(f, S((64, 1024), jnp.float32))


def test_tile_rows_not_a_multiple_of_8_are_refused():
    f = K.softmax(32, 64, 4, **CP)
    with pytest.raises(BackendCapabilityError,
                       match=r"reduction over a \(4, 64\) tile.*kernels.py"):
        aot.lower_for_cuda(f, S((32, 64), jnp.float32))


def test_matmul_no_instruction_maps_is_refused_with_the_reason():
    f = K.blocked_matmul(64, 64, 64, 8, 64, 64, **CP)      # 8 rows: neither WGMMA nor mma.sync
    s = [S((64, 64), jnp.float16)] * 2
    with pytest.raises(BackendCapabilityError, match=r"m=8.*mma.sync|m=8.*warp-level MMA"):
        aot.lower_for_cuda(f, *s)


def test_blocks_past_the_smem_of_a_cta_are_refused():
    f = K.blocked_matmul(512, 512, 512, 256, 256, 256, **CP)
    s = [S((512, 512), jnp.float32)] * 2
    with pytest.raises(BackendCapabilityError, match=r"SMEM blocks need \d+ KiB.*args\[0\]"):
        aot.lower_for_cuda(f, *s)


def test_2d_array_that_is_not_whole_tiles_is_refused():
    # position_ragged runs in interpret mode (conformance suite); compiled, the
    # swizzled SMEM tiles' TMA needs the array's dims to be multiples of (8, 32)
    f = K.position_ragged(100, 200, 64, 128, **CP)
    with pytest.raises(BackendCapabilityError,
                       match=r"args\[0\] has shape \(100, 200\).*\(8, 32\) tiles.*kernels.py"):
        aot.lower_for_cuda(f, S((100, 200), jnp.float32))
