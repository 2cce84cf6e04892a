"""A DMA described (``make_async_copy``) and never started nor waited on logs
one ERROR naming the line that made it, as JAX's descriptor does (JAX's
test_unused_dma_descriptor_error); a used one logs nothing, and its copy lands."""

import gc
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu

ANY = pl.BlockSpec(memory_space=pl.ANY)


def _call(kernel):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                          in_specs=[ANY], out_specs=ANY,
                          scratch_shapes=[pltpu.SemaphoreType.DMA],
                          interpret=pltpu.InterpretParams())


def test_an_unused_descriptor_logs_one_error_naming_its_line(caplog):
    def kernel(x_ref, o_ref, sem):
        pltpu.make_async_copy(x_ref, o_ref, sem)       # forgotten .start()/.wait()
    line = kernel.__code__.co_firstlineno + 1
    x = np.zeros((8, 128), np.float32)
    with caplog.at_level(logging.ERROR):
        jax.block_until_ready(_call(kernel)(x))
        gc.collect()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in caplog.records]
    message = errors[0].getMessage()
    assert "AsyncCopyDescriptor was not used" in message
    assert f"test_dma_descriptor_use.py:{line}" in message


@pytest.mark.parametrize("how", ["make_start_wait", "async_copy"])
def test_a_used_descriptor_logs_nothing_and_copies(caplog, how):
    def kernel(x_ref, o_ref, sem):
        if how == "async_copy":
            pltpu.async_copy(x_ref, o_ref, sem).wait()
            return
        copy = pltpu.make_async_copy(x_ref, o_ref, sem)
        copy.start()
        copy.wait()
    x = np.random.default_rng().standard_normal((8, 128)).astype(np.float32)
    with caplog.at_level(logging.ERROR):
        got = _call(kernel)(x)
        gc.collect()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    np.testing.assert_array_equal(np.asarray(got), x)
