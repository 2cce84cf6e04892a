"""SMEM blocks of an ``emit_pipeline`` split across cores (``core_axis_name``),
whose body asks ``pl.program_id``, ``pl.num_programs``, ``lax.axis_size`` and
``lax.axis_index`` of the core axis and stores scalars (JAX 0.10.2's
PallasCallMegacoreTest::test_pipeline_axis_queries).

Ours failed it three ways: a ``pl.core_map`` body was traced before its mesh
axes were marked as the kernel's, so ``axis_index('core')`` stayed inside the
pipeline's body ('lax.axis_index inside tpu_emit_pipeline is not supported');
the body's ``pl.num_programs`` was the whole grid's, not its core's share (8
for 4 with 2 cores); and (mended by 6668d61) a pipeline handed to JAX's
``emit_pipeline`` lost its specs' memory spaces, so on the chip (compiled by
Mosaic) the SMEM blocks were VMEM ones ('Cannot store scalars to VMEM'; TPU
interpret mode does not check it). Runs in TPU interpret mode against NumPy
on random data, and compiles for v5e (and for a 2-core v5p) as JAX's does."""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as jpl
from jax.experimental.pallas import tpu as jpltpu

import pallas_frontend as pl
import pallas_tpu as pltpu
from pallas_tpu import aot
from tpu_window import tensorcore_mesh

STEPS, LANES = 8, 128
# JAX's test uses pl.core_map (deprecated in favour of pl.kernel); both are run
pytestmark = pytest.mark.filterwarnings("ignore:.*core_map is deprecated:DeprecationWarning")


def _queries(Pl, T, num_cores, interpret=False, use_core_map=True):
    """Row i of the (STEPS, LANES) int32 result: [pid, nprogs, axis_size,
    axis_index, 3 * x[i, 4] + pid, x[i, 5:]...]: x's row i comes in an SMEM
    block, the result's row goes out in one."""
    mesh = tensorcore_mesh(T, "core", num_cores)

    def pipeline_body(x_smem, o_smem):
        pid = Pl.program_id(0)
        o_smem[0], o_smem[1] = pid, Pl.num_programs(0)
        o_smem[2], o_smem[3] = jax.lax.axis_size("core"), jax.lax.axis_index("core")
        o_smem[4] = 3 * x_smem[4] + pid
        for j in range(5, 8):
            o_smem[j] = x_smem[j]

    def pipeline(x_hbm, o_hbm):
        row = Pl.BlockSpec((None, LANES), lambda i: (i, 0), memory_space=T.SMEM)
        T.emit_pipeline(pipeline_body, grid=(STEPS,), in_specs=row, out_specs=row,
                        core_axis_name="core", dimension_semantics=(T.PARALLEL,))(x_hbm, o_hbm)

    def f(x):
        if not use_core_map:
            return Pl.kernel(pipeline, mesh=mesh, out_type=jax.ShapeDtypeStruct(
                x.shape, jnp.int32), interpret=interpret)(x)
        x_ref = jax.new_ref(x)
        o_ref = jax.empty_ref(jax.ShapeDtypeStruct(x.shape, jnp.int32))

        @Pl.core_map(mesh, interpret=interpret)
        def _():
            pipeline(x_ref, o_ref)
        return jax.freeze(o_ref)
    return f


def _want(x, num_cores):
    share = STEPS // num_cores
    want = np.zeros((STEPS, 8), np.int64)
    for i in range(STEPS):
        want[i, :5] = [i, share, num_cores, i // share, 3 * int(x[i, 4]) + i]
        want[i, 5:] = x[i, 5:8]
    return want


@pytest.mark.parametrize("use_core_map", [True, False], ids=["core_map", "kernel"])
@pytest.mark.parametrize("num_cores", [1, 2])
def test_axis_queries_in_smem_blocks_match_numpy(num_cores, use_core_map):
    x = np.random.default_rng().integers(-1000, 1000, (STEPS, LANES)).astype(np.int32)
    out = jax.jit(_queries(pl, pltpu, num_cores, pltpu.InterpretParams(),
                           use_core_map))(x)
    np.testing.assert_array_equal(np.asarray(out)[:, :8], _want(x, num_cores))


@pytest.mark.parametrize("topology,num_cores", [("v5e:2x2", 1), ("v5p:1x1x1", 2)])
def test_axis_queries_in_smem_blocks_compile_as_jax(topology, num_cores):
    x = jax.ShapeDtypeStruct((STEPS, LANES), jnp.int32)
    for Pl, T in ((pl, pltpu), (jpl, jpltpu)):
        with jax.set_mesh(aot.topology_mesh(topology)) if T is jpltpu \
                else contextlib.nullcontext():
            aot.compile_for_tpu(_queries(Pl, T, num_cores), x, topology=topology)
