"""emit_pipeline_with_async_prefetch: JAX's usage (prefetch outside the kernel,
the pipeline inside a pl.kernel over a TensorCore mesh) under ours, against
NumPy float64 and JAX's Pallas on the same random inputs."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu
from tpu_window import (ASYNC_PREFETCH, JAX_PREFETCHES_WHOLE_OPERAND, skip_unless,
                        tensorcore_mesh)

ROWS, COLS, BLOCK = 16, 768, 128        # six column blocks of (16, 128)


def body(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0 + jnp.tanh(y_ref[...])


def numpy_reference(x, y):
    return x.astype(np.float64) * 2.0 + np.tanh(y.astype(np.float64))


def prefetching_program(Pl, T, *, prefetch=True, interpret=False):
    """JAX's pattern, written once for either API: the first blocks of x (two
    of three buffers) and of y (one) are prefetched before the kernel that
    runs the pipeline; the kernel first does other work (o is written twice)."""
    mesh = tensorcore_mesh(T)
    spec = lambda mode: Pl.BlockSpec((ROWS, BLOCK), lambda i: (0, i), pipeline_mode=mode)
    if prefetch:
        in_specs = [spec(Pl.Buffered(3, prefetched_count=2)),
                    spec(Pl.Buffered(2, prefetched_count=1))]
    else:       # JAX's plain emit_pipeline: the reference where JAX cannot prefetch
        in_specs = [spec(Pl.Buffered(3)), spec(Pl.Buffered(2))]
    options = dict(grid=(COLS // BLOCK,), in_specs=in_specs, out_specs=spec(None))
    if prefetch:
        pipeline, async_prefetch = T.emit_pipeline_with_async_prefetch(body, mesh=mesh, **options)
    else:
        pipeline, async_prefetch = T.emit_pipeline(body, **options), None

    def program(x, y):
        allocations = async_prefetch(x, y) if prefetch else None

        @functools.partial(Pl.kernel, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                           mesh=mesh, interpret=interpret)
        def kernel(x_hbm, y_hbm, o_hbm):
            T.sync_copy(y_hbm, o_hbm)         # work the prefetch may overlap
            if prefetch:
                pipeline(x_hbm, y_hbm, o_hbm, allocations=allocations)
            else:
                pipeline(x_hbm, y_hbm, o_hbm)
        return kernel(x, y)
    return program


def _inputs():
    rng = np.random.default_rng()
    return (rng.standard_normal((ROWS, COLS)).astype(np.float32),
            rng.uniform(-3.0, 3.0, (ROWS, COLS)).astype(np.float32))


def _v5e_abstract_mesh():
    """JAX's pipeline reads the chip's tiling from the context mesh on CPU."""
    return jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh(
        (), (), abstract_device=jax.sharding.AbstractDevice("TPU v5 lite", 1, "tpu")))


@pytest.mark.parametrize("mode", ["tpu_interpret", "builtin_interpreter"])
def test_async_prefetch_matches_numpy_and_jax(mode):
    from jax.experimental import pallas as jpl
    from jax.experimental.pallas import tpu as jpltpu
    x, y = _inputs()
    interpret = pltpu.InterpretParams() if mode == "tpu_interpret" else True
    ours = np.asarray(jax.jit(prefetching_program(pl, pltpu, interpret=interpret))(x, y))
    np.testing.assert_allclose(ours, numpy_reference(x, y), rtol=2e-6, atol=2e-6)
    # JAX's TPU interpret mode cannot run JAX's own prefetch (its windows live
    # in vmem@tc outside a kernel): JAX's plain pipeline of the same kernel is the reference
    with _v5e_abstract_mesh():
        theirs = np.asarray(jax.jit(prefetching_program(
            jpl, jpltpu, prefetch=False, interpret=jpltpu.InterpretParams()))(x, y))
    np.testing.assert_array_equal(ours, theirs)


@ASYNC_PREFETCH
def test_jax_tpu_interpret_mode_cannot_run_jax_prefetch():
    """Why the reference above is JAX's plain pipeline (if this starts to pass,
    compare with JAX's prefetch directly)."""
    from jax.experimental import pallas as jpl
    from jax.experimental.pallas import tpu as jpltpu
    x, y = _inputs()
    with _v5e_abstract_mesh(), jpltpu.force_tpu_interpret_mode(), \
            pytest.raises(NotImplementedError, match="memory space"):
        jax.jit(prefetching_program(jpl, jpltpu))(x, y)


@ASYNC_PREFETCH
def test_async_prefetch_compiles_for_v5e_as_jax_does(aot_compile, v5e_mesh):
    from jax.experimental import pallas as jpl
    from jax.experimental.pallas import tpu as jpltpu
    x, y = (jnp.zeros((ROWS, COLS), jnp.float32),) * 2
    _, text = aot_compile(prefetching_program(pl, pltpu), x, y)
    assert "tpu_custom_call" in text
    _, text = aot_compile(prefetching_program(jpl, jpltpu), x, y)
    assert "tpu_custom_call" in text


