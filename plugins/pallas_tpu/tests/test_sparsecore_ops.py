"""SparseCore ops in the CPU model (``interpret=pltpu.InterpretParams()``),
each against NumPy on fresh random data; the model stands for the chip
``sc_mesh.model_chip()`` names (v6e: 2 SparseCores x 16 subcores x 8 lanes)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu
import pallas_tpu.tpu_sc as plsc

INFO = plsc.get_sparse_core_info()
L, NS = INFO.num_lanes, INFO.num_subcores
RNG = np.random.default_rng()


def sc_kernel(out_type, scratch, num_cores=1):
    mesh = plsc.VectorSubcoreMesh(core_axis_name="c", subcore_axis_name="s", num_cores=num_cores)
    return pl.kernel(out_type=out_type, mesh=mesh, scratch_types=scratch,
                     interpret=pltpu.InterpretParams())


def test_gather_each_subcore():
    x = RNG.standard_normal(NS * L).astype(np.float32)
    idx = RNG.integers(0, NS * L, NS * L).astype(np.int32)

    @sc_kernel(jax.ShapeDtypeStruct((NS * L,), jnp.float32),
               [pltpu.VMEM((NS * L,), jnp.float32), pltpu.VMEM((L,), jnp.int32),
                pltpu.VMEM((L,), jnp.float32)])
    def k(x_hbm, i_hbm, o_hbm, xv, iv, ov):
        s = jax.lax.axis_index("s")
        pltpu.sync_copy(x_hbm, xv)
        pltpu.sync_copy(i_hbm.at[pl.ds(s * L, L)], iv)
        ov[...] = plsc.load_gather(xv, [iv[...]])
        pltpu.sync_copy(ov, o_hbm.at[pl.ds(s * L, L)])
    np.testing.assert_array_equal(np.asarray(k(x, idx)), x[idx])


def test_scatter_add_duplicates_and_mask():
    x = RNG.standard_normal(L).astype(np.float32)
    idx = RNG.integers(0, 3, L).astype(np.int32)     # duplicates on purpose
    mask = RNG.random(L) < 0.6
    init = RNG.standard_normal(4).astype(np.float32)

    @sc_kernel(jax.ShapeDtypeStruct((4,), jnp.float32),
               [pltpu.VMEM((4,), jnp.float32), pltpu.VMEM((L,), jnp.float32),
                pltpu.VMEM((L,), jnp.int32), pltpu.VMEM((L,), jnp.int32)])
    def k(x_hbm, i_hbm, m_hbm, init_hbm, o_hbm, acc, xv, iv, mv):
        @pl.when(jax.lax.axis_index("s") == 0)
        def _():
            for src, dst in ((init_hbm, acc), (x_hbm, xv), (i_hbm, iv), (m_hbm, mv)):
                pltpu.sync_copy(src, dst)
            plsc.addupdate_scatter(acc, [iv[...]], xv[...], mask=mv[...] != 0)
            pltpu.sync_copy(acc, o_hbm)
    want = init.astype(np.float64)
    np.add.at(want, idx[mask], x[mask])
    got = k(x, idx, mask.astype(np.int32), init)
    # float32 sums of up to L terms: a few ulps of the terms' magnitude (cancellation)
    bound = 4 * np.finfo(np.float32).eps * (np.abs(init).max() + np.abs(x).sum())
    np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=bound)


def test_store_scatter_conflicting_duplicates_refused():
    @sc_kernel(jax.ShapeDtypeStruct((L,), jnp.int32), [pltpu.VMEM((L,), jnp.int32)])
    def k(o_hbm, v):
        v[...] = jnp.zeros((L,), jnp.int32)
        plsc.store_scatter(v, [jnp.zeros((L,), jnp.int32)], jnp.arange(L, dtype=jnp.int32))
        pltpu.sync_copy(v, o_hbm)
    with pytest.raises(Exception, match="store different values"):
        jax.block_until_ready(k())


def test_gather_out_of_range_refused():
    @sc_kernel(jax.ShapeDtypeStruct((L,), jnp.float32),
               [pltpu.VMEM((L,), jnp.float32), pltpu.VMEM((L,), jnp.float32)])
    def k(o_hbm, v, o):
        v[...] = jnp.zeros((L,), jnp.float32)
        o[...] = plsc.load_gather(v, [jnp.arange(L, dtype=jnp.int32) + 1])
        pltpu.sync_copy(o, o_hbm)
    with pytest.raises(Exception, match="out of range"):
        jax.block_until_ready(k())


def test_barrier_and_shared_vmem():
    """Each subcore writes its row of VMEM_SHARED, waits, then reads its neighbour's."""
    x = RNG.standard_normal((NS, L)).astype(np.float32)

    @sc_kernel(jax.ShapeDtypeStruct((NS, L), jnp.float32),
               [pltpu.VMEM_SHARED((NS, L), jnp.float32), pltpu.VMEM((L,), jnp.float32)])
    def k(x_hbm, o_hbm, shared, v):
        s = jax.lax.axis_index("s")
        pltpu.sync_copy(x_hbm.at[s], shared.at[s])
        plsc.subcore_barrier()
        pltpu.sync_copy(shared.at[(s + 1) % NS], v)
        v[...] = v[...] * 2.0
        pltpu.sync_copy(v, o_hbm.at[s])
    np.testing.assert_array_equal(np.asarray(k(x)), np.roll(x, -1, axis=0) * 2)


