"""SparseCore kernels compile device-less for a topology with SparseCores
(libtpu, no TPU), under JAX and under ours, and ours' Mosaic module equals
JAX's (``tools/sc_mosaic_text``: each kernel's body in generic form without
locations, and the custom call's settings).

Each kernel below is written once against an API triple (pl, pltpu, plsc)
and built with JAX's and with ours; together they use every SparseCore op
and both meshes. tools/sc_mosaic.py does the same for every kernel of JAX's
tpu_sparsecore_pallas_test.py.
"""

import functools
import importlib.util

import jax
import jax.numpy as jnp
import pytest
from jax import lax

from pallas_tpu import _jax_private

from sc_compare import JAX_API, OUR_API, assert_same_mosaic, mosaic_modules

pytestmark = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                reason="compiling for a TPU topology needs libtpu")

f32, i32 = jnp.float32, jnp.int32


def _no_layout_passes(pltpu_):
    # the vector ops (scans, sort, mask reductions, pack) are lowered without
    # Mosaic's layout passes, as JAX's own SparseCore tests compile them
    return pltpu_.CompilerParams(needs_layout_passes=False)


def _mesh(plsc_, num_cores=1, num_subcores=None):
    kw = {} if num_subcores is None else {"num_subcores": num_subcores}
    return plsc_.VectorSubcoreMesh(core_axis_name="core", subcore_axis_name="subcore",
                                   num_cores=num_cores, **kw)


# --- the kernels: (fn(api) -> callable, operand shapes) -------------------------------

def add_one_per_subcore(api):
    pl_, pltpu_, plsc_ = api

    def f(x):
        @functools.partial(pl_.kernel, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                           mesh=_mesh(plsc_), scratch_types=[pltpu_.VMEM(x.shape[1:], x.dtype)])
        def add_one(x_hbm, o_hbm, buf):
            s = lax.axis_index("subcore")
            pltpu_.sync_copy(x_hbm.at[s], buf)
            buf[...] = buf[...] + 1.0
            pltpu_.sync_copy(buf, o_hbm.at[s])
        return add_one(x)
    return f, [((16, 8), f32)]


def embedding_gather_scatter_add(api):
    """Rows gathered from HBM by index (indirect DMA), summed into a shared
    table by a scatter-add DMA, subcores synchronised by the barrier."""
    pl_, pltpu_, plsc_ = api

    def f(table, idx):
        @functools.partial(
            pl_.kernel, out_type=jax.ShapeDtypeStruct((8, 32), table.dtype), mesh=_mesh(plsc_),
            compiler_params=pltpu_.CompilerParams(use_tc_tiling_on_sc=False),
            scratch_types=[pltpu_.VMEM((8,), i32), pltpu_.VMEM((8, 32), table.dtype),
                           pltpu_.VMEM_SHARED((8, 32), table.dtype)])
        def gather_add(t_hbm, i_hbm, o_hbm, ids, rows, acc):
            s = lax.axis_index("subcore")
            pltpu_.sync_copy(i_hbm.at[s], ids)
            pltpu_.sync_copy(t_hbm.at[ids], rows)

            @pl_.when(s == 0)
            def _():
                pltpu_.sync_copy(rows, acc)
            plsc_.subcore_barrier()
            pltpu_.sync_copy(rows, acc.at[ids], add=True)
            plsc_.subcore_barrier()

            @pl_.when(s == 0)
            def _():
                pltpu_.sync_copy(acc, rows)
                pltpu_.sync_copy(rows, o_hbm)
        return gather_add(table, idx)
    return f, [((64, 32), f32), ((16, 8), i32)]


