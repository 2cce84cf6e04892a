"""A semaphore Ref's ``dtype`` is JAX's semaphore dtype of its kind, so JAX's
``jnp.issubdtype(sem.dtype, pltpu.dma_semaphore)`` / ``pl.semaphore`` tell the
kinds apart (JAX's test_can_allocate_scratch_semaphore_array, lost on the v5e:
"module 'pallas_tpu' has no attribute 'dma_semaphore'"), while what is stored
stays int32. ``out_shape=pltpu.SemaphoreType.DMA`` is one semaphore, as
``DMA(())`` (JAX's test_output_dma_semaphore_ref)."""

import importlib.util
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as jax_pl
from jax.experimental.pallas import tpu as jax_pltpu

import pallas_frontend as pl
import pallas_tpu as pltpu

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))
import sc_mosaic_text  # noqa: E402

ANY = pl.BlockSpec(memory_space=pl.ANY)


def test_the_names_are_jaxs_classes():
    assert pltpu.dma_semaphore is jax_pltpu.dma_semaphore
    assert pl.semaphore is jax_pl.semaphore


@pytest.mark.parametrize("interpret", [True, pltpu.InterpretParams()], ids=["builtin", "tpu"])
def test_scratch_semaphores_tell_their_kind_and_still_count(interpret):
    seen = {}

    def kernel(x_ref, o_ref, dma_sems, sems, buf):
        seen["shapes"] = (dma_sems.shape, sems.shape)
        seen["dtypes"] = [(jnp.issubdtype(s.dtype, pltpu.dma_semaphore),
                           jnp.issubdtype(s.dtype, pl.semaphore)) for s in (dma_sems, sems)]
        # they still work: a DMA on dma_sems[2], a count on sems[1]
        pltpu.async_copy(x_ref, buf, dma_sems.at[2]).wait()
        pl.semaphore_signal(sems.at[1], 3)
        pl.semaphore_wait(sems.at[1], 3)
        o_ref[...] = buf[...] * 2.0

    x = np.random.default_rng().standard_normal((8, 128)).astype(np.float32)
    got = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32), in_specs=[ANY],
        scratch_shapes=[pltpu.SemaphoreType.DMA((4,)), pltpu.SemaphoreType.REGULAR((3,)),
                        pltpu.VMEM((8, 128), jnp.float32)], interpret=interpret)(x)
    np.testing.assert_array_equal(np.asarray(got), 2.0 * x.astype(np.float64))
    assert seen["shapes"] == ((4,), (3,))
    assert seen["dtypes"] == [(True, False), (False, True)]


def test_the_stored_type_stays_int32():
    aval = pltpu.SemaphoreType.DMA((2,)).get_ref_aval()
    assert aval.inner_aval.dtype == jnp.int32 and aval.shape == (2,)
    assert jnp.issubdtype(aval.dtype, pltpu.dma_semaphore)
    # a view of it, or a retyped copy, keeps the kind
    assert jnp.issubdtype(aval.update(inner_aval=aval.inner_aval).dtype, pltpu.dma_semaphore)


def _start_then_finish(out_sem):
    """A DMA started in one kernel (which returns its semaphore, typed ``out_sem``)
    and awaited in the next (JAX's test_output_dma_semaphore_ref)."""
    def start(x_hbm, y_hbm, sem):
        pltpu.make_async_copy(x_hbm, y_hbm, sem).start()

    def finish(x_hbm, y_hbm, sem, y_out):
        del y_out
        pltpu.make_async_copy(x_hbm, y_hbm, sem).wait()

    def both(x):
        y, sem = pl.pallas_call(
            start, in_specs=[ANY], out_specs=[ANY, pl.BlockSpec(memory_space=pltpu.SEMAPHORE)],
            out_shape=[jax.ShapeDtypeStruct(x.shape, x.dtype), out_sem])(x)
        return pl.pallas_call(
            finish, in_specs=[ANY, ANY, pl.BlockSpec(memory_space=pltpu.SEMAPHORE)],
            out_specs=ANY, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
            input_output_aliases={1: 0})(x, y, sem), sem
    return both


def _result(both):
    return lambda x: both(x)[0]      # a semaphore leaves no jitted program


def test_a_semaphore_type_as_out_shape_is_one_semaphore():
    x = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    _, sem = jax.eval_shape(_start_then_finish(pltpu.SemaphoreType.DMA), x)
    _, sem_called = jax.eval_shape(_start_then_finish(pltpu.SemaphoreType.DMA(())), x)
    assert (sem.shape, sem.dtype) == (sem_called.shape, sem_called.dtype) == ((), jnp.int32)


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                    reason="compiling for a TPU topology needs libtpu")
def test_the_pair_compiles_for_v5e_as_with_a_called_type(aot_compile):
    # JAX's TPU interpret mode has no rule for a semaphore across calls
    # (test_semaphore_operands), so the pair is compiled, not run, here
    x = np.zeros((8, 128), np.float32)
    _, text = aot_compile(_result(_start_then_finish(pltpu.SemaphoreType.DMA)), x)
    _, called = aot_compile(_result(_start_then_finish(pltpu.SemaphoreType.DMA(()))), x)
    assert text.count("tpu_custom_call") == 2
    assert sc_mosaic_text.mosaic_modules(text) == sc_mosaic_text.mosaic_modules(called)