@pytest.mark.skipif(jax.default_backend() != "tpu", reason="runs JAX's prefetch on a TPU chip")
def test_async_prefetch_on_tpu_matches_jax():
    from jax.experimental import pallas as jpl
    from jax.experimental.pallas import tpu as jpltpu
    x, y = _inputs()
    ours = np.asarray(jax.jit(prefetching_program(pl, pltpu))(x, y))
    theirs = np.asarray(jax.jit(prefetching_program(jpl, jpltpu))(x, y))
    np.testing.assert_allclose(ours, numpy_reference(x, y), rtol=2e-6, atol=2e-6)
    np.testing.assert_array_equal(ours, theirs)


def _whole_operand_program(Pl, T, interpret=False):
    """y's block is all of y at every step (JAX's trivial windowing): JAX lets
    it prefetch more blocks (2) than its buffer count (1)."""
    mesh = tensorcore_mesh(T)
    pipeline, async_prefetch = T.emit_pipeline_with_async_prefetch(
        lambda x_ref, y_ref, o_ref: o_ref.__setitem__(..., x_ref[...] - y_ref[:, :BLOCK]),
        grid=(COLS // BLOCK,), mesh=mesh,
        in_specs=[Pl.BlockSpec((ROWS, BLOCK), lambda i: (0, i)),
                  Pl.BlockSpec((ROWS, 2 * BLOCK), lambda i: (0, 0),
                               pipeline_mode=Pl.Buffered(1, prefetched_count=2))],
        out_specs=Pl.BlockSpec((ROWS, BLOCK), lambda i: (0, i)))

    def program(x, y):
        allocations = async_prefetch(x, y)

        @functools.partial(Pl.kernel, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                           mesh=mesh, interpret=interpret)
        def kernel(x_hbm, y_hbm, o_hbm):
            pipeline(x_hbm, y_hbm, o_hbm, allocations=allocations)
        return kernel(x, y)
    return program


def test_whole_operand_block_may_prefetch_beyond_its_buffers_as_in_jax(aot_compile):
    from jax.experimental import pallas as jpl
    from jax.experimental.pallas import tpu as jpltpu
    x, y = _inputs()
    y = y[:, :2 * BLOCK]
    out = jax.jit(_whole_operand_program(pl, pltpu, interpret=pltpu.InterpretParams()))(x, y)
    want = x.astype(np.float64) - np.tile(y[:, :BLOCK].astype(np.float64), (1, COLS // BLOCK))
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-6, atol=1e-6)
    _, text = aot_compile(_whole_operand_program(pl, pltpu), jnp.asarray(x), jnp.asarray(y))
    assert "tpu_custom_call" in text
    skip_unless(JAX_PREFETCHES_WHOLE_OPERAND)     # ours compiled; now JAX's, where it can
    _, text = aot_compile(_whole_operand_program(jpl, jpltpu), jnp.asarray(x), jnp.asarray(y))
    assert "tpu_custom_call" in text


# --- refusals, as JAX's ------------------------------------------------------------------

def _pipeline(count=2, prefetched=1):
    mesh = pltpu.TensorCoreMesh(axis_name="core", num_cores=1)
    spec = pl.BlockSpec((8, 128), lambda i: (0, i),
                        pipeline_mode=pl.Buffered(count, prefetched_count=prefetched))
    return pltpu.emit_pipeline_with_async_prefetch(
        lambda x_ref, o_ref: None, grid=(2,), in_specs=[spec],
        out_specs=pl.BlockSpec((8, 128), lambda i: (0, i)), mesh=mesh)


def _run(pipeline, allocations, x):
    mesh = pltpu.TensorCoreMesh(axis_name="core", num_cores=1)

    @functools.partial(pl.kernel, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=mesh,
                       interpret=True)
    def kernel(x_hbm, o_hbm):
        pipeline(x_hbm, o_hbm, allocations=allocations)
    return kernel(x)


def test_prefetched_count_beyond_the_buffers_is_refused_before_the_kernel():
    _, async_prefetch = _pipeline(count=2, prefetched=3)
    with pytest.raises(ValueError, match="prefetched_count=3 exceeds the 2 input buffers"):
        async_prefetch(jnp.zeros((8, 256), jnp.float32))


def test_prefetched_pipeline_without_the_prefetch_is_refused():
    pipeline, _ = _pipeline()
    with pytest.raises(ValueError, match="window_ref is None"):
        _run(pipeline, None, jnp.zeros((8, 256), jnp.float32))


def test_allocations_of_another_pipeline_are_refused():
    pipeline, _ = _pipeline()
    _, other_prefetch = _pipeline()
    x = jnp.zeros((8, 256), jnp.float32)
    with pytest.raises(ValueError, match="exactly what this pipeline's async_prefetch returned"):
        _run(pipeline, other_prefetch(x), x)


def test_inputs_must_match_in_specs():
    _, async_prefetch = _pipeline()
    x = jnp.zeros((8, 256), jnp.float32)
    with pytest.raises(ValueError, match="inputs must match in_specs"):
        async_prefetch(x, x)


def test_mesh_is_required_to_be_a_core_mesh():
    with pytest.raises(TypeError, match="mesh must be a core mesh"):
        pltpu.emit_pipeline_with_async_prefetch(lambda *r: None, grid=(1,), mesh="core")