def vector_gather_scatter(api):
    pl_, pltpu_, plsc_ = api

    def f(x, idx):
        @functools.partial(
            pl_.kernel, out_type=jax.ShapeDtypeStruct((3, 8), x.dtype), mesh=_mesh(plsc_, 1, 1),
            scratch_types=[pltpu_.VMEM((64,), x.dtype), pltpu_.VMEM((8,), i32),
                           pltpu_.VMEM((3, 8), x.dtype)])
        def vgs(x_hbm, i_hbm, o_hbm, table, ids, out):
            pltpu_.sync_copy(x_hbm, table)
            pltpu_.sync_copy(i_hbm, ids)
            i = ids[...]
            mask = i % 2 == 0
            out[0] = plsc_.load_gather(table, [i], mask=mask)
            plsc_.store_scatter(table, [i], out[0] * 2.0, mask=mask)
            plsc_.addupdate_scatter(table, [i], out[0])
            out[1] = plsc_.load_gather(table, [i])
            out[2] = plsc_.load_expanded(table.at[pl_.ds(0, 8)], mask=mask)
            plsc_.store_compressed(table.at[pl_.ds(8, 8)], out[1], mask=mask)
            plsc_.addupdate_compressed(table.at[pl_.ds(16, 8)], out[1], mask=mask)
            plsc_.addupdate(table.at[pl_.ds(24, 8)], out[2])
            pltpu_.sync_copy(out, o_hbm)
        return vgs(x, idx)
    return f, [((64,), f32), ((8,), i32)]


def scans_and_sort(api):
    pl_, pltpu_, plsc_ = api

    def f(x, k):
        @functools.partial(
            pl_.kernel, out_type=jax.ShapeDtypeStruct((8, 8), i32), mesh=_mesh(plsc_, 1, 1),
            compiler_params=_no_layout_passes(pltpu_),
            scratch_types=[pltpu_.VMEM((8,), f32), pltpu_.VMEM((8,), i32),
                           pltpu_.VMEM((8, 8), i32)])
        def scans(x_hbm, k_hbm, o_hbm, xv, kv, out):
            pltpu_.sync_copy(x_hbm, xv)
            pltpu_.sync_copy(k_hbm, kv)
            x, keys = xv[...], kv[...]
            mask = keys > 0
            out[0] = plsc_.cumsum(keys, mask=mask)
            out[1] = plsc_.cummax(keys, mask=mask)
            counts, last = plsc_.scan_count(keys, mask)
            out[2] = counts
            out[3] = last.astype(i32)
            sk, sv = plsc_.sort_key_val(keys, x, descending=True)
            out[4] = sk + sv.astype(i32)
            mk, _, valid = plsc_.sort_key_val(keys, keys, mask=mask)
            out[5] = jnp.where(valid, mk, 0)
            out[6] = plsc_.all_reduce_population_count(mask)
            out[7] = plsc_.all_reduce_ffs(mask)
            pltpu_.sync_copy(out, o_hbm)
        return scans(x, k)
    return f, [((8,), f32), ((8,), i32)]


def pack_unpack_bitcast(api):
    pl_, pltpu_, plsc_ = api

    def f(a, b):
        @functools.partial(
            pl_.kernel, out_type=jax.ShapeDtypeStruct((2, 8), f32), mesh=_mesh(plsc_, 1, 1),
            compiler_params=_no_layout_passes(pltpu_),
            scratch_types=[pltpu_.VMEM((8,), f32), pltpu_.VMEM((8,), f32),
                           pltpu_.VMEM((2, 8), f32)])
        def packing(a_hbm, b_hbm, o_hbm, av, bv, out):
            pltpu_.sync_copy(a_hbm, av)
            pltpu_.sync_copy(b_hbm, bv)
            ab = plsc_.pack(av[...], bv[...], format=plsc_.PackFormat.INTERLEAVED)
            lo, hi = plsc_.unpack(ab, format=plsc_.PackFormat.INTERLEAVED)
            out[0] = lo
            out[1] = plsc_.bitcast(plsc_.bitcast(hi, i32) + 1, f32)
            pltpu_.sync_copy(out, o_hbm)
        return packing(a, b)
    return f, [((8,), f32), ((8,), f32)]


