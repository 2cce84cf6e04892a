"""What JAX's own TPU tests need (tests/pallas/tpu_pallas_*_test.py): core
meshes, named grids, out-of-bounds reads in interpret mode, emit_pipeline
over views and traced grids. Each kernel runs under ours and under JAX's
Pallas (TPU interpret mode) on the same fresh random inputs, against NumPy."""

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


def _rng():
    return np.random.default_rng()


# --- TensorCoreMesh: core_map on simulated cores ------------------------------------------

def _core_map_program(P, T, num_cores, interpret):
    """Each core copies its slice of x in, adds (core + 1) and copies it out,
    after a barrier that deadlocks unless the cores run concurrently."""
    mesh = tensorcore_mesh(T, "core", num_cores)

    @jax.jit
    def f(x):
        rows = x.shape[0] // num_cores

        def inner(refs):
            x_ref, y_ref = refs

            @P.core_map(mesh, interpret=interpret)
            def _():
                def body(x_vmem, y_vmem, dma_sem, sem):
                    for c in range(num_cores):
                        P.semaphore_signal(sem, 1, core_index=c)
                    P.semaphore_wait(sem, num_cores)
                    core = jax.lax.axis_index("core")
                    slc = P.ds(core * rows, rows)
                    T.async_copy(x_ref.at[slc], x_vmem, dma_sem).wait()
                    y_vmem[...] = x_vmem[...] + (core + 1).astype(x_vmem.dtype)
                    T.async_copy(y_vmem, y_ref.at[slc], dma_sem).wait()
                P.run_scoped(body, T.VMEM((rows, 128), x_ref.dtype),
                             T.VMEM((rows, 128), y_ref.dtype), T.SemaphoreType.DMA,
                             T.SemaphoreType.REGULAR)
        _, y = P.run_state(inner)((x, jnp.zeros_like(x)))
        return y
    return f


