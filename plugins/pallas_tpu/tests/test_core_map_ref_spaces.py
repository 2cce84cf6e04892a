"""Refs that ``core_map`` closes over keep their own memory space (issue 41,
JAX 0.10.2's tpu_pallas_memory_space_test on the v5e; issue 40, the SparseCore
async tests): the body sees each Ref with the type the caller gave it, and a
TensorCoreMesh lists its cores as ``devices``.

What runs, runs in TPU interpret mode with JAX's type checks on, against
NumPy; what needs the chip is lowered for a v5e without one, under ours and
JAX's Pallas, and the operands' memory-space colors compared.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as jpl
from jax.experimental.pallas import tpu as jpltpu

import pallas_frontend as pf
import pallas_tpu
from pallas_tpu import tpu_sc

SPACES = {"VMEM": pallas_tpu.VMEM, "SMEM": pallas_tpu.SMEM, "HBM": pallas_tpu.HBM,
          "ANY": pf.ANY}


@pytest.fixture(autouse=True)
def _type_checks():
    with jax.enable_checks(True):      # JAX's tests run so: a Ref of the wrong type fails
        yield


def _lower_for_v5e(fn, *args) -> str:
    v5e = jax.sharding.AbstractDevice("TPU v5 lite", 1, "tpu")
    with jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((), (), abstract_device=v5e)):
        return jax.jit(fn).trace(*args).lower(lowering_platforms=("tpu",)).as_text()


def _copy_through_core_map(pl, tpu, space, seen):
    def f(x):
        x_ref = jax.new_ref(x, memory_space=space)
        y_ref = jax.new_ref(pl.empty_like(x), memory_space=space)

        @pl.core_map(mesh=tpu.create_tensorcore_mesh("core", num_cores=1))
        def _():
            seen.append((jax.typeof(x_ref).memory_space, jax.typeof(y_ref).memory_space))
            if jax.typeof(x_ref).memory_space is tpu.VMEM:
                y_ref[...] = x_ref[...] * 2.0
            else:
                tpu.sync_copy(x_ref, y_ref)
        return y_ref[...]
    return f


@pytest.mark.parametrize("name", sorted(SPACES))
def test_the_body_sees_each_ref_in_its_own_space(name):
    space, seen = SPACES[name], []
    x = np.random.default_rng(0).standard_normal((8, 128)).astype(np.float32)
    with pallas_tpu.force_tpu_interpret_mode():
        y = jax.jit(_copy_through_core_map(pf, pallas_tpu, space, seen))(x)
    assert seen == [(space, space)] and all(s is space for s in seen[0])
    expected = x.astype(np.float64) * (2.0 if name == "VMEM" else 1.0)
    np.testing.assert_array_equal(np.asarray(y, np.float64), expected)


# the color XLA gives each memory space (JAX's test's table); SMEM and ANY get none
@pytest.mark.parametrize("name,color", [("VMEM", 1), ("HBM", 0), ("SMEM", None), ("ANY", None)])
def test_operands_are_placed_as_under_jax(name, color):
    x = jnp.zeros((8, 128), jnp.float32)
    colors = {}
    for side, pl, tpu in (("ours", pf, pallas_tpu), ("jax", jpl, jpltpu)):
        space = getattr(tpu, name) if name != "ANY" else pl.ANY
        text = _lower_for_v5e(_copy_through_core_map(pl, tpu, space, []), x)
        colors[side] = re.findall(r"input_memory_space_colors[^\]]*\]", text)
    assert colors["ours"] == colors["jax"]
    if color is not None:
        assert colors["ours"] == [
            f"input_memory_space_colors\\22: [{{\\22operand_index\\22:0,\\22color\\22:{color}}},"
            f"{{\\22operand_index\\22:1,\\22color\\22:{color}}}]"]
    else:
        assert colors["ours"] == []


def test_smem_refs_shared_by_two_core_maps():
    """JAX's test_smem_copy: one SMEM Ref written by a kernel, updated by the next."""
    mesh = pallas_tpu.create_tensorcore_mesh("core")
    assert len(mesh.devices) == mesh.num_cores == 1
    assert mesh.axis_names == ("core",)
    base = np.random.default_rng(1).integers(-100, 100, 8).astype(np.int32)
    kernel = pf.core_map(mesh=mesh)

    @jax.jit
    def f(b):
        y_ref = pf.empty_ref_like(pallas_tpu.SMEM((8,), jnp.int32))
        b_ref = jax.new_ref(b, memory_space=pallas_tpu.SMEM)

        @kernel
        def _():
            for i in range(8):
                y_ref[i] = b_ref[i] * i

        @kernel
        def _():
            for i in range(8):
                y_ref[i] = y_ref[i] + 1
        return y_ref[...]
    with pallas_tpu.force_tpu_interpret_mode():
        got = f(base)
    np.testing.assert_array_equal(got, base.astype(np.int64) * np.arange(8) + 1)


def test_a_semaphore_ref_keeps_its_kind():
    kinds = []

    @jax.jit
    def f():
        ref = pf.empty_ref_like(pallas_tpu.SemaphoreType.DMA(()))
        kinds.append(jax.typeof(ref).memory_space)
        return 0
    f()
    assert kinds == [pallas_tpu.SemaphoreType.DMA(()).get_ref_aval().memory_space]


def test_a_vmem_ref_on_two_cores_is_refused_as_jax_does():
    mesh = pallas_tpu.create_tensorcore_mesh("core", num_cores=2)

    def f(x):
        x_ref = jax.new_ref(x, memory_space=pallas_tpu.VMEM)

        @pf.core_map(mesh=mesh)
        def _():
            x_ref[...] = x_ref[...] + 1
        return x_ref[...]
    with pytest.raises(NotImplementedError, match="does not support VMEM inputs/outputs when "
                                                  "there are >1 cores. Use HBM or ANY instead."):
        _lower_for_v5e(f, jnp.zeros((8, 128), jnp.float32))


def test_a_sparsecore_core_map_sees_a_semaphore_and_an_smem_ref_as_made():
    """JAX's test_memory_space_annotations_aliased_input_core_map, on the CPU model."""
    mesh = tpu_sc.ScalarSubcoreMesh(axis_name="core", num_cores=1)
    x = np.random.default_rng(2).standard_normal((2, 8, 128)).astype(np.float32)
    seen = []

    @jax.jit
    def f(x, y):
        x_ref = jax.new_ref(x, memory_space=pallas_tpu.HBM)
        y_ref = jax.new_ref(y, memory_space=pallas_tpu.HBM)
        index_ref = jax.new_ref(jnp.ones([8], jnp.int32), memory_space=pallas_tpu.SMEM)
        sem = pf.kernel(lambda *_: None, out_type=pallas_tpu.SemaphoreType.DMA(()), mesh=mesh)()
        sem_ref = jax.new_ref(sem, memory_space=pallas_tpu.SEMAPHORE)

        @pf.core_map(mesh)
        def _():
            seen.append(jax.typeof(index_ref).memory_space)
            pallas_tpu.async_copy(x_ref.at[index_ref[0]], y_ref, sem_ref).wait()
        return jax.freeze(y_ref)
    with pallas_tpu.force_tpu_interpret_mode():
        got = f(x, np.zeros((8, 128), np.float32))
    assert seen == [pallas_tpu.SMEM]
    np.testing.assert_array_equal(got, x[1])
