"""The Mosaic GPU names openxla/tokamax's kernels use besides the core API:
``warp_map``, ``RefUnion``, ``inline_mgpu`` (+ ``RefType``,
``ShapeDtypeStruct``), ``kernel(kernel_name=)``, ``wgmma_accumulator_load``,
``mma``, ``transpose_ref``, ``CopyPartition``, and ``emit_pipeline`` over
``pl.Element`` rows.
Each runs in JAX's GPU interpret mode against NumPy where JAX's does, and
lowers for cuda as JAX's does (same kernel written with JAX's API)."""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as jax_pl
from jax.experimental.mosaic import gpu as mgpu
from jax_window import jplgpu as jax_plgpu  # JAX's plgpu (with 0.10's GPU interpret API)

import pallas_frontend as pl
import pallas_mgpu as plgpu
from pallas_mgpu import _jax_private, aot

APIS = {"jax": jax_plgpu, "ours": plgpu}
F32 = jnp.float32


def _modules(kernel, *args):
    return _jax_private.mosaic_gpu_modules(aot.lower_for_cuda(kernel, *args))


# --- warp_map ----------------------------------------------------------------------------

def _warp_scaled(gpu, n, interpret=None):
    """Warp w writes o[w-th quarter] = x[w-th quarter] * (w + 1)."""
    q = n // 4

    @functools.partial(gpu.kernel, out_type=jax.ShapeDtypeStruct((n,), F32), interpret=interpret)
    def k(x_ref, o_ref):
        @gpu.warp_map
        def _(w):
            for i in range(4):
                @pl.when(w == i)
                def _():
                    o_ref[pl.ds(q * i, q)] = x_ref[pl.ds(q * i, q)] * (w + 1).astype(F32)
    return k


@pytest.mark.parametrize("api", APIS)
def test_warp_map_runs_once_per_warp(api, rng):
    gpu = APIS[api]
    x = rng.standard_normal(64).astype(np.float32)
    got = _warp_scaled(gpu, 64, gpu.InterpretGPUParams(detect_races=True))(x)
    want = x.astype(np.float64) * np.repeat(np.arange(1, 5), 16)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def _warp_copy(gpu):
    """As tokamax does: one warp issues the TMA copy, the warpgroup waits for it."""
    @functools.partial(gpu.kernel, out_type=jax.ShapeDtypeStruct((128,), F32),
                       scratch_types=[gpu.SMEM((128,), F32), gpu.Barrier()])
    def k(x_ref, o_ref, smem, bar):
        @gpu.warp_map
        def _(w):
            @pl.when(w == 0)
            def _():
                gpu.copy_gmem_to_smem(x_ref, smem, bar)
        gpu.barrier_wait(bar)
        o_ref[...] = smem[...] + 1
    return k


def _warp_loop_copy(P, gpu):
    """tokamax's attention producer warp: a loop with bounds read from GMEM,
    one TMA copy per step, all in warp 0."""
    @functools.partial(gpu.kernel, out_type=jax.ShapeDtypeStruct((4, 128), F32),
                       scratch_types=[gpu.SMEM((4, 128), F32), gpu.Barrier(num_barriers=4)])
    def k(x_ref, lo_ref, o_ref, smem, bars):
        lo = lo_ref[0]

        @gpu.warp_map
        def _(w):
            @pl.when(w == 0)
            def _():
                @P.loop(lo, 4)
                def _(i):
                    gpu.copy_gmem_to_smem(x_ref.at[i], smem.at[i], bars.at[i])
        for i in range(4):
            gpu.barrier_wait(bars.at[i])
        o_ref[...] = smem[...]
    return k


def test_warp_map_with_a_traced_loop_lowers_for_cuda_as_jax():
    args = jax.ShapeDtypeStruct((4, 128), F32), jax.ShapeDtypeStruct((1,), jnp.int32)
    (ours,), (theirs,) = (_modules(_warp_loop_copy(P, gpu), *args)
                          for P, gpu in ((pl, plgpu), (jax_pl, jax_plgpu)))
    assert ours.count("cp.async.bulk") == theirs.count("cp.async.bulk") > 0


def test_warp_map_lowers_for_cuda_as_jax():
    x = jax.ShapeDtypeStruct((128,), F32)
    (ours,), (theirs,) = (_modules(_warp_copy(gpu), x) for gpu in (plgpu, jax_plgpu))
    assert ours.count("cp.async.bulk") == theirs.count("cp.async.bulk") > 0