@pytest.mark.parametrize("num_cores", [1, 2, 4])
@pytest.mark.filterwarnings("ignore:pl.core_map is deprecated")
def test_core_map_on_tensorcore_mesh_matches_jax(num_cores):
    x = _rng().standard_normal((16, 128)).astype(np.float32)
    want = (x.astype(np.float64).reshape(num_cores, -1, 128)
            + np.arange(1, num_cores + 1)[:, None, None]).reshape(x.shape)
    ours = _core_map_program(pl, pltpu, num_cores, pltpu.InterpretParams())(jnp.asarray(x))
    theirs = _core_map_program(jpl, jpltpu, num_cores, jpltpu.InterpretParams())(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(ours), want, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


@pytest.mark.filterwarnings("ignore:pl.core_map is deprecated")
def test_core_map_under_force_tpu_interpret_mode():
    x = _rng().standard_normal((16, 128)).astype(np.float32)
    f = _core_map_program(pl, pltpu, 2, False)
    with pltpu.force_tpu_interpret_mode():
        y = f(jnp.asarray(x))
    want = x.astype(np.float64) + np.repeat([1.0, 2.0], 8)[:, None]
    np.testing.assert_allclose(np.asarray(y), want, rtol=1e-6)


def test_pl_kernel_on_tensorcore_mesh_aot_v5e():
    """One core of a v5e: the mesh kernel compiles (its axis core_parallel)."""
    mesh = pltpu.TensorCoreMesh(axis_name="core", num_cores=1)

    def add_one(x):
        @pl.kernel(mesh=mesh, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                   scratch_types=[pltpu.VMEM(x.shape, x.dtype)])
        def k(x_hbm, o_hbm, buf):
            pltpu.sync_copy(x_hbm, buf)
            buf[...] = buf[...] + 1.0
            pltpu.sync_copy(buf, o_hbm)
        return k(x)
    compiled = aot.compile_for_tpu(add_one, jax.ShapeDtypeStruct((8, 128), jnp.float32))
    assert "tpu_custom_call" in compiled.as_text() or compiled is not None
    x = _rng().standard_normal((8, 128)).astype(np.float32)
    with pltpu.force_tpu_interpret_mode():
        out = add_one(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(out), x.astype(np.float64) + 1.0, rtol=1e-6)


def test_tensorcore_mesh_validates():
    with pytest.raises(ValueError, match="num_cores"):
        pltpu.TensorCoreMesh(axis_name="x", num_cores=0)
    assert pltpu.TensorCoreMesh("x", 2).shape == {"x": 2}
    assert pltpu.TensorCoreMesh("x").core_type is pltpu.CoreType.TC


# --- named grids ---------------------------------------------------------------------------

def _named_grid(P, T, x):
    def kernel(x_ref, o_ref):
        o_ref[...] = (x_ref[...] + 10.0 * jax.lax.axis_index("row").astype(jnp.float32)
                      + jax.lax.axis_index("col").astype(jnp.float32)
                      + jax.lax.axis_size("col"))
    return P.pallas_call(
        kernel, grid=(("row", 2), ("col", 3)),
        in_specs=[P.BlockSpec((8, 128), lambda i, j: (i, j))],
        out_specs=P.BlockSpec((8, 128), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=T.InterpretParams())(x)


def test_named_grid_axis_index_matches_jax():
    x = _rng().standard_normal((16, 384)).astype(np.float32)
    rows = np.repeat(np.arange(2), 8)[:, None]
    cols = np.repeat(np.arange(3), 128)[None, :]
    want = x.astype(np.float64) + 10.0 * rows + cols + 3
    ours = _named_grid(pl, pltpu, jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(ours), want, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(_named_grid(jpl, jpltpu, jnp.asarray(x))))


# --- out-of-bounds reads -----------------------------------------------------------------------

def _shifted_copy(P, T, x, mode):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    return P.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
        in_specs=[P.BlockSpec((8, 128), lambda i: (i + 1, 0))],
        out_specs=P.BlockSpec((8, 128), lambda i: (i, 0)),
        interpret=T.InterpretParams(out_of_bounds_reads=mode))(x)


def test_out_of_bounds_block_reads_uninitialized_when_asked():
    x = _rng().standard_normal((32, 128)).astype(np.float32)
    ours = np.asarray(_shifted_copy(pl, pltpu, jnp.asarray(x), "uninitialized"))
    theirs = np.asarray(_shifted_copy(jpl, jpltpu, jnp.asarray(x), "uninitialized"))
    np.testing.assert_array_equal(ours[:24], x[8:])
    assert np.isnan(ours[24:]).all()
    np.testing.assert_array_equal(ours, theirs)


def test_out_of_bounds_block_raises_by_default_with_jax_phrase():
    x = jnp.asarray(_rng().standard_normal((32, 128)).astype(np.float32))
    with pytest.raises(IndexError, match=r"Out-of-bounds block index 4 for input args\[0\]"):
        _shifted_copy(pl, pltpu, x, "raise")


@pytest.mark.parametrize("mode", ["raise", "uninitialized"])
def test_out_of_bounds_dma_slice_is_reported_when_it_runs(mode):
    """A constant out-of-range slice of an HBM Ref reaches the interpreter
    (which raises, or reads NaN), as in JAX; it is not a trace-time error."""
    x = _rng().standard_normal((8, 4, 128)).astype(np.float32)

    def run(P, T):
        def kernel(x_ref, o_ref, sem):
            T.async_copy(x_ref.at[P.ds(jnp.int32(4), 8), 1], o_ref, sem).wait()
        return P.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
            in_specs=[P.BlockSpec(memory_space=P.ANY)],
            out_specs=P.BlockSpec(memory_space=T.VMEM), scratch_shapes=[T.SemaphoreType.DMA],
            interpret=T.InterpretParams(out_of_bounds_reads=mode))(jnp.asarray(x))
    if mode == "raise":
        with pytest.raises(Exception, match="Out-of-bounds read"):
            jax.block_until_ready(run(pl, pltpu))
        pltpu.reset_tpu_interpret_mode_state()
        return
    out = np.asarray(run(pl, pltpu))
    np.testing.assert_array_equal(out[:4], x[4:, 1])
    assert np.isnan(out[4:]).all()
    np.testing.assert_array_equal(out, np.asarray(run(jpl, jpltpu)))


