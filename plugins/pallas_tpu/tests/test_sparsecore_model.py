"""The SparseCore CPU model's machinery beyond single ops: its NumPy fast
path for elementwise primitives (against JAX's own results), pipelines,
semaphores and indirect DMAs inside SparseCore kernels (against NumPy)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu
import pallas_tpu.tpu_sc as plsc
from pallas_tpu import sc_host_ops

INFO = plsc.get_sparse_core_info()
L, NS = INFO.num_lanes, INFO.num_subcores
RNG = np.random.default_rng()


def _operand(dtype, shape):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return RNG.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return RNG.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    x = np.asarray(RNG.standard_normal(shape) * 1e3).astype(dtype)
    if x.size > 1:
        x.flat[0], x.flat[1] = np.nan, -0.0
    return x


_BINARY = {"add": jax.lax.add, "sub": jax.lax.sub, "mul": jax.lax.mul, "max": jax.lax.max,
           "min": jax.lax.min, "and": jax.lax.bitwise_and, "or": jax.lax.bitwise_or,
           "eq": jax.lax.eq, "ne": jax.lax.ne, "lt": jax.lax.lt, "ge": jax.lax.ge,
           "rem": jax.lax.rem, "div": jax.lax.div}


_CASES = [(op, dtype) for op in sorted(_BINARY)
          for dtype in ("int32", "uint32", "int8", "float32", "bool")
          if not (dtype == "bool" and op in ("add", "sub", "mul", "rem", "div"))
          and not (dtype == "float32" and op in ("and", "or"))]   # not lax ops of that type


@pytest.mark.parametrize("op,dtype", _CASES)
def test_fast_path_equals_jax(op, dtype):
    """Each op the fast path takes gives XLA's bits (wrap-around, C division,
    NaN and -0.0 included); the ops it must not take are left to JAX."""
    fn = _BINARY[op]
    for shape in ((), (L,)):
        a, b = _operand(dtype, shape), _operand(dtype, shape)
        if op in ("rem", "div"):
            b = np.where(b == 0, 1, b).astype(dtype)
        eqn = jax.make_jaxpr(fn)(a, b).eqns[0]
        got = sc_host_ops.evaluate(eqn, [a, b])
        want = np.asarray(fn(a, b))
        if dtype == "float32" and op in ("rem", "div"):
            assert got is None
            continue
        assert got is not None, (op, dtype)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got.reshape(-1).view(np.uint8), want.reshape(-1).view(np.uint8))


def test_fast_path_leaves_zero_divisors_and_conversions_to_jax():
    a = np.array([7, -7], np.int32)
    b = np.array([0, 2], np.int32)
    assert sc_host_ops.evaluate(jax.make_jaxpr(jax.lax.rem)(a, b).eqns[0], [a, b]) is None
    f = np.array([1e10, np.nan], np.float32)
    eqn = jax.make_jaxpr(lambda x: x.astype(jnp.int32))(f).eqns[0]
    assert sc_host_ops.evaluate(eqn, [f]) is None


@pytest.mark.parametrize("case", [0, 1, 2])
def test_fast_path_select_and_convert(case):
    p = RNG.random(L) < 0.5
    x, y = _operand("int32", (L,)), _operand("int32", (L,))
    fns = [lambda p, x, y: jax.lax.select(p, x, y),
           lambda p, x, y: p.astype(jnp.int32) + x.astype(jnp.float32).astype(jnp.int32) * 0,
           lambda p, x, y: jnp.where(x > y, x.astype(jnp.uint8), y.astype(jnp.uint8))]
    jaxpr = jax.make_jaxpr(fns[case])(p, x, y)
    env = dict(zip(jaxpr.jaxpr.invars, [p, x, y]))
    for eqn in jaxpr.eqns:
        vals = [env[v] if not hasattr(v, "val") else v.val for v in eqn.invars]
        out = sc_host_ops.evaluate(eqn, vals)
        if out is None:
            out = eqn.primitive.bind(*vals, **eqn.params)
            out = out[0] if eqn.primitive.multiple_results else out
        env[eqn.outvars[0]] = np.asarray(out)
    np.testing.assert_array_equal(env[jaxpr.jaxpr.outvars[0]], np.asarray(fns[case](p, x, y)))


def sc_kernel(out_type, scratch):
    mesh = plsc.VectorSubcoreMesh(core_axis_name="c", subcore_axis_name="s", num_cores=1)
    return pl.kernel(out_type=out_type, mesh=mesh, scratch_types=scratch,
                     interpret=pltpu.InterpretParams())


@pytest.mark.parametrize("ignored", [None, "some"])
def test_indirect_gather_and_scatter_dma(ignored):
    """Each subcore gathers rows of HBM through its VMEM index Ref (rows whose
    index is the ignored value keep the destination's data) and scatters them
    back to a second output through the same indices."""
    rows, width = 4 * L, 16
    x = RNG.standard_normal((rows, width)).astype(np.float32)
    idx = np.stack([RNG.permutation(rows)[:L] for _ in range(NS)]).astype(np.int32)
    skip = int(idx[0, 1]) if ignored else None

    @sc_kernel((jax.ShapeDtypeStruct((NS, L, width), jnp.float32),
                jax.ShapeDtypeStruct((NS, rows, width), jnp.float32)),
               [pltpu.VMEM((L,), jnp.int32), pltpu.VMEM((L, width), jnp.float32)])
    def k(x_hbm, i_hbm, g_hbm, s_hbm, iv, rows_v):
        s = jax.lax.axis_index("s")
        pltpu.sync_copy(i_hbm.at[s], iv)
        rows_v[...] = jnp.full((L, width), -1.0, jnp.float32)
        src = x_hbm.at[plsc.Indices(iv, ignored_value=skip)] if ignored else x_hbm.at[iv]
        pltpu.sync_copy(src, rows_v)
        pltpu.sync_copy(rows_v, g_hbm.at[s])
        pltpu.sync_copy(x_hbm, s_hbm.at[s])
        pltpu.sync_copy(rows_v, s_hbm.at[s].at[iv])
    g, sc = (np.asarray(a) for a in k(x, idx))
    want = x[idx]
    if ignored:
        want[idx == skip] = -1.0
    np.testing.assert_array_equal(g, want)
    want_s = np.broadcast_to(x, (NS, rows, width)).copy()
    for s in range(NS):
        want_s[s, idx[s]] = want[s]
    np.testing.assert_array_equal(sc, want_s)


def test_indirect_dma_refusals():
    """JAX's SparseCore lowering refuses these; the model refuses them before running."""
    def run(body):
        @sc_kernel(jax.ShapeDtypeStruct((L,), jnp.int32),
                   [pltpu.VMEM((L,), jnp.int32), pltpu.VMEM((L,), jnp.int32)])
        def k(x_hbm, i_hbm, o_hbm, iv, ov):
            body(x_hbm, i_hbm, o_hbm, iv, ov)
        return k(np.arange(L, dtype=np.int32), np.arange(L, dtype=np.int32))
    with pytest.raises(NotImplementedError, match="from HBM to HBM is not supported"):
        run(lambda x, i, o, iv, ov: pltpu.sync_copy(x.at[iv], o))
    with pytest.raises(NotImplementedError, match="must be in VMEM, got HBM"):
        run(lambda x, i, o, iv, ov: pltpu.sync_copy(x.at[i], ov))
    with pytest.raises(ValueError, match="source ref can be indexed"):
        run(lambda x, i, o, iv, ov: pltpu.sync_copy(x.at[iv], ov.at[iv]))
    with pytest.raises(NotImplementedError, match="Get does not support loading from HBM"):
        run(lambda x, i, o, iv, ov: ov.__setitem__(..., x[...]))
    with pytest.raises(NotImplementedError, match="To load a scalar from VMEM"):
        run(lambda x, i, o, iv, ov: ov.__setitem__(..., jnp.full((L,), iv[0])))


@pytest.mark.parametrize("dtype", [jnp.int16, jnp.int8, jnp.float32])
def test_bitcast_view_store(dtype):
    """A store through ref.bitcast(narrower) lands as the TPU lays it out: row
    r*k + h of the view is part h (low bits first) of row r."""
    x = RNG.integers(-2**31, 2**31 - 1, (2, L), dtype=np.int64).astype(np.int32)
    k_ = 4 // np.dtype(dtype).itemsize
    parts = np.asarray(x).view(dtype).reshape(2, L, k_).transpose(0, 2, 1).reshape(2 * k_, L)

    @sc_kernel(jax.ShapeDtypeStruct((2, L), jnp.int32),
               [pltpu.VMEM((2, L), jnp.int32), pltpu.VMEM((2 * k_, L), dtype)])
    def k(p_hbm, o_hbm, v, pv):
        pltpu.sync_copy(p_hbm, pv)
        vb = v.bitcast(dtype)
        for r in range(2 * k_):
            vb[r] = pv[r]
        pltpu.sync_copy(v, o_hbm)
    np.testing.assert_array_equal(np.asarray(k(parts)), x)


@pytest.mark.parametrize("vector", [False, True])
def test_dma_semaphore_scratch(vector):
    """A DMA semaphore in scratch_types: the model stores it as its int32 inner
    type (its Ref's dtype is JAX's semaphore dtype, no NumPy type); each
    program copies by async DMA and waits, as JAX's test_dma_memory_space."""
    mesh = (plsc.VectorSubcoreMesh(core_axis_name="c", subcore_axis_name="s", num_cores=1)
            if vector else plsc.ScalarSubcoreMesh(axis_name="c", num_cores=1))
    n = NS if vector else 1
    x = RNG.standard_normal((n, L)).astype(np.float32)

    @functools.partial(pl.kernel, out_type=jax.ShapeDtypeStruct((n, L), jnp.float32), mesh=mesh,
                       scratch_types=(pltpu.SemaphoreType.DMA,),
                       interpret=pltpu.InterpretParams())
    def k(x_hbm, o_hbm, sem):
        s = jax.lax.axis_index("s") if vector else 0
        pltpu.async_copy(x_hbm.at[s], o_hbm.at[s], sem).wait()
    np.testing.assert_array_equal(np.asarray(k(x), np.float64), x.astype(np.float64))


def test_dma_through_select_ref():
    """A DMA's source and semaphore chosen by pl.select_ref when the kernel runs
    (the copy takes the selection, as JAX's does): index k picks the k-th Ref,
    an index out of range the last one, as JAX's lowering chooses."""
    n, shift = 3, int(RNG.integers(-2, 3))
    xs = [RNG.standard_normal((NS, L)).astype(np.float32) for _ in range(n)]

    @functools.partial(pl.kernel, out_type=jax.ShapeDtypeStruct((n + 2, NS, L), jnp.float32),
                       mesh=plsc.VectorSubcoreMesh(core_axis_name="c", subcore_axis_name="s",
                                                   num_cores=1),
                       scratch_types=(pltpu.SemaphoreType.DMA((2,)),),
                       interpret=pltpu.InterpretParams())
    def k(a_hbm, b_hbm, c_hbm, o_hbm, sem):
        s = jax.lax.axis_index("s")

        @pl.loop(0, n + 2)
        def _(i):
            j = i + shift
            pltpu.async_copy(pl.select_ref(j, a_hbm.at[s], b_hbm.at[s], c_hbm.at[s]),
                             o_hbm.at[i, s], pl.select_ref(i % 2, sem.at[0], sem.at[1])).wait()
    got = np.asarray(k(*xs))
    for i in range(n + 2):
        j = i + shift
        np.testing.assert_array_equal(got[i], xs[j if 0 <= j < n else n - 1])


@pytest.mark.parametrize("grid", [1, 4])
def test_emit_pipeline_in_a_subcore(grid):
    """A SparseCore kernel's emit_pipeline (recorded for JAX's own pipeline when
    compiled) runs ours' schedule in the model: each subcore's row, block by block."""
    x = RNG.standard_normal((NS, 4 * L)).astype(np.float32)
    width = 4 * L // grid

    @sc_kernel(jax.ShapeDtypeStruct(x.shape, x.dtype), [])
    def kernel(x_hbm, o_hbm):
        s = jax.lax.axis_index("s")

        def body(x_v, o_v):
            o_v[...] = x_v[...] * 3.0 - 1.0
        spec = pl.BlockSpec((None, width), lambda j: (s, j))
        pltpu.emit_pipeline(body, grid=(grid,), in_specs=[spec], out_specs=[spec])(x_hbm, o_hbm)
    want = x.astype(np.float64) * 3.0 - 1.0
    np.testing.assert_allclose(np.asarray(kernel(x)), want, rtol=1e-6, atol=1e-5)


def test_emit_pipeline_operand_left_in_hbm():
    """A pipeline operand whose spec is in HBM reaches the body as the HBM Ref
    itself: a scatter DMA into it by a block of indices (JAX's test_scatter_1d_array)."""
    x = RNG.integers(-1000, 1000, L, dtype=np.int32)
    idx = RNG.permutation(L).astype(np.int32)

    @sc_kernel(jax.ShapeDtypeStruct((L,), jnp.int32), [])
    def kernel(x_hbm, i_hbm, o_hbm):
        def body(x_v, i_v, o_h):
            pltpu.sync_copy(x_v, o_h.at[i_v[...]])

        @pl.when(jax.lax.axis_index("s") == 0)
        def _():
            pltpu.emit_pipeline(body, grid=(1,), in_specs=[pl.BlockSpec(), pl.BlockSpec()],
                                out_specs=[pl.BlockSpec(memory_space=pltpu.HBM)])(
                                    x_hbm, i_hbm, o_hbm)
    want = np.zeros(L, np.int64)
    want[idx] = x
    np.testing.assert_array_equal(np.asarray(kernel(x, idx)), want)


def test_sparsecore_trace_is_told_from_a_tensorcore_one():
    """Only a SparseCore kernel's trace records its emit_pipeline for JAX's: a
    TensorCore kernel traced after one (same thread) keeps ours' schedule."""
    from pallas_tpu import sc_mesh
    x = RNG.standard_normal((8, 128)).astype(np.float32)
    seen = []

    @sc_kernel(jax.ShapeDtypeStruct((L,), jnp.float32), [])
    def sc(o_hbm):
        seen.append(sc_mesh.tracing_sparsecore_kernel())

    def tc(x_ref, o_ref):
        seen.append(sc_mesh.tracing_sparsecore_kernel())
        o_ref[...] = x_ref[...]
    sc()
    out = pl.pallas_call(tc, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                         interpret=True)(x)
    np.testing.assert_array_equal(np.asarray(out), x)
    assert seen == [True, False]


def test_a_tensorcore_kernel_with_the_sparsecore_meshs_axes_is_not_taken_for_one():
    """A TensorCore core_map whose axis has the name and size of the last
    SparseCore mesh's (here "core", 1) is still a TensorCore kernel: the kind is
    read off the traced kernel's compiler params (backend API 1.12), not guessed
    from its axes (the guess failed test_async_prefetch under xdist)."""
    from pallas_tpu import sc_mesh
    seen = []
    mesh = plsc.ScalarSubcoreMesh(axis_name="core", num_cores=1)

    @pl.kernel(out_type=jax.ShapeDtypeStruct((8,), jnp.int32), mesh=mesh,
               interpret=pltpu.InterpretParams())
    def sc(o_ref):
        seen.append(sc_mesh.tracing_sparsecore_kernel())

    sc()
    x = RNG.integers(-100, 100, (8, 128)).astype(np.int32)

    @pl.kernel(out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
               mesh=pltpu.create_tensorcore_mesh("core", num_cores=1),
               interpret=pltpu.InterpretParams())
    def tc(x_ref, o_ref):
        seen.append(sc_mesh.tracing_sparsecore_kernel())
        pltpu.sync_copy(x_ref, o_ref)

    np.testing.assert_array_equal(np.asarray(tc(x)), x)
    assert seen == [True, False]
