"""Barrier semaphores, core barriers, VMEM_SHARED and memory-space
constraints: in TPU interpret mode on 4 host devices (one simulated TPU per
device, under shard_map), against JAX's own pltpu on the same fresh random
inputs and against NumPy; and AOT-compiled for v5e (v5p for two cores)."""

import sys
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as jpl
from jax.experimental.pallas import tpu as jpltpu
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import pallas_frontend as pl
import pallas_tpu as pltpu
from pallas_tpu import aot
from tpu_window import tensorcore_mesh

N = 4
REPO = Path(__file__).resolve().parents[3]


def _rng():
    return np.random.default_rng()


def _need_devices():
    if len(jax.devices()) < N:
        pytest.skip(f"needs {N} host devices (XLA_FLAGS=--xla_force_host_platform_device_count)")


# --- get_barrier_semaphore ------------------------------------------------------------------

def _barrier_permute(Pl, T, interpret):
    """Barrier with both neighbours on the kernel's barrier semaphore, then
    send the block to the right neighbour (JAX's right-permute example)."""
    def kernel(x_ref, o_ref, send_sem, recv_sem):
        me = jax.lax.axis_index("x")
        left, right = jax.lax.rem(me + N - 1, N), jax.lax.rem(me + 1, N)
        barrier = T.get_barrier_semaphore()
        Pl.semaphore_signal(barrier, 1, device_id=(left,))
        Pl.semaphore_signal(barrier, 1, device_id={"x": right})
        Pl.semaphore_wait(barrier, 2)
        copy = T.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(right,))
        copy.start()
        copy.wait()
    return Pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        in_specs=[Pl.BlockSpec(memory_space=Pl.ANY)], out_specs=Pl.BlockSpec(memory_space=Pl.ANY),
        scratch_shapes=[T.SemaphoreType.DMA] * 2,
        compiler_params=T.CompilerParams(collective_id=7), interpret=interpret)


@pytest.mark.parametrize("dma_execution_mode", ["eager", "on_wait"])
def test_barrier_semaphore_right_permute_matches_jax(dma_execution_mode):
    _need_devices()
    mesh = Mesh(np.array(jax.devices()[:N]), ("x",))
    x = _rng().standard_normal((8, 128 * N)).astype(np.float32)
    xs = jax.device_put(x, NamedSharding(mesh, P(None, "x")))
    outs = []
    for Pl, T in ((pl, pltpu), (jpl, jpltpu)):
        call = _barrier_permute(Pl, T, T.InterpretParams(dma_execution_mode=dma_execution_mode,
                                                         detect_races=True))
        f = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P(None, "x"),
                                  out_specs=P(None, "x"), check_vma=False))
        outs.append(np.asarray(f(xs)))
    want = np.roll(x.reshape(8, N, 128), 1, axis=1).reshape(8, N * 128)
    np.testing.assert_array_equal(outs[0], want)
    np.testing.assert_array_equal(outs[0], outs[1])


def test_barrier_semaphore_aot_v5e_2x2():
    from jax.experimental import topologies
    topo = topologies.get_topology_desc(topology_name="v5e:2x2", platform="tpu")
    mesh = Mesh(np.array(topo.devices), ("x",))
    spec = jax.ShapeDtypeStruct((8, 128 * N), jnp.float32,
                                sharding=NamedSharding(mesh, P(None, "x")))
    f = jax.jit(jax.shard_map(_barrier_permute(pl, pltpu, False), mesh=mesh,
                              in_specs=P(None, "x"), out_specs=P(None, "x"), check_vma=False))
    lowered = f.trace(spec).lower()
    text = lowered.as_text()
    assert "tpu_custom_call" in text and "collective_id" in text
    lowered.compile()


def test_barrier_semaphore_tag_must_be_hashable():
    with pytest.raises(TypeError, match="unhashable"):
        pltpu.get_barrier_semaphore(tag=[1])


# --- JAX's ops/tpu/all_gather.py, only its Pallas imports swapped --------------------------

def _jax_all_gather_module(ours: bool):
    tools = REPO / "tools"
    if not (tools / "jax_suite.py").exists():
        pytest.skip("needs the repository's tools/jax_suite.py (import rewriting)")
    sys.path.insert(0, str(tools))
    try:
        import jax_suite
    finally:
        sys.path.remove(str(tools))
    from jax.experimental.pallas.ops.tpu import all_gather
    source = Path(all_gather.__file__).read_text()
    module = types.ModuleType("all_gather_ours" if ours else "all_gather_jax")
    exec(compile(jax_suite.make_copy(source, ours, []), module.__name__, "exec"), module.__dict__)
    return module


