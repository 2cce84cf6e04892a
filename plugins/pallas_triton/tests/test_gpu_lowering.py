"""Lowering for cuda without a GPU or the CUDA plugin: XLA's Triton custom call.

The plain ``triton`` env: each conformance kernel, written with the seed API
(``compiler_params=pallas_triton.CompilerParams(...)`` inside ``jax.jit``),
lowers to one ``__gpu$xla.gpu.triton`` custom call whose attributes are
checked against the TTIR and the kernel; ``jax.export`` round-trips it.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

import pallas_frontend as pl
import pallas_triton as pt
from pallas_frontend.testing import kernels as CK
from pallas_triton import gpu_launch

F32 = jnp.float32


def _s(*shape):
    return jax.ShapeDtypeStruct(shape, F32)


# name -> (builder, args, operand shapes, programs on the 1-D Triton grid, aliases)
CASES = {
    "vector_add": (CK.vector_add, (1024, 128), [(1024,), (1024,)], 8, {}),
    "ragged_add": (CK.vector_add, (1000, 128), [(1000,), (1000,)], 8, {}),
    "blocked_matmul": (CK.blocked_matmul, (128, 256, 384, 128, 128, 128),
                       [(128, 384), (384, 256)], 2, {}),
    "scratch_matmul": (CK.scratch_matmul, (128, 256, 384, 64, 128, 128),
                       [(128, 384), (384, 256)], 4, {}),
    "softmax": (CK.softmax, (32, 64, 8), [(32, 64)], 4, {}),
    "layer_norm": (CK.layer_norm, (32, 64, 8, 1e-5), [(32, 64), (64,), (64,)], 4, {}),
    "transpose_2d": (CK.transpose_2d, (256, 384, 128, 128), [(256, 384)], 6, {}),
    "aliased_scale": (CK.aliased_scale, (1024, 256), [(1,), (1024,)], 4, {1: 0}),
}


def _attr(text, name):
    m = re.search(rf"\b{name} = ([^,}}]+)", text)
    return m.group(1).strip() if m else None


def _lowered(case, warps, stages=2):
    builder, args, shapes, _, _ = CASES[case]
    params = pt.CompilerParams(num_warps=warps, num_stages=stages)
    fn = jax.jit(lambda *xs: builder(*args, compiler_params=params)(*xs))
    return fn, [_s(*s) for s in shapes]


@pytest.mark.parametrize("case", sorted(CASES))
def test_lowers_to_xla_triton_custom_call(case):
    warps = 2 if case == "ragged_add" else 4
    fn, structs = _lowered(case, warps)
    text = fn.trace(*structs).lower(lowering_platforms=("cuda",)).as_text()
    calls = [line for line in text.splitlines() if "stablehlo.custom_call" in line]
    assert len(calls) == 1, calls
    call = calls[0]
    assert "@__gpu$xla.gpu.triton" in call
    # FFI API version 4: the attributes travel as a typed dictionary
    assert "mhlo.backend_config = {" in call
    ttir = re.search(r'ir = "(.*?[^\\])", ', call).group(1)
    func = re.search(r"tt\.func public @(\w+)", ttir).group(1)
    call = call.replace(ttir, "")
    assert _attr(call, "name") == f'"{func}"'
    assert func == "pallas_" + CASES[case][0].__name__
    assert _attr(call, "grid_x") == f"{CASES[case][3]} : i32"
    assert _attr(call, "grid_y") == "1 : i32" and _attr(call, "grid_z") == "1 : i32"
    assert _attr(call, "num_warps") == f"{warps} : i32"
    assert _attr(call, "num_stages") == "2 : i32"
    assert _attr(call, "debug") == "false"
    aliases = CASES[case][4]
    if aliases:
        (i, o), = aliases.items()
        assert f"operand_index = {i}" in call and "output_operand_aliases" in call
    else:
        assert "output_operand_aliases" not in call


def test_export_round_trips_for_cuda():
    fn, structs = _lowered("aliased_scale", 4)
    exp = export.export(fn, platforms=["cuda"], disabled_checks=[
        export.DisabledSafetyCheck.custom_call(gpu_launch.CUSTOM_CALL)])(*structs)
    blob = exp.serialize()
    back = export.deserialize(blob)
    assert back.platforms == ("cuda",)
    assert gpu_launch.CUSTOM_CALL in back.mlir_module()
    assert [a.shape for a in back.out_avals] == [(1024,)]


def test_compute_capability_from_params_when_nothing_else_says():
    # no GPU device and no context mesh here: CompilerParams decides, else 90
    assert not [d for d in jax.devices() if d.platform == "gpu"]
    for cc, want in ((None, "sm_90"), (80, "sm_80")):
        seen = []
        orig = gpu_launch.launch_spec
        gpu_launch.launch_spec = lambda k, t, p: seen.append(t) or orig(k, t, p)
        try:
            params = pt.CompilerParams(num_warps=4, compute_capability=cc)
            fn = jax.jit(lambda x, y: CK.vector_add(256, 128, compiler_params=params)(x, y))
            fn.trace(_s(256), _s(256)).lower(lowering_platforms=("cuda",))
        finally:
            gpu_launch.launch_spec = orig
        assert seen == [("cuda", int(want[3:]))]


def test_device_kinds_map_to_capabilities():
    assert gpu_launch.capability_of_device_kind("NVIDIA H100 80GB HBM3") == 90
    assert gpu_launch.capability_of_device_kind("NVIDIA H200") == 90
    assert gpu_launch.capability_of_device_kind("NVIDIA A100-SXM4-80GB") == 80
    assert gpu_launch.capability_of_device_kind("NVIDIA B200") == 100
    assert gpu_launch.capability_of_device_kind("cpu") is None


def test_triton_is_the_default_on_gpus_and_not_on_cpu():
    assert pl.which_backend(platform="cuda").name == "triton"
    assert pl.which_backend(platform="rocm").name == "triton"
    assert pl.which_backend(platform="cpu").name != "triton"
    backend = pl.get_backend("triton")
    assert backend.is_available() == (True, "")          # no GPU needed to lower/compile
    assert isinstance(backend.call_options("cpu")["interpret"], pt.InterpretParams)
    assert isinstance(backend.call_options("cuda")["compiler_params"], pt.CompilerParams)


def test_rocm_lowering_emits_the_same_custom_call():
    # Untested on hardware: XLA's ROCm Triton path takes the same custom call.
    params = pt.CompilerParams(num_warps=4, rocm_arch="gfx942")
    fn = jax.jit(lambda x, y: CK.vector_add(1024, 128, compiler_params=params)(x, y))
    try:
        text = fn.trace(_s(1024), _s(1024)).lower(lowering_platforms=("rocm",)).as_text()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"triton cannot compile for gfx942 here: {type(e).__name__}: {e}"[:300])
    assert "@__gpu$xla.gpu.triton" in text and "grid_x = 8 : i32" in text


def test_ptx_version_accepted_by_every_local_ptxas():
    from pallas_triton import ptx_version
    assert ptx_version.isa_for_release(13, 0) == 90
    assert ptx_version.isa_for_release(13, 4) == 94
    assert ptx_version.isa_for_release(12, 9) == 88
    picked = ptx_version.ptx_version_for(90)
    if picked is None:
        pytest.skip("no ptxas found")
    releases = [ptx_version._release(p) for p in ptx_version.ptxas_candidates(90)]
    assert picked == min(ptx_version.isa_for_release(*r) for r in releases if r)
    ir = pt.kernel_ir_of(lambda x, y: CK.vector_add(1024, 128, interpret=pt.InterpretParams())(x, y),
                         np.zeros(1024, np.float32), np.zeros(1024, np.float32))
    ptx = pt.compile_for_target(ir, target=("cuda", 90))["ptx"]
    assert f".version {picked // 10}.{picked % 10}" in ptx


def test_lowers_under_a_mesh_with_an_explicit_axis():
    # tokamax's Triton flash attention pattern: a fori_loop accumulator from jnp.zeros,
    # stored with a mask. Lowered under an abstract H100 mesh with an Explicit axis, the
    # body's values carry that mesh; the kernel's Refs must too (as in JAX), or the store's
    # discharge mixes shardings (ShardingTypeError) where JAX lowers the kernel.
    def kernel(x_ref, o_ref):
        def body(j, acc):
            return acc + pt.load(x_ref.at[pl.ds(j * 8, 8), :])
        acc = jax.lax.fori_loop(0, 2, body, jnp.zeros((8, 128), jnp.float32))
        pt.store(o_ref.at[pl.ds(0, 8), :], acc, mask=(jnp.arange(128) < 100)[None, :])

    f = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((32, 128), jnp.float32), grid=(4,),
        in_specs=[pl.BlockSpec((16, 128), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)), compiler_params=pt.CompilerParams())
    gpu = jax.sharding.AbstractDevice(device_kind="NVIDIA H100", num_cores=132, platform="gpu")
    mesh = jax.sharding.AbstractMesh((1,), ("x",), abstract_device=gpu,
                                     axis_types=(jax.sharding.AxisType.Explicit,))
    with jax.sharding.use_abstract_mesh(mesh):
        text = jax.jit(f).trace(_s(16, 128)).lower(lowering_platforms=("cuda",)).as_text()
    assert "__gpu$xla.gpu.triton" in text