def parallel_loop_with_carry(api):
    pl_, pltpu_, plsc_ = api

    def f(x):
        @functools.partial(
            pl_.kernel, out_type=jax.ShapeDtypeStruct((8,), x.dtype), mesh=_mesh(plsc_, 1, 1),
            scratch_types=[pltpu_.VMEM(x.shape, x.dtype), pltpu_.VMEM((8,), x.dtype)])
        def loop(x_hbm, o_hbm, xv, acc):
            pltpu_.sync_copy(x_hbm, xv)

            @plsc_.parallel_loop(0, x.shape[0], 1, carry=jnp.zeros((8,), x.dtype))
            def total(i, carry):
                return carry + xv[i]
            acc[...] = total
            pltpu_.sync_copy(acc, o_hbm)
        return loop(x)
    return f, [((32, 8), f32)]


def fetch_and_add_in_smem(api):
    pl_, pltpu_, plsc_ = api

    def f(x):
        @functools.partial(
            pl_.kernel, out_type=jax.ShapeDtypeStruct((16 * 8,), i32), mesh=_mesh(plsc_),
            scratch_types=[pltpu_.SMEM((1,), i32), pltpu_.VMEM((8,), i32)])
        def counter(x_hbm, o_hbm, count, old):
            s = lax.axis_index("subcore")
            count[0] = s
            plsc_.subcore_barrier()
            before = plsc_.fetch_and_add(count.at[0], 3, subcore_id=(s + 1) % 16)
            plsc_.subcore_barrier()
            old[...] = lax.broadcast(before + count[0], (8,))
            pltpu_.sync_copy(old, o_hbm.at[pl_.ds(s * 8, 8)])
        return counter(x)
    return f, [((16,), i32)]


def shared_vmem_slice(api, index=None):
    """``index``: copy through one row of the slice (``mine.at[index]``)."""
    pl_, pltpu_, plsc_ = api

    def f(x):
        @functools.partial(
            pl_.kernel, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=_mesh(plsc_),
            scratch_types=[pltpu_.VMEM_SHARED((8, 128), x.dtype)])
        def sliced(x_hbm, o_hbm, shared):
            s = lax.axis_index("subcore")
            mine = plsc_.slice_subcore_vmem_from_shared(shared)
            if index is not None:
                mine = mine.at[index]
            pltpu_.sync_copy(x_hbm.at[s], mine)
            pltpu_.sync_copy(mine, o_hbm.at[s])
        return sliced(x)
    return f, [((16, 8) if index is not None else (16, 8, 8), f32)]


def scalar_subcore_copy(api):
    pl_, pltpu_, plsc_ = api

    def f(x):
        mesh = plsc_.ScalarSubcoreMesh(axis_name="core", num_cores=1)

        @functools.partial(pl_.kernel, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=mesh)
        def copy(x_hbm, o_hbm):
            pltpu_.sync_copy(x_hbm, o_hbm)
        return copy(x)
    return f, [((16, 8), i32)]


def pipelined_scale(api):
    """Each subcore pipelines its row's blocks through VMEM (emit_pipeline:
    JAX's own schedule in both modules); the index Ref stays in HBM."""
    pl_, pltpu_, plsc_ = api

    def f(x, idx):
        @functools.partial(pl_.kernel, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                           mesh=_mesh(plsc_, num_subcores=4),
                           compiler_params=pltpu_.CompilerParams(use_tc_tiling_on_sc=False))
        def scale(x_hbm, i_hbm, o_hbm):
            s = lax.axis_index("subcore")

            def body(x_v, o_v):
                o_v[...] = x_v[...] * 2.0 + 1.0
            row = lambda j: (s, j)
            pltpu_.emit_pipeline(body, grid=(4,), in_specs=[pl_.BlockSpec((None, 16), row)],
                                 out_specs=[pl_.BlockSpec((None, 16), row)])(x_hbm, o_hbm)
            pltpu_.emit_pipeline(
                lambda i_h: None, grid=(1,),
                in_specs=[pl_.BlockSpec(memory_space=pltpu_.HBM)])(i_hbm)
        return scale(x, idx)
    return f, [((4, 64), f32), ((16,), i32)]