def test_fetch_and_add_neighbour():
    @sc_kernel((jax.ShapeDtypeStruct((NS,), jnp.int32),) * 2,
               [pltpu.SMEM((1,), jnp.int32), pltpu.VMEM((L,), jnp.int32)])
    def k(old_hbm, new_hbm, smem, v):
        s = jax.lax.axis_index("s")
        smem[0] = s * 7
        plsc.subcore_barrier()
        old = plsc.fetch_and_add(smem.at[0], 10, subcore_id=(s + 1) % NS)
        plsc.subcore_barrier()
        v[...] = jnp.full((L,), old, jnp.int32)
        pltpu.sync_copy(v.at[pl.ds(0, 1)], old_hbm.at[pl.ds(s, 1)])
        v[...] = jnp.full((L,), smem[0], jnp.int32)
        pltpu.sync_copy(v.at[pl.ds(0, 1)], new_hbm.at[pl.ds(s, 1)])
    old, new = k()
    ids = np.arange(NS)
    np.testing.assert_array_equal(np.asarray(old), ((ids + 1) % NS) * 7)
    np.testing.assert_array_equal(np.asarray(new), ids * 7 + 10)


def _vector_kernel(fn, *arrays, outs):
    """``fn`` on one subcore's vectors (copied to VMEM and back: a vector
    subcore loads and stores only VMEM); other subcores do nothing."""
    arrays = [np.asarray(a) for a in arrays]
    scratch = [pltpu.VMEM(a.shape, a.dtype) for a in arrays]
    scratch += [pltpu.VMEM(o.shape, o.dtype) for o in outs]

    @sc_kernel(outs, scratch)
    def k(*refs):
        n, m = len(arrays), len(outs)
        ins, os_, vin, vout = (refs[:n], refs[n:n + m], refs[n + m:2 * n + m],
                               refs[2 * n + m:])

        @pl.when(jax.lax.axis_index("s") == 0)
        def _():
            for src, dst in zip(ins, vin):
                pltpu.sync_copy(src, dst)
            results = fn(*[r[...] for r in vin])
            for o, r, h in zip(vout, results, os_):
                o[...] = r
                pltpu.sync_copy(o, h)
    return k(*arrays)


@pytest.mark.parametrize("dtype", [np.int32, np.float32])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_key_val_stable_masked(dtype, descending):
    keys = RNG.integers(-3, 3, L).astype(dtype)      # many ties: stability matters
    vals = RNG.permutation(L).astype(np.int32)
    mask = RNG.random(L) < 0.7
    ok, ov, om = _vector_kernel(
        lambda k, v, m: plsc.sort_key_val(k, v, mask=m != 0, descending=descending),
        keys, vals, mask.astype(np.int32),
        outs=(jax.ShapeDtypeStruct((L,), dtype), jax.ShapeDtypeStruct((L,), jnp.int32),
              jax.ShapeDtypeStruct((L,), jnp.bool_)))
    k64 = keys.astype(np.float64) * (-1 if descending else 1)
    k64[~mask] = 0             # unselected lanes follow in lane order (JAX's test's reference)
    order = np.lexsort((np.arange(L), k64, ~mask))
    np.testing.assert_array_equal(np.asarray(ok), keys[order])
    np.testing.assert_array_equal(np.asarray(ov), vals[order])
    np.testing.assert_array_equal(np.asarray(om), np.arange(L) < mask.sum())


