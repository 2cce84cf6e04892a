"""Probe: kernels whose result must match JAX's interpret mode or NumPy
(float64), on fresh random data. Defects 1, 2, 3, 5, 7, 8, 9 and 11 of issue 24
are re-probed here in compact form; their full tests are listed in DEFECT_TESTS."""

import os
import tempfile

import jax
import jax.experimental.pallas as jpl
import jax.numpy as jnp
import numpy as np

import pallas_frontend as pl
from probes.common import TRITON_ENV, Case

F32 = jnp.float32


def _x(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def _capture_stdout(fn):
    """What ``fn`` prints to file descriptor 1 (host callbacks print there)."""
    with tempfile.TemporaryFile(mode="w+") as tmp:
        saved = os.dup(1)
        os.dup2(tmp.fileno(), 1)
        try:
            jax.block_until_ready(fn())
            jax.effects_barrier()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        tmp.seek(0)
        return tmp.read()


# --- re-probes of the defects -----------------------------------------

def triton_bf16_mul(rng):
    import pallas_triton as pt
    x = jnp.asarray(_x(rng, 64), jnp.bfloat16)

    def k_bf16_mul(a, o):
        o[...] = jnp.exp(a[...] * 3)
    f = pl.pallas_call(k_bf16_mul, out_shape=jax.ShapeDtypeStruct((64,), jnp.bfloat16),
                       interpret=pt.InterpretParams())
    want = np.exp(np.asarray(x, np.float64) * 3)
    return (lambda: f(x).astype(F32)), (lambda got: np.allclose(got, want, rtol=2e-2, atol=1e-2))


def triton_xla_numerics(rng):
    import pallas_triton as pt
    xi = jnp.asarray(rng.integers(-100, 100, 16), jnp.int32)
    xf = jnp.asarray(np.array([np.nan, np.inf, -np.inf, 1e10, -1e10, 300.0, -3.5, 2.5] * 2),
                     F32)

    def k_numerics(a, b, q, r, c):
        q[...] = jax.lax.div(a[...], jnp.zeros_like(a[...]))
        r[...] = jax.lax.rem(a[...], jnp.zeros_like(a[...]))
        c[...] = b[...].astype(jnp.int32)
    shapes = [jax.ShapeDtypeStruct((16,), jnp.int32)] * 3
    f = pl.pallas_call(k_numerics, out_shape=shapes, interpret=pt.InterpretParams())
    want = jax.jit(lambda a, b: (jax.lax.div(a, jnp.zeros_like(a)),
                                 jax.lax.rem(a, jnp.zeros_like(a)), b.astype(jnp.int32)))(xi, xf)
    return (lambda: f(xi, xf)), tuple(np.asarray(w) for w in want)


def input_ref_writes(rng):
    x = _x(rng, 8)

    def k_input_writes(a, o):
        a[...] = a[...] * 2 + 1
        o[...] = a[...]

    def run(mod):
        return mod.pallas_call(k_input_writes, out_shape=jax.ShapeDtypeStruct((32,), F32),
                               grid=(4,), in_specs=[mod.BlockSpec((8,), lambda i: (0,))],
                               out_specs=mod.BlockSpec((8,), lambda i: (i,)),
                               interpret=True)(x)
    return (lambda: run(pl)), np.asarray(run(jpl))


def masked_load_past_end(rng):
    import pallas_triton as pt
    x = _x(rng, 8)
    start = int(rng.integers(1, 8))

    def k_masked(s_ref, x_ref, o_ref):     # a traced start (a static one is refused, as JAX)
        s = s_ref[0]
        mask = jnp.arange(8) + s < 8
        o_ref[...] = pt.load(x_ref.at[pl.ds(s, 8)], mask=mask, other=-1.0)
    want = np.concatenate([x[start:], -np.ones(start, np.float32)])
    f = pl.pallas_call(k_masked, out_shape=jax.ShapeDtypeStruct((8,), F32), interpret=True)
    return (lambda: f(jnp.array([start], jnp.int32), x)), want


def same_ref_twice(rng):
    class Mesh:
        shape = {"x": 1}

    def k_same_ref(a, b):
        a[...] += 1
        b[...] += 10
    r = jax.new_ref(jnp.asarray(_x(rng, 4)))
    return (lambda: pl.kernel(k_same_ref, mesh=Mesh(), interpret=True)(r, r)), None


def debug_check_out_of_block(rng):
    x = _x(rng, 16)

    def k_dyn_index(s_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...]
        o_ref[0] = x_ref[s_ref[0]]

    def thunk():
        with pl.enable_debug_checks(True):
            return pl.pallas_call(k_dyn_index, out_shape=jax.ShapeDtypeStruct((16,), F32))(
                jnp.array([40], jnp.int32), x)
    return thunk, None


def debug_print_fields(rng):
    x = _x(rng, 2)

    def k_print(x_ref, o_ref):
        pl.debug_print("b={1} a={0} {{braces}} 'q\"", x_ref[0], x_ref[1])
        o_ref[...] = x_ref[...]
    f = pl.pallas_call(k_print, out_shape=jax.ShapeDtypeStruct((2,), F32))
    xs = jnp.asarray(x)
    want = f"b={xs[1]} a={xs[0]} {{braces}} 'q\""
    return (lambda: _capture_stdout(lambda: f(xs))), (lambda got: got.strip() == want)


# --- more hostile inputs ------------------------------------------------------

def ragged_position_dependent(rng):
    x = _x(rng, 10)

    def k_ragged_pos(x_ref, o_ref):
        o_ref[...] = x_ref[...] + pl.program_id(0).astype(F32) * 10 + jnp.arange(4, dtype=F32)
    spec = pl.BlockSpec((4,), lambda i: (i,))
    f = pl.pallas_call(k_ragged_pos, out_shape=jax.ShapeDtypeStruct((10,), F32), grid=(3,),
                       in_specs=[spec], out_specs=spec)
    idx = np.arange(10)
    return (lambda: f(x)), x + (idx // 4) * 10 + idx % 4


def revisited_reduction(rng):
    x = _x(rng, 8, 32)

    def k_rowsum(x_ref, o_ref):
        @pl.when(pl.program_id(1) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
        o_ref[...] += jnp.sum(x_ref[...], axis=1, keepdims=True)
    f = pl.pallas_call(k_rowsum, out_shape=jax.ShapeDtypeStruct((8, 1), F32), grid=(2, 4),
                       in_specs=[pl.BlockSpec((4, 8), lambda i, j: (i, j))],
                       out_specs=pl.BlockSpec((4, 1), lambda i, j: (i, 0)))
    return (lambda: f(x)), x.astype(np.float64).sum(1, keepdims=True)


def transposed_blocks(rng):
    x = _x(rng, 16, 16)

    def k_transpose(x_ref, o_ref):
        o_ref[...] = x_ref[...].T
    f = pl.pallas_call(k_transpose, out_shape=jax.ShapeDtypeStruct((16, 16), F32), grid=(2, 2),
                       in_specs=[pl.BlockSpec((8, 8), lambda i, j: (j, i))],
                       out_specs=pl.BlockSpec((8, 8), lambda i, j: (i, j)))
    return (lambda: f(x)), x.T


def int8_wraparound(rng):
    x = rng.integers(-128, 128, 64).astype(np.int8)

    def k_int8(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 3 + 100
    f = pl.pallas_call(k_int8, out_shape=jax.ShapeDtypeStruct((64,), jnp.int8))
    return (lambda: f(x)), (x.astype(np.int64) * 3 + 100).astype(np.int8)


def nan_negzero_minmax(rng):
    x = np.array([np.nan, -0.0, 0.0, np.inf, -np.inf, 1.0, -1.0, np.nan], np.float32)
    y = np.roll(x, 3)

    def k_minmax(a, b, mx, mn):
        mx[...] = jnp.maximum(a[...], b[...])
        mn[...] = jnp.minimum(a[...], b[...])
    f = pl.pallas_call(k_minmax, out_shape=[jax.ShapeDtypeStruct((8,), F32)] * 2)
    want = jax.jit(lambda a, b: (jnp.maximum(a, b), jnp.minimum(a, b)))(x, y)
    signs = lambda got: all(np.array_equal(np.signbit(g), np.signbit(np.asarray(w)))  # noqa: E731
                            and np.array_equal(np.asarray(g), np.asarray(w), equal_nan=True)
                            for g, w in zip(got, want))
    return (lambda: f(x, y)), signs


def bf16_builtin(rng):
    x = jnp.asarray(_x(rng, 128), jnp.bfloat16)

    def k_bf16(a, o):
        o[...] = jnp.tanh(a[...]) * 3 + 1
    f = pl.pallas_call(k_bf16, out_shape=jax.ShapeDtypeStruct((128,), jnp.bfloat16))
    want = np.tanh(np.asarray(x, np.float64)) * 3 + 1
    return (lambda: f(x).astype(F32)), (lambda got: np.allclose(got, want, rtol=2e-2, atol=2e-2))


def scalar_prefetch_gather(rng):
    x = _x(rng, 32, 8)
    rows = rng.permutation(4).astype(np.int32)

    def k_gather(idx_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2
    import pallas_tpu as pltpu
    gs = pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, grid=(4,),
                                   in_specs=[pl.BlockSpec((8, 8), lambda i, idx: (idx[i], 0))],
                                   out_specs=pl.BlockSpec((8, 8), lambda i, idx: (i, 0)))
    f = pl.pallas_call(k_gather, out_shape=jax.ShapeDtypeStruct((32, 8), F32), grid_spec=gs)
    want = np.concatenate([x[r * 8:(r + 1) * 8] * 2 for r in rows])
    return (lambda: f(rows, x)), want


def aliased_partial_update(rng):
    x = _x(rng, 32)

    def k_alias_update(x_ref, o_ref):
        o_ref[...] = x_ref[...] * -1
    f = pl.pallas_call(k_alias_update, out_shape=jax.ShapeDtypeStruct((32,), F32), grid=(1,),
                       in_specs=[pl.BlockSpec((8,), lambda i: (1,))],
                       out_specs=pl.BlockSpec((8,), lambda i: (1,)), input_output_aliases={0: 0})
    want = x.copy()
    want[8:16] *= -1
    return (lambda: jax.jit(f)(x)), want


def vmapped_call(rng):
    x = _x(rng, 3, 16)

    def k_vmapped(x_ref, o_ref):
        o_ref[...] = x_ref[...] * x_ref[...] + pl.program_id(0).astype(F32)
    spec = pl.BlockSpec((8,), lambda i: (i,))
    f = pl.pallas_call(k_vmapped, out_shape=jax.ShapeDtypeStruct((16,), F32), grid=(2,),
                       in_specs=[spec], out_specs=spec)
    return (lambda: jax.vmap(f)(x)), x.astype(np.float64) ** 2 + (np.arange(16) // 8)


def jvp_of_call(rng):
    x = _x(rng, 16)

    def k_square(x_ref, o_ref):
        o_ref[...] = x_ref[...] * x_ref[...]
    f = pl.pallas_call(k_square, out_shape=jax.ShapeDtypeStruct((16,), F32))
    t = _x(rng, 16)
    return (lambda: jax.jvp(f, (x,), (t,))), (x.astype(np.float64) ** 2,
                                               2 * x.astype(np.float64) * t)


CASES = [
    Case("triton_bf16_exp", triton_bf16_mul, ("k_bf16_mul",), needs="pallas_triton",
         env=TRITON_ENV, defect=1),
    Case("triton_div0_casts", triton_xla_numerics, ("k_numerics",), needs="pallas_triton",
         env=TRITON_ENV, defect=7),
    Case("input_ref_writes", input_ref_writes, ("k_input_writes",), defect=2),
    Case("masked_load_past_end", masked_load_past_end, ("k_masked",), needs="pallas_triton",
         defect=3),
    Case("same_ref_twice", same_ref_twice, ("k_same_ref", "argument 1"), expect_error=True,
         defect=5),
    Case("debug_check_out_of_block", debug_check_out_of_block, ("k_dyn_index",),
         expect_error=True, subprocess=True, defect=8),
    Case("debug_print_fields", debug_print_fields, ("k_print",), subprocess=True, defect=9),
    Case("ragged_position_dependent", ragged_position_dependent, ("k_ragged_pos",)),
    Case("revisited_reduction", revisited_reduction, ("k_rowsum",), tol=1e-4),
    Case("transposed_blocks", transposed_blocks, ("k_transpose",)),
    Case("int8_wraparound", int8_wraparound, ("k_int8",)),
    Case("nan_negzero_minmax", nan_negzero_minmax, ("k_minmax",)),
    Case("bf16_builtin", bf16_builtin, ("k_bf16",)),
    Case("scalar_prefetch_gather", scalar_prefetch_gather, ("k_gather",), needs="pallas_tpu"),
    Case("aliased_partial_update", aliased_partial_update, ("k_alias_update",)),
    Case("vmapped_call", vmapped_call, ("k_vmapped",)),
    Case("jvp_of_call", jvp_of_call, ("k_square",), tol=1e-5),
]
