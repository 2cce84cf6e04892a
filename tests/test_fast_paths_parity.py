"""Parity of the interpreter's fast paths with the sequential semantics, on
fresh random data against NumPy in float64: the first sequential step peeled
(``pl.when(program_id == 0)`` folded), and a k-accumulation run as one
contraction (floats differ by reassociation only; integers exactly)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
from fast_interp_helpers import carried_cumsum_kernel
from pallas_frontend.interpreter import accumulate, vectorized


def _matmul(m, n, k, bm, bn, bk, dtype=jnp.float32, init=True, fill=0, out_rows=None):
    def kernel(a_ref, b_ref, *refs):
        o_ref = refs[-1]
        if init:
            @pl.when(pl.program_id(2) == 0)
            def _():
                o_ref[...] = jnp.full_like(o_ref, fill)
        o_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=dtype)
    start = [] if init else [pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j))]
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((out_rows or m, n), dtype),
                          grid=(m // bm, n // bn, k // bk),
                          in_specs=[pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
                                    pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))] + start,
                          out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
                          input_output_aliases={} if init else {2: 0})


@pytest.fixture(params=["slab", "batched"])
def contraction_calls(monkeypatch, request):
    """Records whether the contraction path ran; runs both of its forms (the
    direct slab dot, and the batched terms rewritten into one contraction)."""
    calls = []
    slab, batched = accumulate.slab_contraction, accumulate.summed_terms
    if request.param == "batched":
        monkeypatch.setattr(accumulate, "slab_contraction", lambda *a: None)
        slab = None

    def spy(real):
        def run(*args):
            out = real(*args)
            if real is batched or out is not None:
                calls.append(out is not None)
            return out
        return run
    if slab is not None:
        monkeypatch.setattr(accumulate, "slab_contraction", spy(slab))
    monkeypatch.setattr(accumulate, "summed_terms", spy(batched))
    return calls


@pytest.mark.parametrize("shape", [(64, 96, 128, 32, 32, 16), (32, 32, 96, 16, 32, 32)])
def test_k_accumulation_as_one_contraction_matches_numpy(rng, shape, contraction_calls):
    m, n, k, bm, bn, bk = shape
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    got = np.asarray(jax.jit(_matmul(*shape))(a, b))
    assert contraction_calls == [True]
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(k))


def test_constant_start_of_the_accumulator_is_added_unless_zero(rng, contraction_calls):
    a = rng.standard_normal((32, 64)).astype(np.float32)
    b = rng.standard_normal((64, 48)).astype(np.float32)
    product = a.astype(np.float64) @ b.astype(np.float64)
    for fill in (0.0, 1.5):
        f = jax.jit(_matmul(32, 48, 64, 16, 16, 16, fill=fill))
        np.testing.assert_allclose(np.asarray(f(a, b)), product + fill, rtol=1e-4, atol=1e-3)
        # a zero start is not built and added (the program is the contraction alone)
        assert ("stablehlo.add" in f.lower(a, b).as_text()) == (fill != 0)
    assert contraction_calls == [True, True]


def test_zero_started_accumulator_leaves_what_no_block_covers(rng, contraction_calls):
    a = rng.standard_normal((32, 64)).astype(np.float32)
    b = rng.standard_normal((64, 32)).astype(np.float32)
    got = np.asarray(jax.jit(_matmul(32, 32, 64, 16, 16, 16, out_rows=40))(a, b))
    assert contraction_calls == [True]
    np.testing.assert_allclose(got[:32], a.astype(np.float64) @ b.astype(np.float64),
                               rtol=1e-4, atol=1e-3)
    assert np.isnan(got[32:]).all()      # never written: the interpreter's padding value


def test_integer_k_accumulation_is_exact(rng, contraction_calls):
    a = rng.integers(-50, 50, (32, 64)).astype(np.int32)
    b = rng.integers(-50, 50, (64, 48)).astype(np.int32)
    got = np.asarray(jax.jit(_matmul(32, 48, 64, 16, 16, 16, dtype=jnp.int32))(a, b))
    assert contraction_calls == [True]
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))


def test_accumulation_into_an_aliased_output_keeps_its_start(rng, contraction_calls):
    a = rng.standard_normal((32, 64)).astype(np.float32)
    b = rng.standard_normal((64, 32)).astype(np.float32)
    c = rng.standard_normal((32, 32)).astype(np.float32)
    got = np.asarray(jax.jit(_matmul(32, 32, 64, 16, 16, 16, init=False))(a, b, c))
    assert contraction_calls == [True]
    want = c.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_accumulator_that_reads_itself_keeps_the_sequential_loop(rng, contraction_calls):
    # o = 0.5 * o + x_k: the new value depends on the old one, so no contraction.
    x = rng.standard_normal((6, 16)).astype(np.float32)

    def kernel(x_ref, o_ref):
        @pl.when(pl.program_id(0) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
        o_ref[...] = o_ref[...] * 0.5 + x_ref[...]
    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((1, 16), jnp.float32), grid=(6,),
                       in_specs=[pl.BlockSpec((1, 16), lambda i: (i, 0))],
                       out_specs=pl.BlockSpec((1, 16), lambda i: (0, 0)))
    got = np.asarray(jax.jit(f)(x))
    assert True not in contraction_calls
    want = np.zeros(16)
    for row in x.astype(np.float64):
        want = want * 0.5 + row
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("steps", [2, 3, 9])
def test_peeled_cumsum_with_carry_matches_numpy(rng, steps):
    b = 32
    x = rng.standard_normal(steps * b).astype(np.float32)
    f = pl.pallas_call(carried_cumsum_kernel, out_shape=(jax.ShapeDtypeStruct((steps * b,), jnp.float32),
                                          jax.ShapeDtypeStruct((1,), jnp.float32)),
                       grid=(steps,), in_specs=[pl.BlockSpec((b,), lambda i: (i,))],
                       out_specs=(pl.BlockSpec((b,), lambda i: (i,)),
                                  pl.BlockSpec((1,), lambda i: (0,))))
    out, total = jax.jit(f)(x)
    want = np.cumsum(x.astype(np.float64))
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(np.asarray(total), want[-1:], rtol=1e-5, atol=1e-4)


def test_condition_on_a_later_step_survives_peeling(rng):
    # pl.when(i == 3) and pl.when(i > 0) are undecided inside the loop, decided when peeled.
    steps, b = 7, 8
    x = rng.standard_normal((steps, b)).astype(np.float32)

    def kernel(x_ref, o_ref):
        i = pl.program_id(0)

        @pl.when(i == 0)
        def _():
            o_ref[...] = x_ref[...]

        @pl.when(i > 0)
        def _():
            o_ref[...] += x_ref[...]

        @pl.when(i == 3)
        def _():
            o_ref[...] *= 2.0
    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((1, b), jnp.float32),
                       grid=(steps,), in_specs=[pl.BlockSpec((1, b), lambda i: (i, 0))],
                       out_specs=pl.BlockSpec((1, b), lambda i: (0, 0)))
    got = np.asarray(jax.jit(f)(x))
    want = np.zeros(b)
    for i, row in enumerate(x.astype(np.float64)):
        want = row.copy() if i == 0 else want + row
        if i == 3:
            want = want * 2.0
    np.testing.assert_allclose(got[0], want, rtol=1e-5)


def test_specialized_body_equals_the_general_one_on_its_range(rng):
    from pallas_frontend.interpreter.specialize import specialize

    def body(i, x):
        y = jnp.where(i == 0, jnp.zeros_like(x), x)
        y = jax.lax.cond(i >= 2, lambda v: v * 3.0, lambda v: v - 1.0, y)
        return [y + i.astype(jnp.float32)]
    closed = jax.make_jaxpr(body)(jnp.int32(0), jnp.zeros(5, jnp.float32))
    x = rng.standard_normal(5).astype(np.float32)
    for lo, hi in [(0, 0), (1, 6), (2, 6), (0, 6)]:
        spec = specialize(closed, {0: (lo, hi)})
        for i in range(lo, hi + 1):
            got = jax.core.eval_jaxpr(spec.jaxpr, spec.consts, jnp.int32(i), x)
            want = body(jnp.int32(i), x)
            np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
    folded = specialize(closed, {0: (2, 6)})
    assert "cond" not in str(folded.jaxpr)


def test_vectorized_plan_unrolls_only_short_loops():
    assert vectorized._MAX_UNROLLED_STEPS <= 2


@pytest.fixture
def merged_runs(monkeypatch):
    calls = []
    real = vectorized._run_merged

    def spy(*args):
        calls.append(True)
        return real(*args)
    monkeypatch.setattr(vectorized, "_run_merged", spy)
    return calls


def _row_call(kernel, x, extra=(), br=8, extra_specs=()):
    rows, cols = x.shape
    spec = pl.BlockSpec((br, cols), lambda i: (i, 0))
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, jnp.float32),
                          grid=(rows // br,), in_specs=[spec, *extra_specs], out_specs=spec)


def test_row_softmax_runs_on_merged_rows_and_matches_numpy(rng, merged_runs):
    x = rng.standard_normal((64, 48)).astype(np.float32)

    def kernel(x_ref, o_ref):
        v = x_ref[...]
        e = jnp.exp(v - jnp.max(v, axis=1, keepdims=True))
        o_ref[...] = e / jnp.sum(e, axis=1, keepdims=True)
    got = np.asarray(jax.jit(_row_call(kernel, x))(x))
    assert merged_runs == [True]
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_rows_on_a_grid_with_more_axes_of_size_one(rng, merged_runs):
    # the indices of the size-1 axes are scalars the merged rows may use
    x = rng.standard_normal((32, 16)).astype(np.float32)

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * (pl.program_id(0) + 2.0) + pl.program_id(1) * 3.0
    spec = pl.BlockSpec((8, 16), lambda a, b, i: (i, 0))
    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, jnp.float32),
                       grid=(1, 1, 4), in_specs=[spec], out_specs=spec)
    got = np.asarray(jax.jit(f)(x))
    assert merged_runs == [True]
    np.testing.assert_allclose(got, x.astype(np.float64) * 2.0, rtol=1e-6)


def test_layer_norm_with_shared_vectors_runs_on_merged_rows(rng, merged_runs):
    x = rng.standard_normal((32, 64)).astype(np.float32)
    w = rng.standard_normal(64).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)

    def kernel(x_ref, w_ref, b_ref, o_ref):
        v = x_ref[...]
        mean = jnp.mean(v, axis=1, keepdims=True)
        var = jnp.mean((v - mean) ** 2, axis=1, keepdims=True)
        o_ref[...] = (v - mean) * jax.lax.rsqrt(var + 1e-5) * w_ref[...] + b_ref[...]
    vec = pl.BlockSpec((64,), lambda i: (0,))
    got = np.asarray(jax.jit(_row_call(kernel, x, extra_specs=(vec, vec)))(x, w, b))
    assert merged_runs == [True]
    x64 = x.astype(np.float64)
    mean = x64.mean(1, keepdims=True)
    want = (x64 - mean) / np.sqrt(((x64 - mean) ** 2).mean(1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", ["mixes_rows", "per_row_weights", "program_id", "row_iota"])
def test_bodies_that_see_rows_keep_the_batched_path(rng, merged_runs, case):
    x = rng.standard_normal((32, 16)).astype(np.float32)
    br = 8
    x64 = x.astype(np.float64).reshape(-1, br, 16)
    if case == "mixes_rows":
        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...] - jnp.mean(x_ref[...], axis=0, keepdims=True)
        want = x64 - x64.mean(1, keepdims=True)
    elif case == "per_row_weights":
        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...] * jnp.arange(br, dtype=jnp.float32)[:, None]
        want = x64 * np.arange(br)[None, :, None]
    elif case == "program_id":
        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...] + pl.program_id(0).astype(jnp.float32)
        want = x64 + np.arange(4)[:, None, None]
    else:
        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...] + jax.lax.broadcasted_iota(jnp.float32, (br, 16), 0)
        want = x64 + np.arange(br)[None, :, None]
    got = np.asarray(jax.jit(_row_call(kernel, x, br=br))(x))
    assert merged_runs == []
    np.testing.assert_allclose(got, want.reshape(x.shape), rtol=1e-5, atol=1e-6)
