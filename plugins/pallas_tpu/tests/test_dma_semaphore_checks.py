"""A DMA's semaphore, checked while the kernel is traced, as JAX checks it
(JAX's test_cannot_dma_with_nonscalar_semaphore_ref and
test_dma_wait_with_regular_semaphore_raises): one semaphore, not an array, and
``wait()`` on a DMA semaphore, not a regular one."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu

_ANY = pl.BlockSpec(memory_space=pl.ANY)


# the built-in interpreter, which raised nothing, and TPU interpret mode
INTERPRETERS = pytest.mark.parametrize("interpret", ["builtin", "tpu"])


def _run(body, *scratch, interpret="tpu"):
    def kernel(x_hbm, y_hbm):
        pl.run_scoped(lambda *refs: body(x_hbm, y_hbm, *refs), *scratch)
    x = jnp.asarray(np.random.default_rng().standard_normal((8, 128)), jnp.float32)
    params = pltpu.InterpretParams(chip_checks=False) if interpret == "tpu" else True
    y = pl.pallas_call(kernel, in_specs=[_ANY], out_specs=_ANY, interpret=params,
                       out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    return np.asarray(x), np.asarray(y)


@INTERPRETERS
def test_a_semaphore_array_cannot_be_signalled(interpret):
    def body(x, y, sems):
        pltpu.async_copy(x, y, sems).wait()
    with pytest.raises(ValueError, match=r"Cannot signal a semaphore array of shape \(1,\).*"
                                         r"sem\.at\[i\]"):
        _run(body, pltpu.SemaphoreType.DMA((1,)), interpret=interpret)


@INTERPRETERS
def test_one_semaphore_of_an_array_is_signalled(interpret):
    def body(x, y, sems):
        pltpu.async_copy(x, y, sems.at[1]).wait()
    x, y = _run(body, pltpu.SemaphoreType.DMA((2,)), interpret=interpret)
    np.testing.assert_array_equal(y, x)


@INTERPRETERS
def test_dma_wait_on_a_regular_semaphore_is_refused(interpret):
    def body(x, y, tmp, sem):
        pltpu.async_copy(x, tmp, sem).wait()
        y[...] = tmp[...]       # not reached
    with pytest.raises(ValueError, match=r"REGULAR.*pl\.semaphore_wait\(\)"):
        _run(body, pltpu.VMEM((8, 128), jnp.float32), pltpu.SemaphoreType.REGULAR,
             interpret=interpret)


def test_remote_copy_semaphores_are_checked_too():
    def body(x, y, send, recv):
        pltpu.make_async_remote_copy(x, y, send, recv, device_id=(0,)).start()
    with pytest.raises(ValueError, match=r"Cannot signal a semaphore array of shape \(2,\)"):
        _run(body, pltpu.SemaphoreType.DMA((2,)), pltpu.SemaphoreType.DMA)
