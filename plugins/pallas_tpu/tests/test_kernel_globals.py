"""``pl.get_global`` lowered by the TPU backend: a VMEM accumulator and a
semaphore that persist across grid points, in TPU interpret mode against the
frontend's interpreter and NumPy, and AOT-compiled for v5e."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu
from pallas_tpu import aot

STEPS = 4


def running_sum(x, *, interpret=False, semantics=None):
    def kernel(x_ref, o_ref):
        acc = pl.get_global(pltpu.VMEM((8, 128), jnp.float32))
        sem = pl.get_global(pltpu.SemaphoreType.REGULAR)
        i = pl.program_id(0)

        @pl.when(i == 0)
        def _():
            acc[...] = jnp.zeros_like(acc)
        acc[...] += x_ref[...]
        o_ref[...] = acc[...]
        pl.semaphore_signal(sem, 1)

        @pl.when(i == STEPS - 1)
        def _():
            pl.semaphore_wait(sem, STEPS)   # satisfiable only if the semaphore persisted

    params = None if interpret is True else pltpu.CompilerParams(dimension_semantics=semantics)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(STEPS,), in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                          compiler_params=params, interpret=interpret)(x)


def test_get_global_persists_across_grid_points():
    x = np.random.default_rng().standard_normal((8 * STEPS, 128)).astype(np.float32)
    want = np.cumsum(x.reshape(STEPS, 8, 128).astype(np.float64), 0).reshape(x.shape)
    ours = running_sum(x, interpret=pltpu.InterpretParams())
    reference = running_sum(x, interpret=True)      # the frontend's interpreter
    np.testing.assert_allclose(np.asarray(ours), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(reference))


def test_get_global_aot_v5e():
    compiled = aot.compile_for_tpu(running_sum, jax.ShapeDtypeStruct((8 * STEPS, 128),
                                                                     jnp.float32))
    assert compiled is not None


@pytest.mark.parametrize("semantics", [("parallel",), ("core_parallel",)])
def test_get_global_on_a_split_grid_is_refused(semantics):
    x = np.zeros((8 * STEPS, 128), np.float32)
    with pytest.raises(NotImplementedError, match=r"pl.get_global in kernel 'kernel'.*"
                       rf"'{semantics[0]}' axes.*its own copy"):
        running_sum(x, interpret=pltpu.InterpretParams(), semantics=semantics)
