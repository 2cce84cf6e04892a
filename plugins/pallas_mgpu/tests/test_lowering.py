"""Lowering for cuda on a CPU-only machine, no CUDA plugin needed: the
mosaic_gpu_v2 custom call, its decoded Mosaic GPU module, jax.export."""

import jax
import jax.numpy as jnp

import pytest
from jax import export

import pallas_frontend as pl
import pallas_mgpu as plgpu
from pallas_frontend.backend_api import BackendCapabilityError
from pallas_frontend.testing import kernels as K
from pallas_mgpu import _jax_private, aot

CP = {"compiler_params": plgpu.CompilerParams()}
S = jax.ShapeDtypeStruct


def _f16_matmul():
    return K.blocked_matmul(128, 256, 384, 128, 128, 128, **CP), \
        [S((128, 384), jnp.float16), S((384, 256), jnp.float16)]


def test_f16_matmul_lowers_to_mosaic_gpu_with_wgmma():
    fn, args = _f16_matmul()
    lowered = aot.lower_for_cuda(fn, *args)
    assert "stablehlo.custom_call @mosaic_gpu_v2" in lowered.as_text()
    (module,) = _jax_private.mosaic_gpu_modules(lowered)
    assert "gpu.launch" in module and "arch_major = 9" in module
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16" in module
    assert "cp.async.bulk" in module          # TMA


@pytest.mark.parametrize("case", ["add", "softmax64"])
def test_seed_kernels_lower_for_cuda(case):
    if case == "add":
        fn, args = K.vector_add(1024, 128, **CP), [S((1024,), jnp.float32)] * 2
    else:
        fn, args = K.softmax(256, 128, 64, **CP), [S((256, 128), jnp.float32)]
    assert aot.lower_for_cuda(fn, *args) is not None


def test_export_round_trip_for_cuda():
    fn, args = _f16_matmul()
    exp = export.export(jax.jit(fn), platforms=["cuda"])(*args)
    again = export.deserialize(exp.serialize())
    assert again.platforms == ("cuda",)
    assert "mosaic_gpu_v2" in again.mlir_module()
    assert [a.shape for a in again.out_avals] == [(128, 256)]


def test_check_refuses_what_tma_cannot_tile():
    def body(x, o):
        o[...] = x[...]
    spec = pl.BlockSpec((8, 2), lambda i: (i, 0))
    f = pl.pallas_call(body, S((64, 2), jnp.float32), grid=(8,), in_specs=[spec],
                       out_specs=spec, **CP)
    with pytest.raises(BackendCapabilityError, match=r"8 bytes \(at .*test_lowering.py:\d+\).*16 bytes"):
        aot.lower_for_cuda(f, S((64, 2), jnp.float32))


def test_compiled_refusals_name_the_line():
    f = K.transpose_2d(256, 384, 128, 128, **CP)
    with pytest.raises(BackendCapabilityError, match=r"transpose.*kernels.py:\d+"):
        aot.lower_for_cuda(f, S((256, 384), jnp.float32))
    g = K.softmax(32, 64, 4, **CP)      # 8-row blocks lower; 4 rows have no register layout
    with pytest.raises(BackendCapabilityError, match=r"reduction over a \(4, 64\) tile.*kernels.py"):
        aot.lower_for_cuda(g, S((32, 64), jnp.float32))


def test_foreign_primitive_names_its_owner():
    pltpu = pytest.importorskip("pallas_tpu")

    def body(x, o):
        o[...] = pltpu.reciprocal(x[...], approx=True)
    spec = pl.BlockSpec((128,), lambda i: (i,))
    f = pl.pallas_call(body, S((128,), jnp.float32), grid=(1,), in_specs=[spec], out_specs=spec,
                       **CP)
    with pytest.raises(BackendCapabilityError, match="backend 'tpu'"):
        aot.lower_for_cuda(f, S((128,), jnp.float32))