# --- emit_pipeline over views, with a traced grid ----------------------------------------------

def _pipelined_row(P, T, x, n_blocks, interpret=True):
    """Doubles row 1 of x (a view x_hbm.at[1]) block by block; the number of
    blocks is a traced scalar read from SMEM."""
    def kernel(n_ref, x_hbm, o_hbm):
        def body(x_blk, o_blk):
            o_blk[...] = x_blk[...] * 2.0
        T.emit_pipeline(body, grid=(n_ref[0],),
                        in_specs=[P.BlockSpec((8, 128), lambda i: (0, i))],
                        out_specs=[P.BlockSpec((8, 128), lambda i: (0, i))])(x_hbm.at[1], o_hbm)
    return P.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(x.shape[1:], x.dtype),
        in_specs=[P.BlockSpec(memory_space=T.SMEM), P.BlockSpec(memory_space=P.ANY)],
        out_specs=P.BlockSpec(memory_space=P.ANY),
        interpret=T.InterpretParams() if interpret else False,
        compiler_params=T.CompilerParams())(n_blocks, x)


def test_emit_pipeline_view_and_traced_grid_match_jax():
    x = _rng().standard_normal((2, 8, 512)).astype(np.float32)
    n = jnp.array([3], jnp.int32)     # only the first 3 of 4 blocks
    ours = np.asarray(_pipelined_row(pl, pltpu, jnp.asarray(x), n))
    # JAX's emit_pipeline asks the context mesh for the chip (ours names a v5e itself)
    v5e = jax.sharding.AbstractMesh(
        (), (), abstract_device=jax.sharding.AbstractDevice("TPU v5 lite", 1, "tpu"))
    with jax.sharding.use_abstract_mesh(v5e):
        theirs = np.asarray(_pipelined_row(jpl, jpltpu, jnp.asarray(x), n))
    np.testing.assert_allclose(ours[:, :384], x[1, :, :384].astype(np.float64) * 2.0)
    np.testing.assert_array_equal(ours[:, :384], theirs[:, :384])


def test_emit_pipeline_view_and_traced_grid_aot_v5e():
    compiled = aot.compile_for_tpu(
        lambda n, x: _pipelined_row(pl, pltpu, x, n, interpret=False),
        jax.ShapeDtypeStruct((1,), jnp.int32), jax.ShapeDtypeStruct((2, 8, 512), jnp.float32))
    assert compiled is not None


def test_emit_pipeline_marks_inputs_read_only():
    def kernel(x_ref, o_ref):
        pltpu.emit_pipeline(lambda x, o: o.__setitem__(..., x[...]), grid=(2,),
                            in_specs=[pl.BlockSpec((256,), lambda i: (i,))],
                            out_specs=[pl.BlockSpec((256,), lambda i: (i,))])(x_ref.at[1], o_ref)
    ref = lambda s: jax.ref.AbstractRef(jax.core.ShapedArray(s, jnp.float32))
    jaxpr = jax.make_jaxpr(kernel)(ref((2, 512)), ref((512,)))
    kinds = sorted(type(e).__name__ for e in jaxpr.effects)
    assert kinds == ["ReadEffect", "WriteEffect"], jaxpr.effects


# --- host-side chip queries --------------------------------------------------------------------

def test_tpu_info_for_v5e():
    info = pltpu.get_tpu_info_for_chip(pltpu.ChipVersion.TPU_V5E, 1)
    assert info.vmem_capacity_bytes > 0
    assert pltpu.is_tpu_device() is False
