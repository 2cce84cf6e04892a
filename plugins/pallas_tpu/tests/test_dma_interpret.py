"""Local DMAs under ``interpret=True`` (the frontend's reference interpreter):
the copies and semaphore counts of JAX's own ``interpret=True`` on the same
fresh random inputs, and NumPy for what JAX's does not run (``add=True``)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as jpl
from jax.experimental.pallas import tpu as jpltpu

import pallas_frontend as pl
import pallas_tpu as pltpu


def _copy_and_count(Pl, T, src_view, dst_view):
    """Copies src_view(x_ref) to dst_view(o_ref) and records the DMA
    semaphore after start and after wait."""
    def kernel(x_ref, o_ref, counts_ref, sems):
        o_ref[...] = jnp.zeros_like(o_ref)
        copy = T.make_async_copy(src_view(x_ref), dst_view(o_ref), sems.at[1])
        copy.start()
        counts_ref[0, :] = jnp.broadcast_to(Pl.semaphore_read(sems.at[1]), (128,))
        copy.wait()
        counts_ref[1, :] = jnp.broadcast_to(Pl.semaphore_read(sems.at[1]), (128,))
    return Pl.pallas_call(
        kernel, out_shape=(jax.ShapeDtypeStruct((32, 128), jnp.float32),
                           jax.ShapeDtypeStruct((2, 128), jnp.int32)),
        in_specs=[Pl.BlockSpec(memory_space=Pl.ANY)],
        scratch_shapes=[T.SemaphoreType.DMA(2)], interpret=True)


VIEWS = {   # name: (source view, destination view, the NumPy indices they mean)
    "whole": (lambda r: r, lambda r: r, np.s_[:], np.s_[:]),
    "rows": (lambda r: r.at[8:16], lambda r: r.at[16:24], np.s_[8:16], np.s_[16:24]),
    "row_of_rows": (lambda r: r.at[4:20].at[2], lambda r: r.at[5], np.s_[6], np.s_[5]),
    "strided": (lambda r: r.at[pl.ds(1, 8, 3)], lambda r: r.at[pl.ds(0, 8, 4)],
                np.s_[1:23:3], np.s_[0:29:4]),
}


@pytest.mark.parametrize("view", VIEWS)
def test_local_dma_matches_jax_interpret_true(view):
    src, dst, src_np, dst_np = VIEWS[view]
    x = np.random.default_rng().standard_normal((32, 128)).astype(np.float32)
    ours = _copy_and_count(pl, pltpu, src, dst)(x)
    theirs = _copy_and_count(jpl, jpltpu, src, dst)(x)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    want = np.zeros_like(x)
    want[dst_np] = x[src_np]
    np.testing.assert_array_equal(np.asarray(ours[0]), want)
    count = x[src_np].size
    np.testing.assert_array_equal(np.asarray(ours[1])[:, 0], [count, 0])


def test_local_dma_add_accumulates():
    def kernel(x_ref, o_ref, sem):
        o_ref[...] = jnp.ones_like(o_ref)
        pltpu.async_copy(x_ref.at[8:16], o_ref, sem, add=True).wait()
        pltpu.async_copy(x_ref.at[0:8], o_ref, sem, add=True).wait()
    x = np.random.default_rng().standard_normal((16, 128)).astype(np.float32)
    out = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                         in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                         scratch_shapes=[pltpu.SemaphoreType.DMA], interpret=True)(x)
    want = (np.float32(1.0) + x[8:]) + x[:8]      # float32, in the order of the copies
    np.testing.assert_array_equal(np.asarray(out), want)


def test_remote_dma_is_refused_by_the_reference_interpreter():
    def kernel(x_ref, o_ref, sems):
        pltpu.async_remote_copy(x_ref, o_ref, sems.at[0], sems.at[1], device_id=(0,)).wait()
    with pytest.raises(NotImplementedError, match="remote DMA.*InterpretParams"):
        pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                       in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                       out_specs=pl.BlockSpec(memory_space=pl.ANY),
                       scratch_shapes=[pltpu.SemaphoreType.DMA(2)],
                       interpret=True)(np.zeros((8, 128), np.float32))