def dict_scratch(api):
    """Scratch given as a dict (reaching the body by keyword): the kernel's
    operands in JAX's pytree order of the dict (keys sorted), not as written."""
    pl_, pltpu_, plsc_ = api

    def f(x):
        @functools.partial(
            pl_.kernel, out_type=jax.ShapeDtypeStruct(x.shape[1:], x.dtype), mesh=_mesh(plsc_),
            scratch_types=dict(shared=pltpu_.VMEM_SHARED(x.shape[1:], x.dtype),
                               buf=pltpu_.VMEM(x.shape[1:], x.dtype)))
        def copy(x_hbm, o_hbm, *, shared, buf):
            s = lax.axis_index("subcore")
            pltpu_.sync_copy(x_hbm.at[s], buf)

            @pl_.when(s == 0)
            def _():
                pltpu_.sync_copy(buf, shared)
                pltpu_.sync_copy(shared, o_hbm)
        return copy(x)
    return f, [((16, 8), f32)]


def loop_to_subcore_id(api):
    """pl.loop with a traced bound: JAX's trip count, and the loop's constant
    lower bound and step stay operands of the loop (made before it), as in
    JAX's module, not constants inside its body."""
    pl_, pltpu_, plsc_ = api

    def f(x):
        @functools.partial(pl_.kernel, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                           mesh=_mesh(plsc_), scratch_types=[pltpu_.VMEM(x.shape, x.dtype)])
        def rows(x_hbm, o_hbm, buf):
            s = lax.axis_index("subcore")

            @pl_.loop(0, 2 * s + 1)
            def _(i):
                buf[s] = jnp.full(x.shape[1:], i, x.dtype)
                pltpu_.sync_copy(buf.at[s], o_hbm.at[s])
        return rows(x)
    return f, [((16, 8), i32)]


def own_empty_ref_and_scope(api):
    """A body's own ``jax.empty_ref`` (JAX: allocated in place) beside a
    ``pl.run_scoped`` buffer (JAX: a region around the scope's body)."""
    pl_, pltpu_, plsc_ = api

    def f(x):
        @functools.partial(pl_.kernel, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                           mesh=_mesh(plsc_))
        def own(x_hbm, o_hbm):
            s = lax.axis_index("subcore")
            row = jax.empty_ref(jax.ShapeDtypeStruct(x.shape[1:], x.dtype),
                                memory_space=pltpu_.VMEM)
            count = jax.empty_ref(jax.ShapeDtypeStruct((1,), i32), memory_space=pltpu_.SMEM)
            count[0] = s + 1
            pltpu_.sync_copy(x_hbm.at[s], row)

            def scoped(tmp):
                tmp[...] = row[...] * count[0].astype(x.dtype)
                pltpu_.sync_copy(tmp, o_hbm.at[s])
            pl_.run_scoped(scoped, pltpu_.VMEM(x.shape[1:], x.dtype))
            row[...] = row[...] + 1.0
        return own(x)
    return f, [((16, 8), f32)]


def no_results_parallel_loop_in_loop(api):
    """A kernel with no results (``out_type=()``) is launched, as JAX launches
    every ``pl.kernel``; the inner loop's closed-over constant array is made
    before it (an operand of the loop), as in JAX's module."""
    pl_, pltpu_, plsc_ = api
    u32 = jnp.uint32

    def f(x):
        @functools.partial(pl_.kernel, out_type=(), mesh=_mesh(plsc_),
                           scratch_types=[pltpu_.VMEM((8,), u32), pltpu_.VMEM((8,), u32)])
        def no_results(x_hbm, a_ref, c_ref):
            pltpu_.sync_copy(x_hbm.at[lax.axis_index("subcore")], a_ref)

            @pl_.loop(0, 4)
            def _(i):
                const = jnp.array(0, u32)

                @plsc_.parallel_loop(0, 8)
                def _(j):
                    shifted = a_ref[...] >> i.astype(u32)
                    plsc_.store_compressed(c_ref.at[...], a_ref[...], mask=shifted > const)
        no_results(x)
    return f, [((16, 8), jnp.uint32)]


