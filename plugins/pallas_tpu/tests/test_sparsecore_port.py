"""SparseCore kernel forms JAX's tpu_sparsecore_pallas_test.py uses that
ours had refused: a view of an index Ref as the index of an indirect DMA
(``x.at[idx.at[pl.ds(k, n)]]``), an emit_pipeline split over the subcores
(``core_axis_name``), scratch in a mesh's memory (``pltpu.VMEM(...) @ mesh``), a pipelined gather
through ``pl.Indirect`` block dims, DMAs to and from pinned-host memory. Each kernel is written once against an API triple
(pl, pltpu, plsc); ours runs it in the SparseCore CPU model against NumPy on
fresh random data, and compiles it device-less for a SparseCore topology to
JAX's Mosaic module.
"""

import functools
import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import pallas_frontend as pl
import pallas_tpu as pltpu
from pallas_tpu import tpu_sc as plsc

from sc_compare import OUR_API, assert_same_mosaic, mosaic_modules

L = plsc.get_sparse_core_info().num_lanes
RNG = np.random.default_rng()
i32, f32 = jnp.int32, jnp.float32
needs_libtpu = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                  reason="compiling for a TPU topology needs libtpu")


def _mesh(plsc_, num_cores=1, num_subcores=4):
    return plsc_.VectorSubcoreMesh(core_axis_name="core", subcore_axis_name="subcore",
                                   num_cores=num_cores, num_subcores=num_subcores)


def _kernel(api, extra, **kw):
    pl_, pltpu_, _ = api
    return functools.partial(pl_.kernel, compiler_params=pltpu_.CompilerParams(
        use_tc_tiling_on_sc=False), **kw, **extra)


# --- kernels: (fn(api, **kernel kwargs) -> (callable, operand shapes, NumPy reference)) ----

def gather_through_index_view(api, **extra):
    """Subcore s gathers rows of x through L entries of its index row starting
    at a traced offset, (idx.at[s, pl.ds(off, L)]), and scatters them into its
    output block through a 1-D view of a second index Ref (idx2.at[pl.ds(0, L)])."""
    pl_, pltpu_, plsc_ = api
    rows, width, ns = 32, 16, 4

    def f(x, idx, perm):
        @_kernel(api, extra, out_type=jax.ShapeDtypeStruct((ns, L, width), x.dtype),
                 mesh=_mesh(plsc_, num_subcores=ns),
                 scratch_types=[pltpu_.VMEM(idx.shape, i32), pltpu_.VMEM(perm.shape, i32),
                                pltpu_.VMEM((L, width), x.dtype)])
        def k(x_hbm, i_hbm, p_hbm, o_hbm, iv, pv, rows_v):
            s = lax.axis_index("subcore")
            pltpu_.sync_copy(i_hbm, iv)
            pltpu_.sync_copy(p_hbm, pv)
            off = s % 2 * L
            pltpu_.sync_copy(x_hbm.at[iv.at[s, pl_.ds(off, L)]], rows_v)
            pltpu_.sync_copy(rows_v, o_hbm.at[s].at[pv.at[pl_.ds(0, L)]])
        return k(x, idx, perm)

    def operands():
        x = RNG.standard_normal((rows, width)).astype(np.float32)
        idx = RNG.integers(0, rows, (ns, 2 * L)).astype(np.int32)
        perm = np.concatenate([RNG.permutation(L), RNG.integers(0, L, L)]).astype(np.int32)
        return x, idx, perm

    def reference(x, idx, perm):
        out = np.full((ns, L, width), np.nan, np.float64)
        for s in range(ns):
            off = s % 2 * L
            out[s, perm[:L]] = x.astype(np.float64)[idx[s, off:off + L]]
        return out
    return f, operands, reference


