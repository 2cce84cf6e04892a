"""``plgpu.async_copy_sparse_metadata_to_tmem`` (Blackwell sparse MMAs), in
JAX 0.12's own tests' kernels (tests/pallas/mosaic_gpu_test.py:
``test_simple_sparse_matmul`` and ``test_block_scaled_sparse_matmul`` through
its pallas_call harness, and ``test_sparse_matmul_collective``), lowered for an
abstract B200 under JAX and under ours: the same Mosaic GPU module. Under Warpgroup semantics it is
identical; under Lane semantics ours' ``out_ref[...] = ...`` adds one identity
``memref.subview`` (offsets 0, the whole buffer), which the comparison drops.
JAX's GPU interpreter cannot run the copy (its check that the source is in
SMEM refuses the interpreter's buffers): ours fails there as JAX's does."""

import functools
import re

import jax
import jax.numpy as jnp
import pytest
from jax_window import jplgpu  # JAX's plgpu (with 0.10's GPU interpret API)

import pallas_mgpu
from pallas_mgpu import _jax_private

SIDES = {"jax": jplgpu, "ours": pallas_mgpu}


class _B200(jax.sharding.AbstractDevice):
    # Mosaic GPU reads the target architecture from the abstract device
    compute_capability = "10.0"


B200 = _B200(device_kind="NVIDIA B200", platform="gpu", num_cores=148)


def _transforms(plgpu, swizzle, dtype):
    elems = 8 * swizzle // (jnp.dtype(dtype).itemsize * 8)
    return plgpu.TilingTransform((8, elems)), plgpu.SwizzleTransform(swizzle)


