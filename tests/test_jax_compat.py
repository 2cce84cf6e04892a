"""Pallas code written for JAX runs unchanged: each test runs one kernel under
JAX's Pallas (interpret mode) and under ours, on the same fresh random inputs."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from jax.experimental import pallas as jpl


def both(build, *args):
    """``build(pallas_module, **call_kw)`` -> a function; runs it under JAX's
    Pallas interpret mode and under ours, returns (jax_result, our_result)."""
    theirs = build(jpl, interpret=True)(*args)
    ours = build(pl)(*args)
    return theirs, ours


def assert_same(theirs, ours, rtol=1e-6, atol=1e-6):
    t_leaves, t_tree = jax.tree.flatten(theirs)
    o_leaves, o_tree = jax.tree.flatten(ours)
    assert t_tree == o_tree
    for a, b in zip(t_leaves, o_leaves):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=rtol, atol=atol)


@pytest.fixture
def rng():
    return np.random.default_rng()


# --- 1. optional operands -----------------------------------------------------

def _masked_add(P, seg_given, **kw):
    def kernel(x_ref, y_ref, seg_ref, o_ref):
        v = x_ref[...] + y_ref[...]
        if seg_ref is not None:
            v = jnp.where(seg_ref[...] > 0, v, -v)
        o_ref[...] = v

    spec = P.BlockSpec((8, 128), lambda i: (i, 0))
    return P.pallas_call(
        kernel, jax.ShapeDtypeStruct((32, 128), jnp.float32), grid=(4,),
        in_specs=[spec, spec, spec if seg_given else None], out_specs=spec, **kw)


@pytest.mark.parametrize("seg_given", [False, True])
def test_optional_operand_none_drops_with_its_spec(rng, seg_given):
    x, y = (jnp.asarray(rng.standard_normal((32, 128)), jnp.float32) for _ in range(2))
    seg = jnp.asarray(rng.integers(0, 2, (32, 128)), jnp.int32) if seg_given else None
    theirs, ours = both(lambda P, **kw: _masked_add(P, seg_given, **kw), x, y, seg)
    assert_same(theirs, ours)
    want = np.asarray(x, np.float64) + np.asarray(y, np.float64)
    if seg_given:
        want = np.where(np.asarray(seg) > 0, want, -want)
    np.testing.assert_allclose(np.asarray(ours), want, rtol=1e-6)


def test_optional_operand_in_a_nested_tree(rng):
    x = jnp.asarray(rng.standard_normal((16, 128)), jnp.float32)

    def build(P, **kw):
        def kernel(refs, o_ref):
            a_ref, b_ref = refs["a"], refs["b"]
            assert b_ref is None
            o_ref[...] = a_ref[...] * 3
        spec = P.BlockSpec((8, 128), lambda i: (i, 0))
        return P.pallas_call(kernel, jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
                             in_specs=[{"a": spec, "b": None}], out_specs=spec, **kw)

    theirs, ours = both(lambda P, **kw: lambda v: build(P, **kw)({"a": v, "b": None}), x)
    assert_same(theirs, ours)
    np.testing.assert_allclose(np.asarray(ours), 3 * np.asarray(x, np.float64), rtol=1e-6)


def test_none_spec_for_an_array_is_still_the_whole_array(rng):
    x = jnp.asarray(rng.standard_normal((8, 128)), jnp.float32)
    y = jnp.asarray(rng.standard_normal((8, 128)), jnp.float32)

    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] - y_ref[...]

    out = pl.pallas_call(kernel, jax.ShapeDtypeStruct(x.shape, x.dtype),
                         in_specs=[None, pl.BlockSpec((8, 128), lambda: (0, 0))])(x, y)
    np.testing.assert_allclose(np.asarray(out), np.asarray(x, np.float64) - np.asarray(y),
                               rtol=1e-6)


# --- 4. grids computed from traced values ---------------------------------------

def _dynamic_rows(P, **kw):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2 + P.program_id(0).astype(jnp.float32) + P.num_programs(0)

    @jax.jit
    def f(x, n):
        spec = P.BlockSpec((8, 128), lambda i: (i, 0))
        return P.pallas_call(kernel, jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(n,),
                             in_specs=[spec], out_specs=spec, **kw)(x)
    return f


@pytest.mark.parametrize("n", [1, 3, 4])
def test_dynamic_grid_size_matches_jax(rng, n):
    x = jnp.asarray(rng.standard_normal((32, 128)), jnp.float32)
    theirs, ours = both(_dynamic_rows, x, jnp.int32(n))
    assert_same(theirs, ours)   # rows past n are unwritten in both
    want = 2 * np.asarray(x, np.float64)[:8 * n] + np.repeat(np.arange(n), 8)[:, None] + n
    np.testing.assert_allclose(np.asarray(ours)[:8 * n], want, rtol=1e-6)


def test_dynamic_grid_one_compile_many_sizes(rng):
    x = jnp.asarray(rng.standard_normal((32, 128)), jnp.float32)
    f = _dynamic_rows(pl)
    for n in (2, 4):
        out = np.asarray(f(x, jnp.int32(n)))
        np.testing.assert_allclose(out[:8 * n, 0], 2 * np.asarray(x, np.float64)[:8 * n, 0]
                                   + np.repeat(np.arange(n), 8) + n, rtol=1e-6)
    assert f._cache_size() == 1


def _grouped_matmul(P, **kw):
    """Grouped-matmul style: the number of active row tiles comes from data;
    a static k axis accumulates into the output block."""
    def kernel(x_ref, w_ref, o_ref):
        @P.when(P.program_id(1) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
        o_ref[...] += jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)

    @jax.jit
    def f(x, w, sizes):
        tiles = jnp.sum(sizes > 0).astype(jnp.int32)   # from data
        return P.pallas_call(
            kernel, jax.ShapeDtypeStruct((x.shape[0], w.shape[1]), jnp.float32),
            grid=(tiles, 2),
            in_specs=[P.BlockSpec((16, 64), lambda i, k: (i, k)),
                      P.BlockSpec((64, 128), lambda i, k: (k, 0))],
            out_specs=P.BlockSpec((16, 128), lambda i, k: (i, 0)), **kw)(x, w)
    return f


def test_dynamic_grid_grouped_matmul_matches_jax(rng):
    x = jnp.asarray(rng.standard_normal((64, 128)), jnp.float32)
    w = jnp.asarray(rng.standard_normal((128, 128)), jnp.float32)
    sizes = jnp.asarray([5, 0, 7, 3], jnp.int32)    # 3 active tiles
    theirs, ours = both(_grouped_matmul, x, w, sizes)
    assert_same(theirs[:48], ours[:48], rtol=1e-5, atol=1e-4)
    want = np.asarray(x, np.float64) @ np.asarray(w, np.float64)
    np.testing.assert_allclose(np.asarray(ours)[:48], want[:48], rtol=2e-4, atol=2e-4)
    assert np.isnan(np.asarray(ours)[48:]).all()      # the inactive tile is never written


def test_dynamic_grid_out_of_range_block_fails_the_run(rng):
    x = jnp.asarray(rng.standard_normal((32, 128)), jnp.float32)
    # a traced size exists only under the user's jit: the failure surfaces as JAX's
    # runtime error carrying our message
    with pytest.raises(Exception, match=r"dynamic grid.*args\[0\].*grid point \(4,\)"):
        jax.block_until_ready(_dynamic_rows(pl)(x, jnp.int32(5)))


def test_dynamic_grid_zero_size_writes_nothing(rng):
    x = jnp.asarray(rng.standard_normal((16, 128)), jnp.float32)
    out = np.asarray(_dynamic_rows(pl)(x, jnp.int32(0)))
    assert np.isnan(out).all()


def test_dynamic_grid_in_kernel_ir(rng):
    seen = {}

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    @jax.jit
    def f(x, n):
        spec = pl.BlockSpec((8, 128), lambda i, j: (i, 0))
        return pl.pallas_call(kernel, jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(n, 2),
                              in_specs=[spec], out_specs=spec)(x)

    jaxpr = jax.make_jaxpr(f)(jnp.ones((16, 128)), jnp.int32(2))
    from pallas_frontend.backend_api import _iter_equations
    (eqn,) = [e for e in _iter_equations(jaxpr.jaxpr) if e.primitive.name == "pallas_call"]
    ir = eqn.params["kernel"]
    seen.update(grid=ir.grid, axes=ir.dynamic_grid_axes, n=ir.num_index_operands)
    assert seen == {"grid": (None, 2), "axes": (0,), "n": 3}
    assert len(eqn.invars) == 2       # the dynamic size, then x
    from pallas_frontend.backend_api import required_capabilities
    assert "dynamic_grid" in required_capabilities(ir)


# --- 5. vectorising falls back to the sequential loop when it cannot -------------

def _threefry_kernel(P, grid, **kw):
    from jax._src.random import threefry2x32 as tf   # as JAX's own TPU PRNG kernel does

    def kernel(key_ref, o_ref):
        counts = (jax.lax.broadcasted_iota(jnp.uint32, (8, 128), 0) * 128
                  + jax.lax.broadcasted_iota(jnp.uint32, (8, 128), 1)
                  + P.program_id(0).astype(jnp.uint32) * 1024)
        k1 = jnp.reshape(key_ref[0, 0], (1, 1))
        k2 = jnp.reshape(key_ref[0, 1], (1, 1))
        hi, lo = tf.threefry2x32_p.bind(k1, k2, jnp.zeros_like(counts), counts)
        o_ref[...] = hi ^ lo

    return P.pallas_call(kernel, jax.ShapeDtypeStruct((8 * grid, 128), jnp.uint32), grid=(grid,),
                         in_specs=[P.BlockSpec((1, 2), lambda i: (0, 0))],
                         out_specs=P.BlockSpec((8, 128), lambda i: (i, 0)), **kw)


@pytest.mark.parametrize("grid", [1, 2, 3])
def test_unvectorisable_primitive_runs_sequentially(rng, grid):
    key = jnp.asarray(rng.integers(0, 2**32, (1, 2), dtype=np.uint64).astype(np.uint32))
    theirs, ours = both(lambda P, **kw: _threefry_kernel(P, grid, **kw), key)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
    from jax._src.random import threefry2x32 as tf
    counts = jnp.arange(8 * 128 * grid, dtype=jnp.uint32).reshape(8 * grid, 128)
    # the same hash outside any kernel (XLA's own threefry lowering)
    hi, lo = tf.threefry2x32_p.bind(key[0, :1].reshape(1, 1), key[0, 1:].reshape(1, 1),
                                    jnp.zeros_like(counts), counts)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(hi ^ lo))


# --- 3. the names real kernels call ----------------------------------------------

def _attention_reference(q, k, v):
    s = jnp.einsum("qd,kd->qk", q, k) / 8.0
    p = jax.nn.softmax(s, axis=-1)
    return jnp.tanh(p @ v) ** 3 + jnp.sqrt(jnp.abs(v)).sum()


@pytest.mark.parametrize("shapes", [((128, 64), (256, 64), (256, 64)), ((8, 16), (32, 16), (32, 16))])
def test_estimate_cost_matches_jax(shapes):
    args = [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes]
    theirs = jpl.estimate_cost(_attention_reference, *args)
    ours = pl.estimate_cost(_attention_reference, *args)
    assert isinstance(ours, pl.CostEstimate)
    assert (ours.flops, ours.transcendentals, ours.bytes_accessed) == \
        (theirs.flops, theirs.transcendentals, theirs.bytes_accessed)
    (m, d), (n, _), _ = shapes
    assert ours.flops >= 2 * m * n * d * 2      # two matmuls at least
    assert ours.bytes_accessed == 4 * (m * d + 2 * n * d + m * d)


_PI_AND_2_OPS = ("cospi", "sinpi", "tanpi", "acospi", "asinpi", "atanpi", "exp2m1", "log2p1")


@pytest.mark.skipif(not all(hasattr(jax.lax, n) for n in _PI_AND_2_OPS),
                    reason="lax.cospi, exp2m1, ... need JAX 0.12.1 or newer")
def test_estimate_cost_counts_the_new_transcendentals_and_custom_jvp():
    def f(x):     # each new primitive once, and a custom_jvp (jax.nn.relu)
        return sum(getattr(jax.lax, n)(x * 0.5) for n in _PI_AND_2_OPS) + jax.nn.relu(x)

    arg = jax.ShapeDtypeStruct((8, 16), jnp.float32)
    theirs, ours = jpl.estimate_cost(f, arg), pl.estimate_cost(f, arg)
    assert (ours.flops, ours.transcendentals, ours.bytes_accessed) == \
        (theirs.flops, theirs.transcendentals, theirs.bytes_accessed)
    assert ours.transcendentals == 8 * 16 * len(_PI_AND_2_OPS)
    # per element: 8 halvings, 8 adds of sum() (from 0), one more add, and relu's max
    # (a custom_jvp, counted from JAX 0.12.1 on)
    assert ours.flops == 8 * 16 * (2 * len(_PI_AND_2_OPS) + 1 + 1)


def test_estimate_cost_of_kwargs_and_calls():
    def f(x, w, *, scale):
        return jax.jit(lambda a: jnp.exp(a @ w) * scale)(x) ** 2

    args = (jax.ShapeDtypeStruct((16, 32), jnp.float32), jax.ShapeDtypeStruct((32, 8), jnp.bfloat16))
    theirs, ours = jpl.estimate_cost(f, *args, scale=2.0), pl.estimate_cost(f, *args, scale=2.0)
    assert (ours.flops, ours.transcendentals, ours.bytes_accessed) == \
        (theirs.flops, theirs.transcendentals, theirs.bytes_accessed)
    assert ours.transcendentals == 16 * 8


def test_estimate_cost_is_accepted_by_pallas_call(rng):
    x = jnp.asarray(rng.standard_normal((8, 128)), jnp.float32)

    def build(P, **kw):
        return P.pallas_call(lambda x_ref, o_ref: o_ref.__setitem__(..., jnp.exp(x_ref[...])),
                             jax.ShapeDtypeStruct(x.shape, x.dtype),
                             cost_estimate=P.estimate_cost(jnp.exp, x), **kw)
    theirs, ours = both(build, x)
    assert_same(theirs, ours, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(ours), np.exp(np.asarray(x, np.float64)), rtol=1e-6)


def test_delay_and_run_state(rng):
    x = jnp.asarray(rng.standard_normal((8, 128)), jnp.float32)

    def build(P, **kw):
        def kernel(x_ref, o_ref):
            P.delay(100)
            o_ref[...] = x_ref[...] + 1
        return P.pallas_call(kernel, jax.ShapeDtypeStruct(x.shape, x.dtype), **kw)

    # JAX's generic interpret mode has no rule for delay; ours keeps it in the
    # kernel jaxpr (for hardware backends) and does not wait.
    ours = build(pl)(x)
    np.testing.assert_allclose(np.asarray(ours), np.asarray(x, np.float64) + 1, rtol=1e-6)
    assert "delay" in str(jax.make_jaxpr(build(pl))(x))

    def stateful(refs):
        a_ref, b_ref = refs
        b_ref[...] = a_ref[...] * 2 + b_ref[...]

    y = jnp.asarray(rng.standard_normal((8, 128)), jnp.float32)
    t = jpl.run_state(stateful)((x, y))
    o = pl.run_state(stateful)((x, y))
    assert_same(t, o)
    np.testing.assert_allclose(np.asarray(o[1]), 2 * np.asarray(x, np.float64) + np.asarray(y),
                               rtol=1e-6)


def test_block_spec_pipeline_mode_is_third_positional(rng):
    x = jnp.asarray(rng.standard_normal((32, 128)), jnp.float32)

    def build(P, **kw):
        spec = P.BlockSpec((8, 128), lambda i: (i, 0), P.Buffered(3))
        assert spec.pipeline_mode == P.Buffered(3)
        out = P.BlockSpec((8, 128), lambda i: (i, 0), P.Buffered((2, 1)))
        return P.pallas_call(lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...] * 5),
                             jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
                             in_specs=[spec], out_specs=out, **kw)
    theirs, ours = both(build, x)
    assert_same(theirs, ours)
    with pytest.raises(TypeError):
        pl.BlockSpec((8, 128), lambda i: (i, 0), None, pl.ANY)   # memory_space is keyword-only
    with pytest.raises(ValueError, match="buffer_count"):
        pl.Buffered((2, 0))


def test_block_spec_to_block_mapping():
    spec = pl.BlockSpec((8, None, 128), lambda i, j: (j, i, 0))
    m = spec.to_block_mapping("args[0]", jax.core.ShapedArray((32, 4, 256), jnp.float32),
                              grid=(4, 4), index_map_avals=None, index_map_tree=None,
                              vmapped_dims=(), debug=False)
    assert m.block_shape == (8, 128) and m.array_shape == (32, 4, 256) and m.origin == "args[0]"
    from pallas_frontend import _jax_compat as jc
    assert [int(v) for v in jc.eval_jaxpr(m.index_map, 2, 3)] == [3, 2, 0]


def test_lower_as_mlir_for_cpu(rng):
    x = jnp.asarray(rng.standard_normal((8, 128)), jnp.float32)

    def f(x):
        return pl.pallas_call(lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...] + 1),
                              jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    text = pl.lower_as_mlir(f, x, platforms=["cpu"])
    assert "func.func public @main" in text and "f32[8,128]" not in text and "8x128xf32" in text
    with pl.pallas_export_experimental(dynamic_shapes=True):
        from pallas_frontend.export import dynamic_shapes_export_enabled
        assert dynamic_shapes_export_enabled()


# --- 6. JAX's pallas_test: control flow, named grids, no outputs -------------------

@pytest.mark.parametrize("start,stop,step", [(0, 7, 3), (2, 8, 3), (1, 6, 1), (7, 1, -2), (5, 2, 3)])
def test_loop_with_traced_bounds_and_step(rng, start, stop, step):
    x = jnp.asarray(rng.integers(-50, 50, (128,)), jnp.int32)

    def build(P, **kw):
        def kernel(x_ref, y_ref):
            y_ref[...] = x_ref[...]

            @P.loop(jnp.int32(start), jnp.int32(stop), step=jnp.int32(step))
            def _(i):
                y_ref[...] = y_ref[...] * 2 + i
        return P.pallas_call(kernel, jax.ShapeDtypeStruct(x.shape, x.dtype), **kw)

    theirs, ours = both(build, x)
    if step > 0:   # JAX's trip count, cdiv(stop - start, step), runs 7, 5, 3, 1 for range(7, 1, -2)
        assert_same(theirs, ours)
    want = np.asarray(x, np.int64)
    for i in range(start, stop, step):
        want = want * 2 + i
    np.testing.assert_array_equal(np.asarray(ours), want)


def test_ref_in_a_fori_loop_carry(rng):
    program = jnp.asarray(rng.integers(0, 3, (5,)), jnp.int32)
    params = jnp.asarray(rng.standard_normal((5, 3)), jnp.float32)
    x = jnp.asarray(rng.standard_normal((8,)), jnp.float32)

    def build(P, **kw):
        def kernel(program_ref, params_ref, x_ref, out_ref):
            xv = x_ref[...]

            def body(i, carry):
                state, prog, par = carry        # Refs travel in the carry
                state = jax.lax.switch(prog[i], [
                    lambda s, p, i: s + p[i, 0] * xv,
                    lambda s, p, i: s * p[i, 1],
                    lambda s, p, i: s - p[i, 2] * xv * xv], state, par, i)
                return state, prog, par
            out_ref[...] = jax.lax.fori_loop(0, 5, body, (jnp.ones_like(xv), program_ref,
                                                          params_ref))[0]
        spec = P.BlockSpec((4,), lambda i: (i,))
        return P.pallas_call(
            kernel, jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
            in_specs=[P.BlockSpec((5,), lambda i: (0,)), P.BlockSpec((5, 3), lambda i: (0, 0)),
                      spec], out_specs=spec, **kw)

    theirs, ours = both(build, program, params, x)
    assert_same(theirs, ours, rtol=1e-5, atol=1e-5)
    s, xv, p = np.ones(8), np.asarray(x, np.float64), np.asarray(params, np.float64)
    for i, op in enumerate(np.asarray(program)):
        s = [s + p[i, 0] * xv, s * p[i, 1], s - p[i, 2] * xv * xv][op]
    np.testing.assert_allclose(np.asarray(ours), s, rtol=1e-5, atol=1e-5)


def test_named_grid_axis_size_and_index(rng):
    from jax import lax
    x = jnp.asarray(rng.standard_normal((4, 16, 128)), jnp.float32)

    def build(P, use_index, **kw):
        def kernel(x_ref, y_ref):
            assert lax.axis_size("i") == 2 and lax.axis_size("j") == 4
            v = x_ref[...] * 3
            if use_index:    # JAX's interpret mode does not bind axis_index; ours does
                v = v + lax.axis_index("i") * 10 + lax.axis_index("j") * 100
            y_ref[...] = v
        spec = P.BlockSpec((None, 8, 128), lambda j, i: (j, i, 0))
        return P.pallas_call(kernel, jax.ShapeDtypeStruct(x.shape, x.dtype),
                             in_specs=[spec], out_specs=spec, grid=(("j", 4), ("i", 2)), **kw)

    theirs = build(jpl, False, interpret=True)(x)
    assert_same(theirs, build(pl, False)(x))
    ours = np.asarray(build(pl, True)(x))
    want = 3 * np.asarray(x, np.float64) + 100 * np.arange(4)[:, None, None] \
        + 10 * np.repeat(np.arange(2), 8)[None, :, None]
    np.testing.assert_allclose(ours, want, rtol=1e-5, atol=1e-4)


def test_no_outputs_returns_empty_tuple(rng):
    x = jnp.asarray(rng.standard_normal((8, 128)), jnp.float32)

    def build(P, **kw):
        return P.pallas_call(lambda x_ref: None, (), grid=(2,), **kw)
    theirs, ours = both(build, x)
    assert theirs == () and ours == ()


# --- 2. Refs indexed with integer arrays ---------------------------------------------

def _gather_scatter(P, sequential, **kw):
    def kernel(x_ref, perm_ref, o_ref):
        perm = perm_ref[...]
        rows = x_ref[perm]                                   # gather rows
        cols = x_ref.at[:, jnp.arange(64) * 2][...]          # gather columns through .at
        r = jnp.arange(8)[:, None]
        c = (jnp.arange(128)[None, :] * 5 + r) % 128
        diag = x_ref[r, c]                                   # 2-D integer-array index
        if sequential:
            @P.when(P.program_id(1) == 0)
            def _():
                o_ref[...] = jnp.zeros_like(o_ref)
        else:
            o_ref[...] = jnp.zeros_like(o_ref)
        o_ref[jnp.arange(8)[::-1]] += rows                   # scatter-add rows, reversed
        o_ref[:, jnp.arange(64)] += cols                     # scatter into columns
        o_ref[...] += diag

    grid = (2, 3) if sequential else (2,)
    imap = (lambda i, k: (i, 0)) if sequential else (lambda i: (i, 0))
    pmap = (lambda i, k: (i, 0)) if sequential else (lambda i: (i, 0))
    return P.pallas_call(
        kernel, jax.ShapeDtypeStruct((16, 128), jnp.float32), grid=grid,
        in_specs=[P.BlockSpec((8, 128), imap), P.BlockSpec((None, 8), pmap)],
        out_specs=P.BlockSpec((8, 128), imap), **kw)


@pytest.mark.parametrize("sequential", [False, True])
def test_integer_array_ref_indexing_matches_jax(rng, sequential):
    x = jnp.asarray(rng.standard_normal((16, 128)), jnp.float32)
    perm = jnp.asarray(np.stack([rng.permutation(8), rng.permutation(8)]), jnp.int32)
    theirs, ours = both(lambda P, **kw: _gather_scatter(P, sequential, **kw), x, perm)
    assert_same(theirs, ours, rtol=1e-5, atol=1e-5)
    xs, want = np.asarray(x, np.float64), np.zeros((16, 128))
    reps = 3 if sequential else 1
    for b in range(2):
        blk, out = xs[8 * b:8 * b + 8], np.zeros((8, 128))
        for _ in range(reps):
            out[::-1] += blk[np.asarray(perm)[b]]
            out[:, :64] += blk[:, ::2]
            r = np.arange(8)[:, None]
            out += blk[r, (np.arange(128)[None, :] * 5 + r) % 128]
        want[8 * b:8 * b + 8] = out
    np.testing.assert_allclose(np.asarray(ours), want, rtol=1e-5, atol=1e-5)


def test_masked_gather_of_a_ragged_row(rng):
    """The GPU norm kernels' pattern: a column index vector past the row's end,
    a mask, and jnp.where in place of ``other``."""
    n = 100
    x = jnp.asarray(rng.standard_normal((4, n)), jnp.float32)

    def build(P, **kw):
        def kernel(x_ref, o_ref):
            cols = jnp.arange(128)
            mask = cols < n
            row = jnp.where(mask, x_ref.at[jnp.minimum(cols, n - 1)][...], 0.0)
            o_ref[...] = jnp.sum(row * row, keepdims=True).reshape(1) / n
        return P.pallas_call(kernel, jax.ShapeDtypeStruct((4,), jnp.float32), grid=(4,),
                             in_specs=[P.BlockSpec((None, n), lambda i: (i, 0))],
                             out_specs=P.BlockSpec((1,), lambda i: (i,)), **kw)

    theirs, ours = both(build, x)
    assert_same(theirs, ours, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(ours), (np.asarray(x, np.float64) ** 2).mean(1),
                               rtol=1e-5)


def test_gathers_are_visible_to_backends(rng):
    from pallas_frontend.backend_api import gathered_ref_accesses
    captured = []
    x = jnp.asarray(rng.standard_normal((16, 128)), jnp.float32)
    perm = jnp.asarray(np.stack([rng.permutation(8), rng.permutation(8)]), jnp.int32)
    jaxpr = jax.make_jaxpr(_gather_scatter(pl, False))(x, perm)
    from pallas_frontend.backend_api import _iter_equations
    (eqn,) = [e for e in _iter_equations(jaxpr.jaxpr) if e.primitive.name == "pallas_call"]
    found = gathered_ref_accesses(eqn.params["kernel"])
    captured.extend(found)
    prims = [p for p, _ in captured]
    assert prims.count("get") >= 3 and "swap" in prims
    assert all("test_jax_compat.py:" in where for _, where in captured)

    def plain(x_ref, o_ref):
        o_ref[...] = x_ref[pl.ds(0, 8)] + x_ref[3]
    jaxpr = jax.make_jaxpr(pl.pallas_call(plain, jax.ShapeDtypeStruct((8, 128), jnp.float32)))(x)
    (eqn,) = [e for e in _iter_equations(jaxpr.jaxpr) if e.primitive.name == "pallas_call"]
    assert gathered_ref_accesses(eqn.params["kernel"]) == []


# --- pl.kernel over meshes ------------------------------------------------------------

class _Mesh:
    def __init__(self, **axes):
        self.shape = dict(axes)


def test_kernel_with_ref_arguments_and_axis_index(rng):
    from jax import lax
    x = jnp.asarray(rng.standard_normal((4, 128)), jnp.float32)
    acc = jnp.asarray(rng.standard_normal((4, 128)), jnp.float32)

    @jax.jit
    def f(x, acc):
        acc_ref = jax.new_ref(acc)

        @pl.kernel(out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=_Mesh(core=4))
        def body(x_ref, a_ref, o_ref):
            c = lax.axis_index("core")
            row = x_ref[pl.ds(c, 1), :]
            a_ref[pl.ds(c, 1), :] += row          # the Ref argument, updated in place
            o_ref[pl.ds(c, 1), :] = row * (c + 1).astype(jnp.float32)

        out = body(x, acc_ref)
        return out, acc_ref[...]

    out, new_acc = f(x, acc)
    xs = np.asarray(x, np.float64)
    np.testing.assert_allclose(np.asarray(out), xs * np.arange(1, 5)[:, None], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(new_acc), np.asarray(acc, np.float64) + xs, rtol=1e-6)


def test_kernel_mpmd_bodies_share_outputs(rng):
    x = jnp.asarray(rng.standard_normal((8, 128)), jnp.float32)

    def vector_body(x_ref, o_ref):
        i = pl.program_id("v")
        o_ref[pl.ds(i * 4, 4), :] = x_ref[pl.ds(i * 4, 4), :] * 2

    def scalar_body(x_ref, o_ref):
        o_ref[0, 0] = jnp.sum(x_ref[...])          # runs after the vector body here

    k = pl.kernel([vector_body, scalar_body], jax.ShapeDtypeStruct(x.shape, x.dtype),
                  mesh=[_Mesh(v=2), _Mesh(s=1)])
    out = np.asarray(k(x))
    xs = np.asarray(x, np.float64)
    want = 2 * xs
    np.testing.assert_allclose(out.reshape(-1)[1:], want.reshape(-1)[1:], rtol=1e-6)
    # a float32 sum of 1024 terms: its rounding error grows with sum(|x|), not with the sum
    np.testing.assert_allclose(out[0, 0], xs.sum(), rtol=0, atol=1e-6 * np.abs(xs).sum())
    with pytest.raises(ValueError, match="same length"):
        pl.kernel([vector_body], x, mesh=[_Mesh(v=2), _Mesh(s=1)])
    with pytest.raises(ValueError, match="mesh must be a sequence"):
        pl.kernel([vector_body], x, mesh=_Mesh(v=2))


def test_core_map_body_reads_its_core_index(rng):
    from jax import lax
    x = jnp.asarray(rng.standard_normal((3, 128)), jnp.float32)

    @jax.jit
    def f(x):
        ref = jax.new_ref(x)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            core_map = pl.core_map

        @core_map(_Mesh(c=3))
        def _():
            c = lax.axis_index("c")
            ref[pl.ds(c, 1), :] = ref[pl.ds(c, 1), :] + c.astype(jnp.float32) * 10
        return ref[...]

    np.testing.assert_allclose(np.asarray(f(x)),
                               np.asarray(x, np.float64) + 10 * np.arange(3)[:, None], rtol=1e-6)


def test_kernel_name_and_source_info(rng):
    def my_kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    def ir_of(name):
        f = pl.pallas_call(my_kernel, jax.ShapeDtypeStruct((8, 128), jnp.float32), name=name)
        jaxpr = jax.make_jaxpr(f)(jnp.ones((8, 128), jnp.float32))
        from pallas_frontend.backend_api import _iter_equations
        (eqn,) = [e for e in _iter_equations(jaxpr.jaxpr) if e.primitive.name == "pallas_call"]
        return eqn.params["kernel"]

    import re
    assert re.fullmatch(r"fancy for kernel function my_kernel at .*test_jax_compat.py:\d+",
                        ir_of("fancy").name_and_src_info)
    assert re.fullmatch(r"my_kernel at .*test_jax_compat.py:\d+", ir_of(None).name_and_src_info)


def test_every_jax_pallas_name_is_importable_or_documented():
    import pathlib
    import types   # submodules (jpl.tpu, jpl.triton) appear once imported: not names
    theirs = {n for n in dir(jpl) if not n.startswith("_")
              and not isinstance(getattr(jpl, n), types.ModuleType)}
    missing = sorted(n for n in theirs if not hasattr(pl, n))
    doc = (pathlib.Path(__file__).parent.parent / "docs" / "api.md").read_text()
    for n in missing:
        assert f"| `{n}` |" in doc, f"pl.{n} is neither provided nor explained in docs/api.md"
    assert set(missing) <= {"semaphore"}       # kept out: docs/api-parity.md says why


def test_indirect_block_dim_is_refused_by_pallas_call(rng):
    x = jnp.asarray(rng.standard_normal((16, 128)), jnp.float32)
    assert repr(pl.Indirect(8)) == repr(jpl.Indirect(8)) == "Indirect(8)"
    with pytest.raises(ValueError, match=r"args\[0\] has Indirect\(8\).*emit_pipeline"):
        pl.pallas_call(lambda x_ref, o_ref: None, jax.ShapeDtypeStruct(x.shape, x.dtype),
                       in_specs=[pl.BlockSpec((pl.Indirect(8), 128), lambda: (0, 0))])(x)


def test_ref_passed_to_a_primitive_reads_as_in_jax(rng):
    x = jnp.asarray(rng.standard_normal((8, 32)), jnp.float32)
    y = jnp.asarray(rng.standard_normal((32, 16)), jnp.float32)
    messages = []
    for P, kw in ((jpl, {"interpret": True}), (pl, {})):
        def kernel(x_ref, y_ref, o_ref):
            o_ref[...] = jax.lax.dot_general(x_ref, y_ref, (((1,), (0,)), ((), ())))
        with pytest.raises(ValueError) as info:
            P.pallas_call(kernel, jax.ShapeDtypeStruct((8, 16), jnp.float32), **kw)(x, y)
        messages.append(str(info.value).splitlines()[0])
    # ours is JAX's message, led by the kernel's name and line
    assert messages[1].endswith(": " + messages[0]) and messages[1].startswith("Kernel kernel at ")
    assert "Ref<default>{float32[8,32]}" in messages[1]
