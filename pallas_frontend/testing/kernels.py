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


def tiled_add(rows: int, cols: int, br: int = 8, bc: int = 128, **call):
    """``x + y`` over 2-D ``(br, bc)`` blocks (``cols`` may leave ragged edge
    blocks). Under ``jax.vmap`` the batch dim becomes a squeezed leading block
    dim and the last two stay ``(8, 128)``-tiled, which Mosaic TPU needs (a
    vmapped 1-D kernel would have ``(squeezed, bc)`` blocks, which it refuses)."""
    def body(x, y, o):
        o[...] = x[...] + y[...]
    spec = _spec((br, bc), lambda i, j: (i, j))
    return pl.pallas_call(
        body, jax.ShapeDtypeStruct((rows, cols), jnp.float32),
        grid=(pl.cdiv(rows, br), pl.cdiv(cols, bc)), in_specs=[spec] * 2, out_specs=spec,
        name="tiled_add", **call)


def matmul_tolerance(a, b) -> dict:
    """``assert_allclose`` tolerances for a float32 matmul of ``a`` and ``b``
    (accumulated in float32) against NumPy float64: ``rtol`` 1e-4 and ``atol``
    1e-4 * sqrt(k), or twice the largest error of XLA's own default-precision
    ``jnp.dot`` of the same inputs on JAX's default device, if larger. A
    kernel need not round better than the device's own matmul: a TPU's
    default-precision float32 dot rounds the operands to bfloat16 (errors
    ~0.1 for k of a few hundred), a GPU's may use TF32; on CPU XLA's dot is
    float32-accurate and the tolerance stays the stated one."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    k = a.shape[-1]
    want = a.astype(np.float64) @ b.astype(np.float64)
    xla = np.asarray(jnp.dot(jnp.asarray(a), jnp.asarray(b),
                             preferred_element_type=jnp.float32), np.float64)
    xla_err = float(np.max(np.abs(xla - want)))
    return dict(rtol=1e-4, atol=max(1e-4 * float(np.sqrt(k)), 2.0 * xla_err))


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


def position_ragged(rows: int, cols: int, br: int, bc: int, **call):
    """Two outputs whose values depend on where each element sits: its flat
    index (from program ids and iotas) and its block's program ids. Neither
    dim divides into blocks, so a backend that shifts edge blocks into the
    array (instead of padding them) writes values computed for the wrong
    positions."""
    def body(x, a, b):
        i, j = pl.program_id(0), pl.program_id(1)
        r = i * br + jax.lax.broadcasted_iota(jnp.int32, (br, bc), 0)
        c = j * bc + jax.lax.broadcasted_iota(jnp.int32, (br, bc), 1)
        v = x[...]
        a[...] = v * 2 + (r * cols + c).astype(jnp.float32)
        b[...] = v * (i + 1).astype(jnp.float32) - j.astype(jnp.float32)
    spec = _spec((br, bc), lambda i, j: (i, j))
    out = jax.ShapeDtypeStruct((rows, cols), jnp.float32)
    return pl.pallas_call(body, (out, out), grid=(pl.cdiv(rows, br), pl.cdiv(cols, bc)),
                          in_specs=[spec], out_specs=(spec, spec), name="position_ragged", **call)


def position_ragged_ref(x, br: int, bc: int):
    x = np.asarray(x, np.float64)
    r, c = np.indices(x.shape)
    return x * 2 + (r * x.shape[1] + c), x * (r // br + 1) - c // bc


def ragged_row_reduction(rows: int, cols: int, br: int, bc: int, **call):
    """Row sums and row maxima over a grid whose last (sequential) axis walks
    ragged column blocks, accumulated in scratch; the columns past the array
    are masked by position (program id and iota), so an edge block shifted
    into the array counts the wrong columns. Each row's result fills a row of
    ``bc`` lanes (a 1-wide block is no TMA box for Mosaic GPU)."""
    nj = pl.cdiv(cols, bc)

    def body(x, o_sum, o_max, acc_sum, acc_max):
        j = pl.program_id(1)

        @pl.when(j == 0)
        def _():
            acc_sum[...] = jnp.zeros_like(acc_sum)
            acc_max[...] = jnp.full_like(acc_max, -jnp.inf)
        c = j * bc + jax.lax.broadcasted_iota(jnp.int32, (br, bc), 1)
        valid = c < cols
        v = x[...]
        acc_sum[...] += jnp.broadcast_to(
            jnp.where(valid, v, 0.0).sum(axis=1, keepdims=True), (br, bc))
        acc_max[...] = jnp.maximum(acc_max[...], jnp.broadcast_to(
            jnp.where(valid, v, -jnp.inf).max(axis=1, keepdims=True), (br, bc)))

        @pl.when(j == nj - 1)
        def _():
            o_sum[...] = acc_sum[...]
            o_max[...] = acc_max[...]
    out = jax.ShapeDtypeStruct((rows, bc), jnp.float32)
    out_spec = _spec((br, bc), lambda i, j: (i, 0))
    return pl.pallas_call(
        body, (out, out), grid=(pl.cdiv(rows, br), nj),
        in_specs=[_spec((br, bc), lambda i, j: (i, j))], out_specs=(out_spec, out_spec),
        scratch_shapes=[pl.MemorySpace.DEFAULT((br, bc), jnp.float32)] * 2,
        name="ragged_row_reduction", **call)


def ragged_row_reduction_ref(x, bc: int):
    x = np.asarray(x, np.float64)
    lanes = (x.shape[0], bc)
    return (np.broadcast_to(x.sum(1, keepdims=True), lanes),
            np.broadcast_to(x.max(1, keepdims=True), lanes))


def input_running_sum(n: int, block: int, **call):
    """Adds each block of ``x`` into an *input* Ref whose block never moves and
    copies it out: output block i holds ``acc + x[0] + ... + x[i]``. Grid
    points run in order and see the input block as the previous one left it
    (as in JAX's interpret mode and on TPU, where an unmoved block stays put)."""
    def body(acc, x, o):
        acc[...] += x[...]
        o[...] = acc[...]
    return pl.pallas_call(
        body, jax.ShapeDtypeStruct((n,), jnp.float32), grid=(n // block,),
        in_specs=[_spec((block,), lambda i: (0,)), _spec((block,), lambda i: (i,))],
        out_specs=_spec((block,), lambda i: (i,)), name="input_running_sum", **call)


def input_doubling(rows: int, cols: int, br: int, steps: int, **call):
    """A 2-D grid whose inner axis revisits one input block ``steps`` times,
    doubling it in place each time: output block (i, j) holds ``x_i * 2**(j+1)``."""
    def body(x, o):
        x[...] = x[...] * 2
        o[...] = x[...]
    return pl.pallas_call(
        body, jax.ShapeDtypeStruct((rows, cols * steps), jnp.float32), grid=(rows // br, steps),
        in_specs=[_spec((br, cols), lambda i, j: (i, 0))],
        out_specs=_spec((br, cols), lambda i, j: (i, j)), name="input_doubling", **call)


def aliased_strided_update(rows: int, cols: int, br: int, **call):
    """Adds 1 to every other row block of its input in place (input 0 aliases
    output 0); the row blocks in between must keep the input's values."""
    def body(x, o):
        o[...] = x[...] + 1
    spec = _spec((br, cols), lambda i: (2 * i, 0))
    return pl.pallas_call(
        body, jax.ShapeDtypeStruct((rows, cols), jnp.float32), grid=(rows // br // 2,),
        in_specs=[spec], out_specs=spec, input_output_aliases={0: 0},
        name="aliased_strided_update", **call)


def f64_difference_of_squares(n: int, block: int, **call):
    """``(x - y) * (x + y)`` in float64 for x, y that differ only past float32's precision."""
    def body(x, y, o):
        a, b = x[...], y[...]
        o[...] = (a - b) * (a + b)
    spec = _spec((block,), lambda i: (i,))
    return pl.pallas_call(body, jax.ShapeDtypeStruct((n,), jnp.float64), grid=(n // block,),
                          in_specs=[spec] * 2, out_specs=spec, name="f64_difference_of_squares",
                          **call)