def test_jax_all_gather_file_interpret_4_devices():
    _need_devices()
    mesh = Mesh(np.array(jax.devices()[:N]), ("x",))
    x = _rng().standard_normal((N * 8, 128)).astype(np.float32)
    xs = jax.device_put(x, NamedSharding(mesh, P("x")))
    # "eager" DMAs: with "on_wait", JAX's own run of this file leaves a NaN block.
    with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(dma_execution_mode="eager")):
        ours = np.asarray(_jax_all_gather_module(True).all_gather(xs, mesh=mesh, axis_name="x"))
    with jpltpu.force_tpu_interpret_mode(jpltpu.InterpretParams(dma_execution_mode="eager")):
        theirs = np.asarray(_jax_all_gather_module(False).all_gather(xs, mesh=mesh,
                                                                      axis_name="x"))
    np.testing.assert_array_equal(ours, x)
    np.testing.assert_array_equal(ours, theirs)


def test_jax_all_gather_file_aot_v5e_2x2():
    from jax.experimental import topologies
    topo = topologies.get_topology_desc(topology_name="v5e:2x2", platform="tpu")
    mesh = Mesh(np.array(topo.devices), ("x",))
    spec = jax.ShapeDtypeStruct((N * 8, 128), jnp.float32, sharding=NamedSharding(mesh, P("x")))
    module = _jax_all_gather_module(True)
    lowered = module.all_gather.trace(spec, mesh=mesh, axis_name="x").lower()
    assert "tpu_custom_call" in lowered.as_text()
    lowered.compile()


# --- core_barrier / run_on_first_core ------------------------------------------------------

def _scaled_sum(num_cores, interpret):
    """Each core scales its rows by (core + 1) into ``parts``; after a core
    barrier the first core sums every core's part into ``total``. (JAX's own
    core_barrier fails in its interpreter here: it knows core axes only of a
    core_map, so this is checked against NumPy.)"""
    mesh = pltpu.TensorCoreMesh(axis_name="core", num_cores=num_cores)

    def f(x):
        rows = x.shape[0] // num_cores

        @pl.kernel(mesh=mesh, out_type=(jax.ShapeDtypeStruct(x.shape, x.dtype),
                                        jax.ShapeDtypeStruct((rows, 128), x.dtype)),
                   scratch_types=[pltpu.VMEM((rows, 128), x.dtype), pltpu.VMEM((rows, 128), x.dtype),
                                  pltpu.SemaphoreType.REGULAR, pltpu.SemaphoreType.DMA],
                   interpret=interpret)
        def k(x_hbm, parts_hbm, total_hbm, buf, acc, sem, dma):
            core = jax.lax.axis_index("core")
            mine = pl.ds(core * rows, rows)
            pltpu.async_copy(x_hbm.at[mine], buf, dma).wait()
            buf[...] = buf[...] * (core + 1).astype(buf.dtype)
            pltpu.async_copy(buf, parts_hbm.at[mine], dma).wait()
            pltpu.core_barrier(sem, core_axis_name="core")

            @pltpu.run_on_first_core("core")
            def _():
                acc[...] = jnp.zeros_like(acc)
                for c in range(num_cores):
                    pltpu.async_copy(parts_hbm.at[pl.ds(c * rows, rows)], buf, dma).wait()
                    acc[...] += buf[...]
                pltpu.async_copy(acc, total_hbm, dma).wait()
        return k(x)
    return f