# --- RefUnion --------------------------------------------------------------------------------

def _union_kernel(gpu, n, interpret=None):
    """Group 0 (a, b) holds 2x and x + 1, then group 1 (c) reuses the memory for x * x."""
    union = gpu.RefUnion((gpu.SMEM((n,), F32), gpu.SMEM((n,), F32)), (gpu.SMEM((2 * n,), F32),))

    @functools.partial(gpu.kernel, out_type=jax.ShapeDtypeStruct((3, n), F32),
                       scratch_types=dict(u=union), interpret=interpret)
    def k(x_ref, o_ref, *, u):
        (a, b), (c,) = u
        a[...] = x_ref[...] * 2
        b[...] = x_ref[...] + 1
        o_ref[0] = a[...]
        o_ref[1] = b[...]
        c[pl.ds(n, n)] = x_ref[...] * x_ref[...]
        o_ref[2] = c[pl.ds(n, n)]
    return k


@pytest.mark.parametrize("api", APIS)
def test_ref_union_groups_run_as_numpy(api, rng):
    gpu = APIS[api]
    x = rng.standard_normal(128).astype(np.float32)
    got = _union_kernel(gpu, 128, gpu.InterpretGPUParams(detect_races=True))(x)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(got, np.stack([2 * x64, x64 + 1, x64 * x64]), rtol=1e-6)


def _smem_view_offsets(module: str) -> list[int]:
    """The byte offsets at which the kernel views its dynamic SMEM, in order."""
    consts = dict(re.findall(r"(%\w+) = .*?value = (\d+) : index", module))
    views = re.findall(r'memref\.view"\(%\w+, (%\w+)\)', module)
    return [int(consts[v]) for v in views]


def test_ref_union_shares_smem_when_lowered_as_jax():
    x = jax.ShapeDtypeStruct((128,), F32)
    (ours,), (theirs,) = (_modules(_union_kernel(gpu, 128), x) for gpu in (plgpu, jax_plgpu))
    offsets = _smem_view_offsets(ours)
    assert offsets == _smem_view_offsets(theirs)
    # a and c (first members of groups 0 and 1) start at the same byte: shared memory
    assert len(offsets) == 3 and offsets[0] == offsets[2] != offsets[1]


def test_ref_union_size_and_refusals():
    u = plgpu.RefUnion((plgpu.SMEM((10,), F32), plgpu.SMEM((300,), jnp.float16)),
                       (plgpu.SMEM((64, 64), jnp.float16),))
    j = jax_plgpu.RefUnion((jax_plgpu.SMEM((10,), F32), jax_plgpu.SMEM((300,), jnp.float16)),
                           (jax_plgpu.SMEM((64, 64), jnp.float16),))
    assert (u.shape, u.dtype, u.memory_space) == (j.shape, np.dtype(j.dtype), plgpu.SMEM)
    with pytest.raises(NotImplementedError, match="same memory space"):
        plgpu.RefUnion((plgpu.SMEM((8,), F32),), (plgpu.GMEM((8,), F32),))


# --- inline_mgpu, kernel_name --------------------------------------------------------------------

def _inline_kernel(gpu, interpret=None):
    layout = gpu.Layout.WG_STRIDED((128,), vec_size=1)

    @gpu.inline_mgpu(arg_types=(layout,),
                     return_type=gpu.ShapeDtypeStruct((128,), F32, layout))
    def add_one(ctx, fa):
        one = mgpu.FragmentedArray.splat(mgpu.c(1.0, fa.mlir_dtype), fa.shape, fa.layout)
        return fa + one

    @functools.partial(gpu.kernel, out_type=jax.ShapeDtypeStruct((128,), F32),
                       interpret=interpret, kernel_name="tokamax_style_name")
    def k(x_ref, o_ref):
        o_ref[...] = add_one(x_ref[...])
    return k


def test_inline_mgpu_and_kernel_name_lower_as_jax():
    x = jax.ShapeDtypeStruct((128,), F32)
    (ours,), (theirs,) = (_modules(_inline_kernel(gpu), x) for gpu in (plgpu, jax_plgpu))
    for module in (ours, theirs):
        assert "tokamax_style_name" in module
    # the inlined FragmentedArray addition is in the kernel
    assert ours.count("arith.addf") == theirs.count("arith.addf") > 0