def gather_pipelined_over_subcores(api, **extra):
    """An emit_pipeline split over the subcores (core_axis_name): each step
    gathers 8 rows of x through a (1, 8) block of the index row, indexed as
    i_vmem.at[0] (JAX's test_gather_with_emit, random data)."""
    pl_, pltpu_, plsc_ = api
    rows, width, ns, steps = 32, 128, 2, 4
    n = 8 * ns * steps

    def f(x, idx):
        @_kernel(api, extra, out_type=jax.ShapeDtypeStruct((n, width), x.dtype),
                 mesh=_mesh(plsc_, num_subcores=ns))
        def k(x_hbm, i_hbm, o_hbm):
            def body(i_vmem, o_vmem):
                pltpu_.sync_copy(x_hbm.at[i_vmem.at[0]], o_vmem)
            pltpu_.emit_pipeline(body, grid=(n // 8,),
                                 in_specs=[pl_.BlockSpec((1, 8), lambda i: (0, i))],
                                 out_specs=[pl_.BlockSpec((8, width), lambda i: (i, 0))],
                                 core_axis_name="subcore",
                                 dimension_semantics=(pltpu_.PARALLEL,))(i_hbm, o_hbm)
        return k(x, idx)

    def operands():
        return (RNG.integers(-2**20, 2**20, (rows, width)).astype(np.int32),
                RNG.integers(0, rows, (1, n)).astype(np.int32))
    return f, operands, lambda x, idx: x[idx[0]]


def scatter_add_into_mesh_vmem(api, **extra):
    """Scratch typed ``pltpu.VMEM(shape, dtype) @ mesh`` (and ``(VMEM @ mesh)(...)``):
    subcore s zeroes it, scatter-adds its values at random (repeated) indices,
    and copies the sums out (JAX's test_addupdate_scatter_core_memory_space)."""
    pl_, pltpu_, plsc_ = api
    ns = 4

    def f(x, idx):
        mesh = _mesh(plsc_, num_subcores=ns)   # (JAX's reads the chip: made under the trace)

        @_kernel(api, extra, out_type=jax.ShapeDtypeStruct((ns, 2 * L), x.dtype), mesh=mesh,
                 scratch_types=[pltpu_.VMEM((2 * L,), x.dtype) @ mesh,
                                (pltpu_.VMEM @ mesh)((L,), x.dtype),
                                pltpu_.VMEM((L,), i32) @ mesh])
        def k(x_hbm, i_hbm, o_hbm, acc, xv, iv):
            s = lax.axis_index("subcore")
            pltpu_.sync_copy(x_hbm.at[s], xv)
            pltpu_.sync_copy(i_hbm.at[s], iv)
            acc[...] = jnp.zeros_like(acc)
            plsc_.addupdate_scatter(acc, [iv[...]], xv[...])
            pltpu_.sync_copy(acc, o_hbm.at[s])
        return k(x, idx)

    def operands():
        return (RNG.integers(-1000, 1000, (ns, L)).astype(np.int32),
                RNG.integers(0, 2 * L, (ns, L)).astype(np.int32))

    def reference(x, idx):
        out = np.zeros((ns, 2 * L), np.int64)
        for s in range(ns):
            np.add.at(out[s], idx[s], x[s])
        return out
    return f, operands, reference


def pipelined_indirect_gather(api, kind="ref", **extra):
    """An emit_pipeline whose input block's first dim is ``pl.Indirect(L)``:
    step i gathers the L rows of x that row i of the index scratch names, its
    index map giving ``idx.at[i]`` (kind "ref") or ``idx[i]`` ("array"); the
    body scales them (JAX's test_gather_via_indirect, random data)."""
    pl_, pltpu_, plsc_ = api
    rows, steps = 32, 4

    def f(x, idx):
        @_kernel(api, extra, out_type=jax.ShapeDtypeStruct((steps, L, L), x.dtype),
                 mesh=_mesh(plsc_, num_subcores=2),
                 scratch_types=dict(idx_v=pltpu_.VMEM(idx.shape, i32)))
        def k(x_hbm, i_hbm, o_hbm, *, idx_v):
            pltpu_.sync_copy(i_hbm, idx_v)

            def body(x_v, o_v):
                @pl_.loop(0, L)
                def _(j):
                    o_v[j] = x_v[j] * 3 - 1
            pltpu_.emit_pipeline(
                body, grid=(steps,),
                in_specs=[pl_.BlockSpec((pl_.Indirect(L), L), lambda i: (
                    idx_v.at[i] if kind == "ref" else idx_v[i], 0))],
                out_specs=[pl_.BlockSpec((pl_.Squeezed(), L, L), lambda i: (i, 0, 0))],
                tiling=pltpu_.Tiling.SPARSE_CORE)(x_hbm, o_hbm)
        return k(x, idx)

    def operands():
        return (RNG.integers(-2**20, 2**20, (rows, L)).astype(np.int32),
                np.stack([RNG.permutation(rows)[:L] for _ in range(steps)]).astype(np.int32))
    return f, operands, lambda x, idx: x.astype(np.int64)[idx] * 3 - 1


def pipelined_indirect_gather_of_array(api, **extra):
    return pipelined_indirect_gather(api, kind="array", **extra)


KERNELS = [gather_through_index_view, gather_pipelined_over_subcores, scatter_add_into_mesh_vmem,
           pipelined_indirect_gather, pipelined_indirect_gather_of_array]


def test_mesh_memory_space_is_checked_as_in_jax():
    """A space the mesh's cores lack is refused when tied, naming the mesh."""
    scalar = plsc.ScalarSubcoreMesh(axis_name="core", num_cores=1)
    with pytest.raises(ValueError, match="not supported by mesh"):
        pltpu.VMEM((L,), i32) @ scalar
    with pytest.raises(TypeError):
        pltpu.VMEM((L,), i32) @ "not a mesh"
    assert pltpu.SMEM((4,), i32) @ scalar == pltpu.SMEM((4,), i32)
    assert str(pltpu.VMEM @ _mesh(plsc)) == "VMEM@SC_VECTOR_SUBCORE"


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.__name__)
def test_runs_in_the_cpu_model_as_numpy(kernel):
    f, operands, reference = kernel(OUR_API, interpret=pltpu.InterpretParams())
    args = operands()
    got = np.asarray(f(*args))
    want = reference(*args)
    written = ~np.isnan(want) if want.dtype.kind == "f" else np.ones(want.shape, bool)
    np.testing.assert_array_equal(got[written], want[written])


