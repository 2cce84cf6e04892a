"""Probe: what could block forever must end, with an error or a result, within
the time limit. Each case runs in its own subprocess. Defect 10 of issue 24
(the plugin-import half is tested with a blocking fake plugin in
tests/test_plugin_import_timeout.py)."""

import jax
import jax.numpy as jnp

import pallas_frontend as pl
from probes.common import TPU_ENV, Case

F32 = jnp.float32
SHAPE = (8, 128)


def _tpu_call(kernel, scratch):
    import pallas_tpu as pltpu
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(SHAPE, F32),
                          scratch_shapes=scratch, interpret=pltpu.InterpretParams())


def tpu_regular_deadlock(rng):
    import pallas_tpu as pltpu

    def k_wait_regular(x_ref, o_ref, sem):
        pl.semaphore_wait(sem, 2)
        o_ref[...] = x_ref[...]
    x = jnp.asarray(rng.standard_normal(SHAPE), F32)
    return (lambda: _tpu_call(k_wait_regular, [pltpu.SemaphoreType.REGULAR])(x)), None


def tpu_dma_deadlock(rng):
    import pallas_tpu as pltpu

    def k_wait_dma(x_ref, o_ref):
        def body(sem):
            pltpu.make_async_copy(x_ref, o_ref, sem).wait()
        pl.run_scoped(body, pltpu.SemaphoreType.DMA)
    x = jnp.asarray(rng.standard_normal(SHAPE), F32)
    return (lambda: _tpu_call(k_wait_dma, [])(x)), None


def tpu_dma_completes(rng):
    import pallas_tpu as pltpu

    def k_dma_ok(x_ref, o_ref, sem):
        copy = pltpu.make_async_copy(x_ref, o_ref, sem)
        copy.start()
        copy.wait()
    x = jnp.asarray(rng.standard_normal(SHAPE), F32)
    return (lambda: _tpu_call(k_dma_ok, [pltpu.SemaphoreType.DMA])(x)), x


def builtin_deadlock(rng):
    import pallas_tpu as pltpu

    def k_wait_builtin(x_ref, o_ref, sem):
        pl.semaphore_wait(sem, 1)
        o_ref[...] = x_ref[...]
    x = jnp.asarray(rng.standard_normal(SHAPE), F32)
    f = pl.pallas_call(k_wait_builtin, out_shape=jax.ShapeDtypeStruct(SHAPE, F32),
                       scratch_shapes=[pltpu.SemaphoreType.REGULAR], interpret=True)
    return (lambda: f(x)), None


def backends_listing(rng):
    return (lambda: sorted(pl.backends())), (lambda got: "interpret" in got)


CASES = [
    Case("tpu_regular_deadlock", tpu_regular_deadlock, ("k_wait_regular", "scratch_shapes[0]"),
         expect_error=True, needs="pallas_tpu", env=TPU_ENV, timeout=120, defect=10),
    Case("tpu_dma_deadlock", tpu_dma_deadlock, ("k_wait_dma", "run_scoped"), expect_error=True,
         needs="pallas_tpu", env=TPU_ENV, timeout=120, defect=10),
    Case("tpu_dma_completes", tpu_dma_completes, ("k_dma_ok",), needs="pallas_tpu", env=TPU_ENV,
         timeout=120),
    Case("builtin_deadlock", builtin_deadlock, ("k_wait_builtin",), expect_error=True,
         needs="pallas_tpu", subprocess=True, defect=10),
    Case("backends_listing", backends_listing, (), subprocess=True, timeout=120, defect=10),
]