@pytest.mark.parametrize("api", APIS)
def test_inline_mgpu_refused_by_the_interpreter_as_in_jax(api, rng):
    gpu = APIS[api]
    x = rng.standard_normal(128).astype(np.float32)
    with pytest.raises(Exception, match="does not support `inline_mgpu`"):
        _inline_kernel(gpu, gpu.InterpretGPUParams())(x)


@pytest.mark.parametrize("api", APIS)
def test_inline_mgpu_without_results_is_skipped_on_request(api, rng):
    gpu = APIS[api]

    @gpu.inline_mgpu(arg_types=(gpu.RefType(),))
    def fence(ctx, ref):
        del ctx, ref

    @functools.partial(gpu.kernel, out_type=jax.ShapeDtypeStruct((128,), F32),
                       interpret=gpu.InterpretGPUParams(inline_mgpu="ignore"))
    def k(x_ref, o_ref):
        # on the output: JAX 0.12.1 takes a Ref handed to inline_mgpu as written, and
        # refuses a write to an input passed as an array (as ours does, quoting it)
        fence(o_ref.at[pl.ds(0, 64)])
        o_ref[...] = x_ref[...] * 3
    x = rng.standard_normal(128).astype(np.float32)
    np.testing.assert_allclose(k(x), x.astype(np.float64) * 3, rtol=1e-6)


def test_inline_mgpu_bad_types_raise_before_tracing():
    with pytest.raises(ValueError, match="RefType"):
        plgpu.inline_mgpu(arg_types=(3,))
    with pytest.raises(ValueError, match="ShapeDtypeStruct"):
        plgpu.inline_mgpu(return_type=jax.ShapeDtypeStruct((2,), F32))


# --- WGMMA accumulator read, mma, transpose_ref --------------------------------------------------

def _transposed(gpu, ref):
    """plgpu.transpose_ref where the module has it (ours; JAX up to 0.12.0.1, deprecated),
    else the Ref's own .transpose (JAX 0.12.1 removed transpose_ref)."""
    if hasattr(gpu, "transpose_ref"):
        return gpu.transpose_ref(ref, (1, 0))
    return ref.transpose((1, 0))


def _acc_load_kernel(P, gpu, interpret=None):
    t = (gpu.TilingTransform((8, 64)), gpu.SwizzleTransform(128))

    @functools.partial(
        gpu.kernel, out_type=jax.ShapeDtypeStruct((64, 64), F32), interpret=interpret,
        scratch_types=[gpu.SMEM((64, 64), jnp.float16, transforms=t),
                       gpu.SMEM((64, 64), jnp.float16, transforms=t), gpu.Barrier(num_arrivals=2)])
    def k(a_ref, b_ref, o_ref, a_smem, b_smem, bar):
        gpu.copy_gmem_to_smem(a_ref, a_smem, bar)
        gpu.copy_gmem_to_smem(b_ref, b_smem, bar)
        gpu.barrier_wait(bar)

        def product(acc):    # JAX wants the accumulator in a run_scoped of its own
            gpu.wgmma(acc, a_smem, _transposed(gpu, b_smem))
            o_ref[...] = gpu.wgmma_accumulator_load(acc, wait_n=0)
        P.run_scoped(product, gpu.ACC((64, 64), F32))
    return k


@pytest.mark.parametrize("api", APIS)
def test_wgmma_accumulator_load_and_transpose_ref(api, rng):
    gpu = APIS[api]
    P = jax_pl if api == "jax" else pl
    a, b = (rng.standard_normal((64, 64)).astype(np.float16) for _ in range(2))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)   # JAX deprecates transpose_ref
        got = _acc_load_kernel(P, gpu, gpu.InterpretGPUParams())(a, b)
    want = a.astype(np.float64) @ b.astype(np.float64).T
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)


def test_wgmma_accumulator_load_lowers_for_cuda_as_jax():
    s = jax.ShapeDtypeStruct((64, 64), jnp.float16)
    (ours,), (theirs,) = (_modules(_acc_load_kernel(P, gpu), s, s)
                          for P, gpu in ((pl, plgpu), (jax_pl, jax_plgpu)))
    assert ours.count("wgmma") == theirs.count("wgmma") > 0


def test_wgmma_accumulator_load_refuses_a_plain_ref():
    @functools.partial(plgpu.kernel, out_type=jax.ShapeDtypeStruct((64, 64), F32),
                       interpret=plgpu.InterpretGPUParams())
    def k(x_ref, o_ref):
        o_ref[...] = plgpu.wgmma_accumulator_load(x_ref)
    with pytest.raises(TypeError, match="WGMMA accumulator"):
        k(np.ones((64, 64), np.float32))