def _compile(kernel, api):
    f, operands, _ = kernel(api)
    return mosaic_modules(f, [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in operands()])


@needs_libtpu
@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.__name__)
def test_compiles_to_jax_mosaic_module(kernel):
    assert_same_mosaic(functools.partial(_compile, kernel))


def _host_sharding():
    mesh = jax.sharding.Mesh(jax.devices()[:1], "x")
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(), memory_kind="pinned_host")


@pytest.mark.parametrize("direction", ["host_to_hbm", "hbm_to_host"])
def test_host_memory_dma_in_the_cpu_model(direction):
    """A scalar subcore DMAs between pinned-host memory and HBM (JAX's
    test_host_to_hbm_dma / test_hbm_to_host_dma, random data): the host Ref
    made by jax.new_ref(..., memory_space=pl.HOST) or typed
    pl.MemoryRef(aval, pl.HOST), as JAX writes it."""
    x = RNG.integers(-2**31, 2**31 - 1, (8, 128), dtype=np.int64).astype(np.int32)
    mesh = plsc.ScalarSubcoreMesh(axis_name="core", num_cores=1)

    def copy(src, dst):
        @pl.core_map(mesh=mesh, compiler_params=pltpu.CompilerParams(),
                     interpret=pltpu.InterpretParams())
        def _():
            pltpu.sync_copy(src, dst)

    try:
        got = _host_copy(direction, copy, x)
    except NotImplementedError as e:   # JAX 0.10 places nothing on the host
        if "needs JAX 0.11 or newer" not in str(e):
            raise
        pytest.skip(str(e).splitlines()[0])
    np.testing.assert_array_equal(np.asarray(got), x)


def _host_copy(direction, copy, x):
    if direction == "host_to_hbm":
        @jax.jit
        def f(x):
            y = pl.empty_ref_like(pltpu.HBM(x.shape, x.dtype))
            copy(jax.new_ref(pltpu.with_memory_space_constraint(x, pl.HOST),
                             memory_space=pl.HOST), y)
            return y[...]
        got = f(jax.device_put(x, _host_sharding()))
    else:
        @functools.partial(jax.jit, out_shardings=_host_sharding())
        def f(x):
            y = pl.empty_ref_like(pl.MemoryRef(jax.core.ShapedArray(x.shape, x.dtype), pl.HOST))
            copy(jax.new_ref(x, memory_space=pltpu.HBM), y)
            return pltpu.with_memory_space_constraint(y[...], pl.HOST)
        got = f(x)
        assert got.sharding.memory_kind == "pinned_host"
    return got


def test_memory_ref_takes_jax_signature():
    """pl.MemoryRef(inner_aval, memory_space) as in JAX, beside ours' (shape, dtype, space)."""
    aval = jax.core.ShapedArray((4, 8), jnp.bfloat16)
    assert pl.MemoryRef(aval, pl.HOST) == pl.MemoryRef((4, 8), jnp.bfloat16, pl.HOST)
    assert pl.MemoryRef(inner_aval=aval, memory_space=pltpu.VMEM).memory_space is pltpu.VMEM
    assert pl.MemoryRef(jax.ShapeDtypeStruct((2,), jnp.int32), pltpu.SMEM).shape == (2,)
    with pytest.raises(TypeError, match="two arguments"):
        pl.MemoryRef(aval, pl.HOST, pltpu.VMEM)