def _simple_sparse_matmul(plgpu, n, semantics, interpret=None):
    """JAX's test_simple_sparse_matmul (m=128, k=128, float16) as its
    ``pallas_call`` harness builds it: plgpu.kernel + emit_pipeline."""
    m, k, dtype = 128, 128, jnp.float16
    transforms = _transforms(plgpu, 128, dtype)

    def kernel(a_smem, b_smem, a_sparse_smem, out_ref, barrier_ref, acc_tmem, a_sparse_tmem):
        plgpu.async_copy_sparse_metadata_to_tmem(a_sparse_smem, a_sparse_tmem)
        plgpu.tcgen05_mma(acc_tmem, a_smem, b_smem.T, a_sparse_metadata=a_sparse_tmem,
                          accumulate=False)
        plgpu.tcgen05_commit_arrive(barrier_ref)
        plgpu.barrier_wait(barrier_ref)
        out_ref[...] = plgpu.async_load_tmem(acc_tmem)

    scratch = [plgpu.Barrier(orders_tensor_core=True), plgpu.TMEM((m, n), jnp.float32),
               plgpu.TMEM((m, k // 2), jnp.uint2, layout=plgpu.TMEMLayout.SPARSE_METADATA_LAYOUT)]
    in_specs = [plgpu.BlockSpec(memory_space=plgpu.SMEM, transforms=transforms)] * 2 + [
        plgpu.BlockSpec(memory_space=plgpu.SMEM)]
    out_spec = plgpu.BlockSpec(transforms=_transforms(plgpu, 128, jnp.float32))

    @functools.partial(
        plgpu.kernel, out_type=jax.ShapeDtypeStruct((m, n), jnp.float32), scratch_types=scratch,
        compiler_params=plgpu.CompilerParams(
            lowering_semantics=getattr(plgpu.LoweringSemantics, semantics)),
        interpret=interpret)
    def wrapper(*refs):
        gmem, scr = refs[:4], refs[4:]

        @functools.partial(plgpu.emit_pipeline, grid=(), in_specs=in_specs, out_specs=[out_spec])
        def pipeline(indices, *blocks):
            kernel(*blocks, *scr)
        pipeline(*gmem)
    args = (jax.ShapeDtypeStruct((m, k // 2), dtype), jax.ShapeDtypeStruct((n, k), dtype),
            jax.ShapeDtypeStruct((1, 1, 128, 64), jnp.uint2))
    return wrapper, args


def _block_scaled_sparse_matmul(plgpu, n, semantics):
    """JAX's test_block_scaled_sparse_matmul (m=128, k=256, float8_e5m2 operands,
    float8_e8m0fnu scales per 64 columns): the metadata and both scales copied to TMEM."""
    m, k, block_size = 128, 256, 64
    in_dtype, scale_dtype = jnp.float8_e5m2, jnp.float8_e8m0fnu
    transforms = _transforms(plgpu, 128, in_dtype)

    def kernel(a_smem, b_smem, a_sparse_smem, a_scale_smem, b_scale_smem, out_ref, barrier_ref,
               acc_tmem, a_sparse_tmem, a_scale_tmem, b_scale_tmem):
        plgpu.async_copy_sparse_metadata_to_tmem(a_sparse_smem, a_sparse_tmem)
        plgpu.async_copy_scales_to_tmem(a_scale_smem, a_scale_tmem)
        plgpu.async_copy_scales_to_tmem(b_scale_smem, b_scale_tmem)
        plgpu.tcgen05_mma(acc_tmem, a_smem, b_smem.T, a_scale=a_scale_tmem, b_scale=b_scale_tmem,
                          a_sparse_metadata=a_sparse_tmem, accumulate=False)
        plgpu.tcgen05_commit_arrive(barrier_ref)
        plgpu.barrier_wait(barrier_ref)
        out_ref[...] = plgpu.async_load_tmem(acc_tmem)

    scales = plgpu.TMEMLayout.SCALES_LAYOUT
    scratch = [plgpu.Barrier(orders_tensor_core=True), plgpu.TMEM((m, n), jnp.float32),
               plgpu.TMEM((m, k // 2), jnp.uint2, layout=plgpu.TMEMLayout.SPARSE_METADATA_LAYOUT),
               plgpu.TMEM((m, k // block_size), scale_dtype, layout=scales),
               plgpu.TMEM((n, k // block_size), scale_dtype, layout=scales)]
    in_specs = [plgpu.BlockSpec(memory_space=plgpu.SMEM, transforms=transforms)] * 2 + [
        plgpu.BlockSpec(memory_space=plgpu.SMEM)] * 3
    out_spec = plgpu.BlockSpec(transforms=_transforms(plgpu, 128, jnp.float32))

    @functools.partial(
        plgpu.kernel, out_type=jax.ShapeDtypeStruct((m, n), jnp.float32), scratch_types=scratch,
        compiler_params=plgpu.CompilerParams(
            lowering_semantics=getattr(plgpu.LoweringSemantics, semantics)))
    def wrapper(*refs):
        gmem, scr = refs[:6], refs[6:]

        @functools.partial(plgpu.emit_pipeline, grid=(), in_specs=in_specs, out_specs=[out_spec])
        def pipeline(indices, *blocks):
            kernel(*blocks, *scr)
        pipeline(*gmem)
    kk = k // block_size
    args = (jax.ShapeDtypeStruct((m, k // 2), in_dtype), jax.ShapeDtypeStruct((n, k), in_dtype),
            jax.ShapeDtypeStruct((m // 128, k // 128, 128, 64), jnp.uint2),
            jax.ShapeDtypeStruct((m // 128, kk // 4, 32, 16), scale_dtype),
            jax.ShapeDtypeStruct((n // 128, kk // 4, 32, 16), scale_dtype))
    return wrapper, args


def _collective_sparse_matmul(plgpu, semantics):
    """JAX's test_sparse_matmul_collective (m=256, n=128, float16): a cluster of
    two CTAs, the copy and the MMA issued with collective_axis="x"."""
    m, n, k, ab_type = 256, 128, 128, jnp.float16
    m_block, n_block = m // 2, n // 2
    transforms = _transforms(plgpu, 64, ab_type)
    from jax.experimental import pallas as pl_jax
    import pallas_frontend as pl_ours
    pl = pl_jax if plgpu is jplgpu else pl_ours

    def kernel(a_gmem, b_gmem, a_sparse_gmem, out_gmem, a_smem, b_smem, a_sparse_smem,
               tma_barrier, mma_barrier, cluster_barrier, acc_tmem, a_sparse_tmem):
        cluster_idx = jax.lax.axis_index("x")
        plgpu.copy_gmem_to_smem(a_gmem.at[pl.ds(cluster_idx * m_block, m_block), :], a_smem,
                                tma_barrier)
        plgpu.copy_gmem_to_smem(b_gmem.at[pl.ds(cluster_idx * n_block, n_block), :], b_smem,
                                tma_barrier)
        plgpu.copy_gmem_to_smem(a_sparse_gmem.at[pl.ds(cluster_idx, m_block // 128), :],
                                a_sparse_smem, tma_barrier)
        plgpu.barrier_wait(tma_barrier)
        plgpu.barrier_arrive(cluster_barrier)
        plgpu.barrier_wait(cluster_barrier)
        plgpu.async_copy_sparse_metadata_to_tmem(a_sparse_smem, a_sparse_tmem, collective_axis="x")
        plgpu.tcgen05_mma(acc_tmem, a_smem, b_smem.T, mma_barrier,
                          a_sparse_metadata=a_sparse_tmem, accumulate=False, collective_axis="x")
        plgpu.barrier_wait(mma_barrier)
        out_gmem[pl.ds(cluster_idx * m_block, m_block), :] = plgpu.async_load_tmem(acc_tmem)

    scratch = [
        plgpu.SMEM((m_block, k // 2), ab_type, transforms=transforms),
        plgpu.SMEM((n_block, k), ab_type, transforms=transforms),
        plgpu.SMEM((m_block // 128, k // 128, 128, 64), jnp.uint2),
        plgpu.Barrier(num_arrivals=3), plgpu.Barrier(orders_tensor_core=True),
        plgpu.ClusterBarrier(collective_axes=("x",)),
        plgpu.TMEM((m_block, n), jnp.float32, collective=True),
        plgpu.TMEM((m_block, k // 2), jnp.uint2, layout=plgpu.TMEMLayout.SPARSE_METADATA_LAYOUT,
                   collective=True),
    ]
    f = plgpu.kernel(kernel, out_type=jax.ShapeDtypeStruct((m, n), jnp.float32),
                     cluster=(2,), cluster_names=("x",), scratch_types=scratch,
                     compiler_params=plgpu.CompilerParams(
                         lowering_semantics=getattr(plgpu.LoweringSemantics, semantics)))
    args = (jax.ShapeDtypeStruct((m, k // 2), ab_type), jax.ShapeDtypeStruct((n, k), ab_type),
            jax.ShapeDtypeStruct((m // 128, 1, 128, 64), jnp.uint2))
    return f, args


_IDENTITY_SUBVIEW = re.compile(
    r'"stable_mosaic_gpu\.memref\.subview"\(%\d+\) \{operandSegmentSizes = array<i32: 1, 0, 0, 0>, '
    r'static_offsets = array<i64: (?P<offsets>[0-9, ]+)>, '
    r'static_sizes = array<i64: (?P<sizes>[0-9, ]+)>, '
    r'static_strides = array<i64: (?P<strides>[0-9, ]+)>\} : \(memref<(?P<src>[0-9x]+)x')


def _normalized(module: str) -> list[str]:
    """The module's lines with SSA names erased and identity subviews dropped."""
    lines = []
    for line in module.splitlines():
        view = _IDENTITY_SUBVIEW.search(line)
        if view and set(view["offsets"].split(", ")) == {"0"} \
                and set(view["strides"].split(", ")) == {"1"} \
                and view["sizes"].split(", ") == view["src"].split("x"):
            continue
        lines.append(re.sub(r"%[0-9]+", "%_", line).replace("%arg", "%_arg"))
    return lines


def _b200_modules(fn, args):
    mesh = jax.sharding.AbstractMesh((1,), ("x",), abstract_device=B200)
    with jax.sharding.use_abstract_mesh(mesh):
        lowered = jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",))
    return _jax_private.mosaic_gpu_modules(lowered)


def _assert_same_module(build):
    theirs = _b200_modules(*build(jplgpu))
    ours = _b200_modules(*build(pallas_mgpu))
    assert len(ours) == len(theirs) == 1
    assert _normalized(ours[0]) == _normalized(theirs[0])
    # the copy really is there: tcgen05.cp of the metadata, then a sparse MMA
    assert "tcgen05.cp" in ours[0] and "tcgen05.mma.sp" in ours[0]
    return ours[0], theirs[0]


@pytest.mark.parametrize("n", [128, 256])
@pytest.mark.parametrize("semantics", ["Lane", "Warpgroup"])
def test_simple_sparse_matmul_lowers_for_b200_as_jax(semantics, n):
    ours, theirs = _assert_same_module(lambda plgpu: _simple_sparse_matmul(plgpu, n, semantics))
    if semantics == "Warpgroup":
        assert ours == theirs


@pytest.mark.parametrize("semantics", ["Lane", "Warpgroup"])
def test_collective_sparse_matmul_lowers_for_b200_as_jax(semantics):
    _assert_same_module(lambda plgpu: _collective_sparse_matmul(plgpu, semantics))


@pytest.mark.parametrize("n", [128, 256])
@pytest.mark.parametrize("semantics", ["Lane", "Warpgroup"])
def test_block_scaled_sparse_matmul_lowers_for_b200_as_jax(semantics, n):
    _assert_same_module(lambda plgpu: _block_scaled_sparse_matmul(plgpu, n, semantics))


def test_normalization_drops_only_identity_subviews():
    kept = ('%5 = "stable_mosaic_gpu.memref.subview"(%4) {operandSegmentSizes = array<i32: 1, 0, '
            '0, 0>, static_offsets = array<i64: 0, 8>, static_sizes = array<i64: 16, 4>, '
            'static_strides = array<i64: 1, 1>} : (memref<16x12xf32')
    dropped = kept.replace("0, 8>", "0, 0>").replace("16x12", "16x4")
    assert _normalized(kept) != [] and _normalized(dropped) == []


def test_gpu_interpret_mode_fails_as_jaxs(rng):
    a = jnp.asarray(rng.standard_normal((128, 64)), jnp.float16)
    b = jnp.asarray(rng.standard_normal((128, 128)), jnp.float16)
    meta = jnp.zeros((1, 1, 128, 64), jnp.uint2)
    errors = {}
    for side, plgpu in SIDES.items():
        params = jplgpu.InterpretGPUParams() if side == "jax" else pallas_mgpu.InterpretParams()
        fn, _ = _simple_sparse_matmul(plgpu, 128, "Lane", interpret=params)
        with pytest.raises(Exception) as err:
            jax.jit(fn)(a, b, meta)
        errors[side] = err.value
    assert type(errors["ours"]) is type(errors["jax"])
    first_line = str(errors["jax"]).splitlines()[0]
    # JAX 0.12: the copy's abstract evaluation refuses the interpreter's buffers
    assert "to_tmem" in first_line, first_line
    assert first_line in str(errors["ours"])