@pytest.mark.parametrize("num_cores", [1, 2, 4])
def test_core_barrier_and_run_on_first_core_interpret(num_cores):
    x = _rng().standard_normal((8 * num_cores, 128)).astype(np.float32)
    scale = np.arange(1, num_cores + 1)[:, None, None]
    want = (x.astype(np.float64).reshape(num_cores, 8, 128) * scale).sum(0)
    parts, total = _scaled_sum(num_cores, pltpu.InterpretParams(detect_races=True))(x)
    np.testing.assert_allclose(np.asarray(parts), (x.reshape(num_cores, 8, 128) * scale)
                               .reshape(x.shape), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(total), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("topology,num_cores", [("v5e:2x2", 1), ("v5p:1x1x1", 2)])
def test_core_barrier_compiles(topology, num_cores):
    spec = jax.ShapeDtypeStruct((8 * num_cores, 128), jnp.float32)
    aot.compile_for_tpu(_scaled_sum(num_cores, False), spec, topology=topology)


# --- VMEM_SHARED ---------------------------------------------------------------------------

def _through_shared(Pl, T, num_cores, interpret):
    mesh = tensorcore_mesh(T, "core", num_cores)

    def f(x):
        @Pl.kernel(mesh=mesh, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                   scratch_types=[T.VMEM_SHARED(x.shape, x.dtype), T.VMEM(x.shape, x.dtype),
                                  T.SemaphoreType.DMA],
                   interpret=interpret)
        def k(x_hbm, o_hbm, shared, buf, dma):
            T.async_copy(x_hbm, shared, dma).wait()
            T.async_copy(shared, buf, dma).wait()
            buf[...] = buf[...] + 1.0
            T.async_copy(buf, o_hbm, dma).wait()
        return k(x)
    return f


def test_vmem_shared_scratch_matches_jax():
    x = _rng().standard_normal((8, 128)).astype(np.float32)
    # the chip's Mosaic refuses a VMEM_SHARED scratch (next test): this compares
    # the interpreters only, so ours' chip checks are off
    ours = _through_shared(pl, pltpu, 1, pltpu.InterpretParams(chip_checks=False))(x)
    theirs = _through_shared(jpl, jpltpu, 1, jpltpu.InterpretParams())(x)
    np.testing.assert_allclose(np.asarray(ours), x.astype(np.float64) + 1.0, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


def test_vmem_shared_scratch_reaches_mosaic_as_in_jax():
    """libtpu's Mosaic allocates TensorCore scratch in VMEM, SMEM and
    semaphores only: ours hands it VMEM_SHARED as JAX does, and is refused alike."""
    spec = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    errors = []
    for Pl, T in ((pl, pltpu), (jpl, jpltpu)):
        with pytest.raises(Exception, match="Scratch memref allocation only supported") as e:
            aot.compile_for_tpu(_through_shared(Pl, T, 2, False), spec, topology="v5p:1x1x1")
        errors.append(str(e.value).split(": ", 1)[1].replace("`f.1`", "`k.1`"))
    # the message after the kernel's HLO name (which libtpu 0.0.42, JAX 0.10's, does not give)
    assert errors[0].split("HLO name")[-1] == errors[1].split("HLO name")[-1]


def test_vmem_shared_on_several_simulated_cores_is_refused():
    # JAX's interpreter would give each core its own copy: silently unshared.
    x = _rng().standard_normal((8, 128)).astype(np.float32)
    with pytest.raises(NotImplementedError, match=r"scratch_shapes\[0\] of kernel 'k'.*"
                       r"VMEM_SHARED on 2 simulated cores"):
        _through_shared(pl, pltpu, 2, pltpu.InterpretParams())(x)


# --- with_memory_space_constraint ----------------------------------------------------------

def _constrained_double(Pl, T, space, interpret=False):
    def f(x):
        x = T.with_memory_space_constraint(x, space)

        def k(x_ref, o_ref):
            o_ref[...] = x_ref[...] * 2.0
        return Pl.pallas_call(k, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              compiler_params=None if interpret else T.CompilerParams(),
                              interpret=interpret)(x)
    return f


def _memory_colors(text: str) -> str:
    """The custom call's operand memory spaces ("" when it states none)."""
    start = text.find("memory_space_colors")
    return "" if start < 0 else text[start:text.index("]", start)]


@pytest.mark.parametrize("name", ["HBM", "VMEM", "SMEM"])
def test_with_memory_space_constraint_reaches_mosaic_as_in_jax(name):
    spec = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    ours = aot.lower_for_tpu(_constrained_double(pl, pltpu, getattr(pltpu, name)), spec)
    theirs = aot.lower_for_tpu(_constrained_double(jpl, jpltpu, getattr(jpltpu, name)), spec)
    assert _memory_colors(ours.as_text()) == _memory_colors(theirs.as_text())
    assert (_memory_colors(ours.as_text()) != "") == (name != "SMEM")   # as JAX 0.12 states them
    x = _rng().standard_normal((8, 128)).astype(np.float32)
    out = _constrained_double(pl, pltpu, getattr(pltpu, name), pltpu.InterpretParams())(x)
    np.testing.assert_allclose(np.asarray(out), 2.0 * x.astype(np.float64), rtol=1e-6)


def test_with_memory_space_constraint_validates():
    x = jnp.ones((8, 128), jnp.float32)
    assert pltpu.with_memory_space_constraint(x, pltpu.ANY) is x
    with pytest.raises(NotImplementedError, match="HBM, VMEM, SMEM"):
        pltpu.with_memory_space_constraint(x, pltpu.CMEM)