@pytest.mark.parametrize("op", ["cumsum", "cummax"])
def test_masked_scans(op):
    x = RNG.integers(-50, 50, L).astype(np.int32)
    mask = RNG.random(L) < 0.5
    (got,) = _vector_kernel(lambda a, m: (getattr(plsc, op)(a, mask=m != 0),),
                            x, mask.astype(np.int32), outs=(jax.ShapeDtypeStruct((L,), jnp.int32),))
    want, acc, seen = [], None, False
    for xi, mi in zip(x.tolist(), mask.tolist()):
        if mi:
            acc = xi if not seen else (acc + xi if op == "cumsum" else max(acc, xi))
            seen = True
        want.append(acc if seen else xi)
    np.testing.assert_array_equal(np.asarray(got), want)


def test_scan_count_and_mask_reductions():
    x = RNG.integers(0, 4, L).astype(np.int32)
    m = RNG.random(L) < 0.5
    c, last, pop, ffs = _vector_kernel(
        lambda a, mm: (*plsc.scan_count(a), plsc.all_reduce_population_count(mm != 0),
                       plsc.all_reduce_ffs(mm != 0)),
        x, m.astype(np.int32),
        outs=(jax.ShapeDtypeStruct((L,), jnp.int32), jax.ShapeDtypeStruct((L,), jnp.bool_),
              jax.ShapeDtypeStruct((L,), jnp.int32), jax.ShapeDtypeStruct((L,), jnp.int32)))
    xs = x.tolist()
    np.testing.assert_array_equal(np.asarray(c), [xs[:i + 1].count(v) for i, v in enumerate(xs)])
    np.testing.assert_array_equal(np.asarray(last), [v not in xs[i + 1:] for i, v in enumerate(xs)])
    np.testing.assert_array_equal(np.asarray(pop), np.full(L, m.sum()))
    np.testing.assert_array_equal(np.asarray(ffs), np.full(L, np.argmax(m) if m.any() else L))


def test_compressed_store_and_expanded_load():
    x = RNG.standard_normal(L).astype(np.float32)
    m = RNG.random(L) < 0.5
    base = RNG.standard_normal(L).astype(np.float32)

    @sc_kernel((jax.ShapeDtypeStruct((L,), jnp.float32),) * 2,
               [pltpu.VMEM((L,), jnp.float32), pltpu.VMEM((L,), jnp.int32),
                pltpu.VMEM((L,), jnp.float32)])
    def k(x_hbm, m_hbm, b_hbm, c_hbm, e_hbm, v, mv, xr):
        @pl.when(jax.lax.axis_index("s") == 0)
        def _():
            pltpu.sync_copy(m_hbm, mv)
            pltpu.sync_copy(b_hbm, v)
            pltpu.sync_copy(x_hbm, xr)
            mask = mv[...] != 0
            xv = xr[...]
            plsc.store_compressed(v, xv, mask=mask)
            pltpu.sync_copy(v, c_hbm)
            c = jnp.where(mask, plsc.load_expanded(v, mask=mask), 0.0)
            v[...] = c
            pltpu.sync_copy(v, e_hbm)
    comp, exp = k(x, m.astype(np.int32), base)
    want = base.copy()
    want[:m.sum()] = x[m]
    np.testing.assert_array_equal(np.asarray(comp), want)
    want_e = np.zeros(L, np.float32)
    want_e[m] = x[m]
    np.testing.assert_array_equal(np.asarray(exp), want_e)


def test_parallel_loop_with_carry():
    x = RNG.standard_normal(4 * L).astype(np.float32)

    @sc_kernel(jax.ShapeDtypeStruct((4 * L,), jnp.float32), [pltpu.VMEM((4 * L,), jnp.float32)])
    def k(x_hbm, o_hbm, v):
        @pl.when(jax.lax.axis_index("s") == 0)
        def _():
            pltpu.sync_copy(x_hbm, v)

            @plsc.parallel_loop(0, 4 * L, L, carry=jnp.float32(1))
            def _(i, c):
                v[pl.ds(i, L)] = v[pl.ds(i, L)] * c
                return c + 1
            pltpu.sync_copy(v, o_hbm)
    want = x * np.repeat(np.arange(1, 5), L)
    np.testing.assert_array_equal(np.asarray(k(x)), want.astype(np.float32))
