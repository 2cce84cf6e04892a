"""Kernel jaxprs print DMAs and semaphore signals/waits on one line, in JAX's
notation (``dma_start(p0) a[b,:,:] -> c[...] d[...]``, ``semaphore_signal
a[...] 1:i32[] {x: (b, c)}``): each body is traced under ours and under JAX's
Pallas over the same operands, and the equation lines must be equal (JAX
0.10.2's PrettyPrintingTest matches them)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import api_util, linear_util as lu, state   # as JAX's test traces
from jax._src.interpreters import partial_eval as pe
from jax.experimental import pallas as jax_pl
from jax.experimental.pallas import tpu as jax_pltpu

import pallas_frontend as pl
import pallas_tpu as pltpu

LIBS = {"ours": (pl, pltpu), "jax": (jax_pl, jax_pltpu)}


def _lines(body, avals):
    dbg = api_util.debug_info("pretty_printing_test", body, (0,) * len(avals), {})
    jaxpr, _, _ = pe.trace_to_jaxpr_dynamic(lu.wrap_init(body, debug_info=dbg), avals)
    text = jaxpr.pretty_print(use_color=False)
    return [ln.strip() for ln in text.splitlines()[1:-1]]     # the equations


def _dma_avals(tpu):
    return [state.shaped_array_ref((2, 8, 128), jnp.float32),
            _vmem_aval(tpu),
            tpu.SemaphoreType.DMA.get_ref_aval(), jax.core.ShapedArray((), jnp.int32)]


def _vmem_aval(tpu):
    if tpu is jax_pltpu:
        return tpu.VMEM((8, 128), jnp.float32).get_ref_aval()
    return state.AbstractRef(jax.core.ShapedArray((8, 128), jnp.float32), memory_space=tpu.VMEM)


INDEXERS = [lambda lib, i: (i, lib.ds(0, 8), lib.ds(0, 128)),
            lambda lib, i: (0, lib.ds(i, 8), lib.ds(0, 128)),
            lambda lib, i: (i, lib.ds(2, 4), lib.ds(0, 100)),
            lambda lib, i: (i, lib.ds(2, 6), lib.ds(4, 100))]


@pytest.mark.parametrize("which", range(len(INDEXERS)))
@pytest.mark.parametrize("priority, add", [(0, False), (1, False), (0, True)])
def test_local_dma_lines_are_jaxs(which, priority, add):
    def lines(name):
        lib, tpu = LIBS[name]

        def body(hbm, vmem, sem, i):
            view = hbm.at[INDEXERS[which](lib, i)]
            if which >= 2:        # a window smaller than the buffer: view both sides
                vmem = vmem.at[lib.ds(2, view.shape[0]), lib.ds(0, view.shape[1])]
            tpu.async_copy(view, vmem, sem, priority=priority, add=add).wait()
            return []
        return [ln for ln in _lines(body, _dma_avals(tpu)) if ln.startswith("dma_")]
    ours = lines("ours")
    assert ours == lines("jax")
    assert len(ours) == 2 and ours[0].startswith(
        f"dma_start(p{priority}{', add' if add else ''}) a[")


SIGNALS = [lambda sem, i: {"x": i}, lambda sem, i: (i, i + 1), lambda sem, i: i,
           lambda sem, i: {"x": (i, i + 1)}, lambda sem, i: None,
           lambda sem, i: [i, 2 * i]]


@pytest.mark.parametrize("device_id", range(len(SIGNALS)))
def test_semaphore_signal_lines_are_jaxs(device_id):
    inc = int(np.random.default_rng().integers(1, 9))

    def lines(name):
        lib, tpu = LIBS[name]

        def body(sem, i):
            lib.semaphore_signal(sem, inc, device_id=SIGNALS[device_id](sem, i))
            return []
        return _lines(body, [tpu.SemaphoreType.REGULAR.get_ref_aval(),
                             jax.core.ShapedArray((), jnp.int32)])
    ours = lines("ours")
    assert ours == lines("jax")
    assert re.search(rf"^semaphore_signal a\[\.\.\.\] {inc}:i32\[\]", ours[-1])


def test_semaphore_wait_lines():
    def lines(name, decrement):
        lib, tpu = LIBS[name]

        def body(sems, i):
            lib.semaphore_wait(sems.at[i], 3, decrement=decrement)
            return []
        return _lines(body, [tpu.SemaphoreType.REGULAR((4,)).get_ref_aval(),
                             jax.core.ShapedArray((), jnp.int32)])
    assert lines("ours", True) == lines("jax", True) == ["semaphore_wait[dec] a[b] 3:i32[]"]
    # JAX 0.10-0.12 print [dec] for decrement=False too (they test an operand's truth)
    assert lines("ours", False) == ["semaphore_wait a[b] 3:i32[]"]


def test_remote_copy_keeps_the_generic_form():
    def body(hbm, vmem, sem, i):
        pltpu.make_async_remote_copy(hbm.at[0], vmem, sem, sem, device_id=(i,)).start()
        return []
    text = "\n".join(_lines(body, _dma_avals(pltpu)))
    assert "tpu_dma_start[" in text and "dma_start(p" not in text
