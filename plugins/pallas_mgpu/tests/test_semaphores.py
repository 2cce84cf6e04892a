"""Semaphores (``plgpu.SemaphoreType`` scratch, ``pl.semaphore_*``) and the
multi-GPU operations (``semaphore_signal_multicast``, ``multimem_store``,
``multimem_load_reduce``, remote ``semaphore_signal``, ``remote_ref``), lowered for cuda over
an abstract mesh of two H100s and compared with JAX's lowering of the same
kernels: the same GPU, NVVM and LLVM operations, as often, and the same
inline PTX (the multimem and remote-atomic instructions are inline PTX)."""

import re
import sys
import warnings
from collections import Counter
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import pallas_frontend as pf
import pallas_mgpu
from pallas_frontend.backend_api import BackendCapabilityError
from pallas_mgpu import _jax_private

TOOLS = Path(__file__).resolve().parents[3] / "tools"
P = jax.sharding.PartitionSpec
H100 = jax.sharding.AbstractDevice(device_kind="NVIDIA H100 80GB HBM3", platform="gpu",
                                   num_cores=132)


def _mesh():
    return jax.sharding.AbstractMesh((2,), ("x",), abstract_device=H100)


def _lowered_ops(fn, shape, dtype, out_spec):
    """The Mosaic GPU module of ``fn`` under shard_map over two H100s, as
    (operation counts, inline PTX strings)."""
    mesh = _mesh()
    f = jax.shard_map(fn, mesh=mesh, in_specs=P("x"), out_specs=out_spec, check_vma=False)
    x = jax.ShapeDtypeStruct(shape, dtype, sharding=jax.sharding.NamedSharding(mesh, P("x")))
    with jax.sharding.use_abstract_mesh(mesh):
        lowered = jax.jit(f).trace(x).lower(lowering_platforms=("cuda",))
    (module,) = _jax_private.mosaic_gpu_modules(lowered)
    ops = Counter(re.findall(r'"stable_mosaic_gpu\.((?:nvvm|gpu|llvm)\.[a-z_.0-9]+)"\(', module))
    asm = Counter(re.findall(r'asm_string = "([^"]*)"', module))
    return ops, asm


def _jax_files(name):
    if not (TOOLS / "jax_ops_copy.py").exists():
        pytest.skip("needs the checkout's tools/ (the import rewriting)")
    sys.path.insert(0, str(TOOLS))
    import jax_ops_copy
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return jax_ops_copy.jax_ops(name), jax_ops_copy.ours_ops().load(name)


@pytest.mark.parametrize("name, fn, out_spec, ptx", [
    ("gpu.all_gather_mgpu", "all_gather", P(), "multimem.st"),
    ("gpu.reduce_scatter_mgpu", "reduce_scatter", P("x"), "multimem.ld_reduce"),
])
def test_jax_collective_files_lower_for_cuda_as_jax(name, fn, out_spec, ptx):
    theirs, ours = _jax_files(name)
    got = {}
    for side, mod in (("jax", theirs), ("ours", ours)):
        got[side] = _lowered_ops(lambda x, m=mod: getattr(m, fn)(x, axis_name="x", num_blocks=4),
                                 (256, 128), jnp.float32, out_spec)
    assert got["ours"] == got["jax"]
    assert any(ptx in s for s in got["ours"][1]), got["ours"][1]


def _remote_signal_kernel(plgpu, pl):
    """Each device signals semaphore 1 of its peer, then waits on its own."""
    def body(x_ref, o_ref, sems):
        me = jax.lax.axis_index("x")
        plgpu.semaphore_signal(sems.at[1], 2, device_id={"x": 1 - me})
        pl.semaphore_wait(sems.at[1], 2)
        o_ref[...] = x_ref[...] + 1.0

    def call(x):
        return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                            grid=(1,), grid_names=("blocks",),
                            scratch_types=[plgpu.SemaphoreType.REGULAR((2,))])(x)
    return call


def test_remote_semaphore_signal_and_wait_lower_as_jax():
    from jax.experimental import pallas as jpl
    from jax.experimental.pallas import mosaic_gpu as jplgpu
    ours = _lowered_ops(_remote_signal_kernel(pallas_mgpu, pf), (256,), jnp.float32, P("x"))
    theirs = _lowered_ops(_remote_signal_kernel(jplgpu, jpl), (256,), jnp.float32, P("x"))
    assert ours == theirs
    assert any("atom" in s or "red" in s for s in ours[1]), ours[1]


def _remote_copy_kernel(plgpu, pl):
    """Each device copies its input (via SMEM, TMA) into its peer's output,
    then signals the peer and waits for its own signal."""
    def body(x_ref, o_ref, smem, sem, bar):
        peer = 1 - jax.lax.axis_index("x")
        plgpu.copy_gmem_to_smem(x_ref, smem, bar)
        plgpu.barrier_wait(bar)
        plgpu.copy_smem_to_gmem(smem, plgpu.remote_ref(o_ref, peer))
        plgpu.wait_smem_to_gmem(0)
        pl.semaphore_signal(sem, device_id=peer)
        pl.semaphore_wait(sem, 1)

    def call(x):
        return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                            grid=(1,), grid_names=("blocks",),
                            scratch_types=[plgpu.SMEM(x.shape, x.dtype),
                                           plgpu.SemaphoreType.REGULAR, plgpu.Barrier()])(x)
    return call


def test_tma_copy_to_a_remote_ref_lowers_as_jax():
    from jax.experimental import pallas as jpl
    from jax.experimental.pallas import mosaic_gpu as jplgpu
    ours = _lowered_ops(_remote_copy_kernel(pallas_mgpu, pf), (64, 128), jnp.float32, P("x"))
    theirs = _lowered_ops(_remote_copy_kernel(jplgpu, jpl), (64, 128), jnp.float32, P("x"))
    assert ours == theirs
    assert any("cp.async.bulk.global.shared" in s for s in ours[1]), ours[1]


def test_semaphore_ops_on_a_non_semaphore_buffer_are_refused():
    def body(x_ref, o_ref, buf):
        pf.semaphore_wait(buf, 1)
        o_ref[...] = x_ref[...]
    f = pallas_mgpu.kernel(body, out_type=jax.ShapeDtypeStruct((128,), jnp.float32),
                           grid=(1,), grid_names=("blocks",),
                           scratch_types=[pallas_mgpu.SMEM((), jnp.int32)])
    with pytest.raises(BackendCapabilityError, match=r"SemaphoreType.*kernel 'body'|"
                                                     r"kernel 'body'.*SemaphoreType") as err:
        jax.jit(f).trace(jax.ShapeDtypeStruct((128,), jnp.float32)).lower(
            lowering_platforms=("cuda",))
    # the user's line, not the frontend function that bound the primitive
    assert "test_semaphores.py" in str(err.value) and "primitives.py" not in str(err.value)


def test_semaphore_type_is_a_gmem_int32_scratch_with_jax_counterpart():
    from jax.experimental.pallas import mosaic_gpu as jplgpu
    sems = pallas_mgpu.SemaphoreType.REGULAR((3,))
    aval = sems.get_ref_aval()
    assert aval.shape == (3,) and aval.dtype == jnp.int32
    assert sems.to_jax() == jplgpu.SemaphoreType.REGULAR((3,))
    assert pallas_mgpu.SemaphoreType.BARRIER.get_ref_aval().shape == ()