def dma_through_select_ref(api):
    """A DMA's source and semaphore chosen by pl.select_ref: the copy takes the
    selection itself (JAX's lowering: an scf.if chain on the index)."""
    pl_, pltpu_, plsc_ = api

    def f(a, b, c):
        @functools.partial(pl_.kernel, out_type=jax.ShapeDtypeStruct((3, 16, 8), a.dtype),
                           mesh=_mesh(plsc_), scratch_types=[pltpu_.SemaphoreType.DMA((2,))])
        def selected(a_hbm, b_hbm, c_hbm, o_hbm, sem):
            s = lax.axis_index("subcore")

            @pl_.loop(0, 3)
            def _(i):
                pltpu_.async_copy(pl_.select_ref(i, a_hbm.at[s], b_hbm.at[s], c_hbm.at[s]),
                                  o_hbm.at[i, s], pl_.select_ref(i % 2, sem.at[0], sem.at[1])
                                  ).wait()
        return selected(a, b, c)
    return f, [((16, 8), f32)] * 3


KERNELS = [dma_through_select_ref, no_results_parallel_loop_in_loop, own_empty_ref_and_scope,
           add_one_per_subcore, pipelined_scale, dict_scratch, embedding_gather_scatter_add,
           vector_gather_scatter,
           scans_and_sort, pack_unpack_bitcast, parallel_loop_with_carry, fetch_and_add_in_smem,
           shared_vmem_slice, scalar_subcore_copy, loop_to_subcore_id]
NEEDS = {shared_vmem_slice: ("0.12", _jax_private.jax_has_shared_slice(),
                             "plsc.slice_subcore_vmem_from_shared")}


def _compile(kernel, api):
    fn, shapes = kernel(api)
    return mosaic_modules(fn, [jax.ShapeDtypeStruct(s, d) for s, d in shapes])


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.__name__)
def test_compiles_for_sparsecore_with_jax_mosaic_module(kernel):
    if kernel in NEEDS:
        since, present, what = NEEDS[kernel]
        if not present:
            pytest.skip(_jax_private.needs_newer_jax(what, since))
    assert_same_mosaic(functools.partial(_compile, kernel))


def test_constant_view_index_inside_sync_copy():
    """JAX makes a view's constant index (``x.at[0]``) once, before the DMA's
    region (an operand of its run_scoped); ours' literal would be made inside it
    at each use unless sc_rebuild hoists it."""
    if not _jax_private.jax_has_shared_slice():
        pytest.skip(_jax_private.needs_newer_jax("plsc.slice_subcore_vmem_from_shared", "0.12"))
    kernel = functools.partial(shared_vmem_slice, index=0)
    assert _compile(kernel, OUR_API) == _compile(kernel, JAX_API)


def test_shared_slice_on_an_older_jax_fails_naming_the_release():
    if _jax_private.jax_has_shared_slice():
        pytest.skip("this JAX has plsc.slice_subcore_vmem_from_shared")
    with pytest.raises(NotImplementedError, match=r"needs JAX 0\.12 or newer; this is JAX"):
        _compile(shared_vmem_slice, OUR_API)


@pytest.mark.parametrize("kernel", [add_one_per_subcore, pipelined_scale,
                                    own_empty_ref_and_scope], ids=lambda k: k.__name__)
def test_sync_copy_scopes_under_jax_enable_checks(kernel):
    """Under jax_enable_checks (as JAX's tests run) too, a scope's end is marked
    (free_ref): a sync_copy's semaphore region closes after its DMAs, and a
    body's own jax.empty_ref is told from a scoped buffer, as in JAX's module."""
    with jax.enable_checks(True):
        assert_same_mosaic(functools.partial(_compile, kernel))