def _mma_kernel(gpu):
    """tokamax's sm80 pattern: operands loaded in MMA layouts, Lane semantics."""
    t = (gpu.TilingTransform((8, 64)), gpu.SwizzleTransform(128))

    @functools.partial(
        gpu.kernel, out_type=jax.ShapeDtypeStruct((64, 64), F32),
        scratch_types=[gpu.SMEM((64, 64), jnp.float16, transforms=t),
                       gpu.SMEM((64, 64), jnp.float16, transforms=t), gpu.Barrier(num_arrivals=2)],
        compiler_params=gpu.CompilerParams(lowering_semantics=gpu.LoweringSemantics.Lane))
    def k(a_ref, b_ref, o_ref, a_smem, b_smem, bar):
        gpu.copy_gmem_to_smem(a_ref, a_smem, bar)
        gpu.copy_gmem_to_smem(b_ref, b_smem, bar)
        gpu.barrier_wait(bar)
        a = gpu.load(a_smem, layout=gpu.Layout.MMA_LHS(jnp.float16))
        b = gpu.load(b_smem, layout=gpu.Layout.MMA_RHS(jnp.float16))
        acc = gpu.layout_cast(jnp.zeros((64, 64), F32), gpu.Layout.MMA_ACC(jnp.float16))
        o_ref[...] = gpu.mma(acc, a, b)
    return k


def test_mma_lowers_for_cuda_as_jax():
    # (JAX's GPU interpreter has no rule for mma: compared lowered)
    s = jax.ShapeDtypeStruct((64, 64), jnp.float16)
    (ours,), (theirs,) = (_modules(_mma_kernel(gpu), s, s) for gpu in (plgpu, jax_plgpu))
    assert ours.count("mma") == theirs.count("mma") > 0


def test_mma_refuses_mismatched_shapes_before_binding():
    with pytest.raises(ValueError, match="do not form"):
        plgpu.mma(jnp.zeros((16, 8)), jnp.zeros((16, 16)), jnp.zeros((8, 8)))


# --- emit_pipeline over pl.Element rows (tokamax's sm90 ragged_dot) ------------------------------

def _element_rows_kernel(P, gpu, interpret=None):
    """o = 2 * x[start:start + 128], the rows fetched as two pl.Element(64) blocks
    at element offsets start and start + 64 (start read from GMEM)."""
    @functools.partial(gpu.kernel, out_type=jax.ShapeDtypeStruct((128, 128), F32),
                       interpret=interpret)
    def k(x_ref, start_ref, o_ref):
        start = P.multiple_of(start_ref[0], 8)

        def body(idx, x_smem):    # (JAX's interpreter has no pipelined output copies)
            o_ref[P.ds(idx[0] * 64, 64)] = x_smem[...] * 2
        gpu.emit_pipeline(
            body, grid=(2,),
            in_specs=[gpu.BlockSpec((P.Element(64), 128), lambda i: (start + 64 * i, 0))])(x_ref)
    return k


@pytest.mark.parametrize("api", APIS)
def test_emit_pipeline_element_rows(api, rng):
    gpu = APIS[api]
    P = jax_pl if api == "jax" else pl
    x = rng.standard_normal((256, 128)).astype(np.float32)
    start = int(rng.integers(0, 16)) * 8
    got = _element_rows_kernel(P, gpu, gpu.InterpretGPUParams())(x, np.array([start], np.int32))
    np.testing.assert_allclose(got, 2 * x[start:start + 128].astype(np.float64), rtol=1e-6)


def test_emit_pipeline_element_rows_lowers_for_cuda_as_jax():
    args = jax.ShapeDtypeStruct((256, 128), F32), jax.ShapeDtypeStruct((1,), jnp.int32)
    (ours,), (theirs,) = (_modules(_element_rows_kernel(P, gpu), *args)
                          for P, gpu in ((pl, plgpu), (jax_pl, jax_plgpu)))
    assert ours.count("cp.async.bulk") == theirs.count("cp.async.bulk") > 0


# --- CopyPartition -------------------------------------------------------------------------------

def test_copy_partition_is_jax_s():
    from jax.experimental.mosaic.gpu.launch_context import CopyPartition
    assert plgpu.CopyPartition.PARTITIONED(1).to_jax() == CopyPartition.PARTITIONED(1)
    assert plgpu.CopyPartition.REPLICATED.to_jax() == CopyPartition.REPLICATED

