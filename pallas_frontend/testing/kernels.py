"""The conformance kernels: each builds a ``pallas_call`` for given call options
and has an independent NumPy float64 reference. Shared by the conformance
tests and by ``pallas doctor`` (so it imports no pytest)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import pallas_frontend as pl


def _spec(shape, index_map):
    return pl.BlockSpec(shape, index_map)


def vector_add(n: int = 1024, block: int = 128, **call):
    def body(x, y, o):
        o[...] = x[...] + y[...]
    return pl.pallas_call(
        body, jax.ShapeDtypeStruct((n,), jnp.float32), grid=(pl.cdiv(n, block),),
        in_specs=[_spec((block,), lambda i: (i,))] * 2, out_specs=_spec((block,), lambda i: (i,)),
        name="vector_add", **call)


def vector_add_ref(x, y):
    return np.asarray(x, np.float64) + np.asarray(y, np.float64)


def blocked_matmul(m: int, n: int, k: int, bm: int, bn: int, bk: int, **call):
    """Accumulates over the k grid axis straight into the output block (m and n
    may leave ragged edge blocks; bk must divide k)."""
    def body(x, y, o):
        @pl.when(pl.program_id(2) == 0)
        def _():
            o[...] = jnp.zeros_like(o)
        o[...] += jnp.dot(x[...], y[...], preferred_element_type=jnp.float32)
    return pl.pallas_call(
        body, jax.ShapeDtypeStruct((m, n), jnp.float32), grid=(pl.cdiv(m, bm), pl.cdiv(n, bn), k // bk),
        in_specs=[_spec((bm, bk), lambda i, j, kk: (i, kk)), _spec((bk, bn), lambda i, j, kk: (kk, j))],
        out_specs=_spec((bm, bn), lambda i, j, kk: (i, j)), name="blocked_matmul", **call)


def scratch_matmul(m: int, n: int, k: int, bm: int, bn: int, bk: int, **call):
    """Accumulates in a float32 scratch buffer, written out at the last k step."""
    nk = k // bk

    def body(x, y, o, acc):
        @pl.when(pl.program_id(2) == 0)
        def _():
            acc[...] = jnp.zeros_like(acc)
        acc[...] += jnp.dot(x[...], y[...], preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(2) == nk - 1)
        def _():
            o[...] = acc[...]
    return pl.pallas_call(
        body, jax.ShapeDtypeStruct((m, n), jnp.float32), grid=(pl.cdiv(m, bm), pl.cdiv(n, bn), nk),
        in_specs=[_spec((bm, bk), lambda i, j, kk: (i, kk)), _spec((bk, bn), lambda i, j, kk: (kk, j))],
        out_specs=_spec((bm, bn), lambda i, j, kk: (i, j)),
        scratch_shapes=[pl.MemorySpace.DEFAULT((bm, bn), jnp.float32)], name="scratch_matmul", **call)


def softmax(rows: int, cols: int, block_rows: int, **call):
    def body(x, o):
        v = x[...]
        e = jnp.exp(v - v.max(axis=-1, keepdims=True))
        o[...] = e / e.sum(axis=-1, keepdims=True)
    spec = _spec((block_rows, cols), lambda i: (i, 0))
    return pl.pallas_call(body, jax.ShapeDtypeStruct((rows, cols), jnp.float32),
                          grid=(rows // block_rows,), in_specs=[spec], out_specs=spec,
                          name="softmax", **call)


def softmax_ref(x):
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def layer_norm(rows: int, cols: int, block_rows: int, eps: float, **call):
    def body(x, w, b, o):
        v = x[...]
        mu = v.mean(axis=-1, keepdims=True)
        var = ((v - mu) ** 2).mean(axis=-1, keepdims=True)
        o[...] = (v - mu) * jax.lax.rsqrt(var + eps) * w[...] + b[...]
    row = _spec((block_rows, cols), lambda i: (i, 0))
    vec = _spec((cols,), lambda i: (0,))
    return pl.pallas_call(body, jax.ShapeDtypeStruct((rows, cols), jnp.float32),
                          grid=(rows // block_rows,), in_specs=[row, vec, vec], out_specs=row,
                          name="layer_norm", **call)


def layer_norm_ref(x, w, b, eps):
    x = np.asarray(x, np.float64)
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def transpose_2d(rows: int, cols: int, br: int, bc: int, **call):
    """A 2-D grid whose output index map swaps the grid axes."""
    def body(x, o):
        o[...] = x[...].T
    return pl.pallas_call(
        body, jax.ShapeDtypeStruct((cols, rows), jnp.float32), grid=(rows // br, cols // bc),
        in_specs=[_spec((br, bc), lambda i, j: (i, j))], out_specs=_spec((bc, br), lambda i, j: (j, i)),
        name="transpose_2d", **call)


def aliased_scale(n: int, block: int, **call):
    """Scales its second input in place (input 1 aliases output 0)."""
    def body(s, x, o):
        o[...] = x[...] * s[0]
    return pl.pallas_call(
        body, jax.ShapeDtypeStruct((n,), jnp.float32), grid=(n // block,),
        in_specs=[_spec((1,), lambda i: (0,)), _spec((block,), lambda i: (i,))],
        out_specs=_spec((block,), lambda i: (i,)), input_output_aliases={1: 0},
        name="aliased_scale", **call)


def smoke_check(call_options: dict, seed: int = 0) -> float:
    """Runs a ragged blocked add against NumPy; returns the max abs error
    (raises AssertionError when it exceeds float32 tolerance)."""
    rng = np.random.default_rng(seed)
    n = 1000
    x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    got = np.asarray(vector_add(n, 128, **call_options)(x, y), np.float64)
    err = float(np.max(np.abs(got - vector_add_ref(x, y))))
    if not np.isfinite(err) or err > 1e-5:
        raise AssertionError(f"blocked add differs from NumPy: max abs error {err:.3g} > 1e-5")
    return err


def aliased_half_update(n: int, block: int, **call):
    """Doubles the first half of its input in place (input 0 aliases output 0).
    No grid point writes the second half: it must keep the input's values."""
    def body(x, o):
        o[...] = x[...] * 2
    return pl.pallas_call(
        body, jax.ShapeDtypeStruct((n,), jnp.float32), grid=(n // block // 2,),
        in_specs=[_spec((block,), lambda i: (i,))], out_specs=_spec((block,), lambda i: (i,)),
        input_output_aliases={0: 0}, name="aliased_half_update", **call)


def fma_f64(n: int, block: int, **call):
    """``x * y + z`` in float64 (needs jax_enable_x64 when built and run)."""
    def body(x, y, z, o):
        o[...] = x[...] * y[...] + z[...]
    spec = _spec((block,), lambda i: (i,))
    return pl.pallas_call(body, jax.ShapeDtypeStruct((n,), jnp.float64), grid=(n // block,),
                          in_specs=[spec] * 3, out_specs=spec, name="fma_f64", **call)
