"""Blocks of any static size (issue 25): padded to powers of two under a mask (padding.py).

Under Triton's interpreter vs NumPy float64 on fresh data, and compiled for sm_90
and gfx942 (Triton compiles for AMD without ROCm). Before padding.py each of these
kernels was refused ("needs power-of-two block dims").
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import pallas_frontend as pl
import pallas_triton as pt
from pallas_frontend.backend_api import BackendCapabilityError

TRITON = dict(interpret=pt.InterpretParams())
TARGETS = [("cuda", 90), ("hip", "gfx942")]


def f64(x):
    return np.asarray(x, np.float64)


def _stencil(n, **call):
    """out[j] = x[j-1] + 2 x[j] + x[j+1], from (66,)-element blocks with a halo of 1."""
    def body(x_ref, o_ref):
        x = x_ref[...]
        o_ref[...] = x[:-2] + 2 * x[1:-1] + x[2:]
    return pl.pallas_call(
        body, grid=(n // 64,),
        in_specs=[pl.BlockSpec((pl.Element(66, (1, 1)),), lambda i: (i * 64,))],
        out_specs=pl.BlockSpec((64,), lambda i: (i,)),
        out_shape=jax.ShapeDtypeStruct((n,), jnp.float32), **call)


def test_stencil_66_element_block(rng):
    x = rng.standard_normal(256).astype(np.float32)
    out = np.asarray(_stencil(256, **TRITON)(x))
    xd = f64(x)
    ref = xd[:-2] + 2 * xd[1:-1] + xd[2:]
    # out[0] and out[-1] read the halo past the array: unspecified (docs/user-guide.md)
    np.testing.assert_allclose(out[1:-1], ref, rtol=1e-6, atol=1e-6)


def _rows(**call):
    """(3, 100) blocks: elementwise, and sums/max/min over both padded axes."""
    def body(x_ref, o_ref, s_ref, m_ref):
        v = x_ref[...] + 1.0             # padded lanes: 1, not the neutral 0 of a sum
        o_ref[...] = v * 2 + jnp.sum(v, axis=1, keepdims=True)
        s_ref[...] = jnp.max(v, axis=0, keepdims=True) - jnp.min(v, axis=0, keepdims=True)
        m_ref[...] = jnp.sum(v, axis=(0, 1), keepdims=True) + jnp.zeros((1, 100), v.dtype)
    spec = pl.BlockSpec((3, 100), lambda i, j: (i, j))
    row = pl.BlockSpec((1, 100), lambda i, j: (i, j))
    return pl.pallas_call(body, grid=(3, 3), in_specs=[spec], out_specs=[spec, row, row],
                          out_shape=[jax.ShapeDtypeStruct((9, 300), jnp.float32),
                                     jax.ShapeDtypeStruct((3, 300), jnp.float32),
                                     jax.ShapeDtypeStruct((3, 300), jnp.float32)], **call)


def test_block_3x100_reductions(rng):
    x = rng.standard_normal((9, 300)).astype(np.float32)
    out, spread, total = (np.asarray(o) for o in _rows(**TRITON)(x))
    blocks = (f64(x) + 1).reshape(3, 3, 3, 100)                        # (i, row, j, col)
    rowsum = blocks.sum(3, keepdims=True)
    np.testing.assert_allclose(out, (2 * blocks + rowsum).reshape(9, 300), rtol=1e-5, atol=1e-4)
    ref_spread = (blocks.max(1) - blocks.min(1)).reshape(3, 300)
    np.testing.assert_allclose(spread, ref_spread, rtol=1e-6, atol=1e-6)
    ref_total = np.repeat(blocks.sum((1, 3)), 100, axis=1)
    np.testing.assert_allclose(total, ref_total, rtol=1e-5, atol=1e-3)


def test_ragged_edge_block_of_odd_size(rng):
    """(3, 100) blocks over a (10, 250) array: the edge blocks overhang as well."""
    def body(x_ref, o_ref):
        o_ref[...] = jnp.exp(x_ref[...]) + 1
    spec = pl.BlockSpec((3, 100), lambda i, j: (i, j))
    x = rng.standard_normal((10, 250)).astype(np.float32)
    out = pl.pallas_call(body, grid=(4, 3), in_specs=[spec], out_specs=spec,
                         out_shape=jax.ShapeDtypeStruct((10, 250), jnp.float32), **TRITON)(x)
    np.testing.assert_allclose(np.asarray(out), np.exp(f64(x)) + 1, rtol=1e-6, atol=1e-6)


def test_dot_argmax_cumsum_over_padded_dims(rng):
    def body(a_ref, b_ref, d_ref, i_ref, c_ref):
        a = a_ref[...] - 3.0      # all < 0 and padded lanes -3: neither 0 nor neutral
        d_ref[...] = jnp.dot(a, b_ref[...] + 1.0, preferred_element_type=jnp.float32)
        i_ref[...] = jnp.argmax(a, axis=1).astype(jnp.int32)[:, None]
        c_ref[...] = lax.cumsum(a, axis=1, reverse=True)
    a = np.minimum(rng.standard_normal((20, 100)), 2.5).astype(np.float32)
    b = rng.standard_normal((100, 24)).astype(np.float32)
    d, i, c = pl.pallas_call(body, out_shape=[jax.ShapeDtypeStruct((20, 24), jnp.float32),
                                              jax.ShapeDtypeStruct((20, 1), jnp.int32),
                                              jax.ShapeDtypeStruct((20, 100), jnp.float32)],
                             **TRITON)(a, b)
    a64 = f64(a) - 3
    np.testing.assert_allclose(np.asarray(d), a64 @ (f64(b) + 1), rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(np.asarray(i)[:, 0], np.argmax(a, axis=1))
    ref = np.cumsum(a64[:, ::-1], axis=1)[:, ::-1]
    np.testing.assert_allclose(np.asarray(c), ref, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: f"{t[0]}-{t[1]}")
def test_odd_blocks_compile(target):
    asm = pt.compile_for_target(lambda x: _stencil(256)(x),
                                jax.ShapeDtypeStruct((256,), jnp.float32), target=target)
    key = "ptx" if target[0] == "cuda" else "amdgcn"
    assert asm[key] and asm["cubin" if target[0] == "cuda" else "hsaco"]
    asm = pt.compile_for_target(lambda x: _rows()(x),
                                jax.ShapeDtypeStruct((9, 300), jnp.float32), target=target)
    assert asm[key]


def test_reshape_that_would_mix_padding_is_refused():
    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...].reshape(300)
    f = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((300,), jnp.float32), **TRITON)
    with pytest.raises(BackendCapabilityError, match=r"reshape from \(3, 100\) to \(300,\)"):
        f(jnp.ones((3, 100), jnp.float32))
