"""Issue 24 #10: a wait on a semaphore that nothing in the kernel signals.
JAX 0.12's TPU interpreter blocks in it forever; ours raises the
``SemaphoreDeadlockError`` of the frontend's interpreter before running,
naming the kernel, the semaphore and the wait's line. Kernels that do signal
(locally, in a loop, by a DMA) still run, checked against NumPy."""

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu

SHAPE = (8, 128)


def _call(kernel, scratch, interpret=None):
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(SHAPE, jnp.float32),
                          scratch_shapes=scratch,
                          interpret=pltpu.InterpretParams() if interpret is None else interpret)


def _x(seed):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(SHAPE), jnp.float32)


def unsignalled_wait(x_ref, o_ref, sem):
    pl.semaphore_wait(sem, 1)
    o_ref[...] = x_ref[...]


def test_regular_wait_without_signal_raises_like_the_builtin_interpreter():
    for interpret in (True, None):   # the built-in interpreter, then TPU interpret mode
        with pytest.raises(pl.SemaphoreDeadlockError) as err:
            _call(unsignalled_wait, [pltpu.SemaphoreType.REGULAR], interpret)(_x(0))
    msg = str(err.value)
    assert "unsignalled_wait" in msg and "scratch_shapes[0]" in msg
    assert f"{os.path.basename(__file__)}:" in msg.split("pl.semaphore_wait at ")[1]


def test_dma_wait_without_start_in_run_scoped_raises():
    def waits_for_no_copy(x_ref, o_ref):
        def body(sem):
            pltpu.make_async_copy(x_ref, o_ref, sem).wait()
        pl.run_scoped(body, pltpu.SemaphoreType.DMA)
    with pytest.raises(pl.SemaphoreDeadlockError, match="waits_for_no_copy.*run_scoped semaphore"):
        _call(waits_for_no_copy, [])(_x(1))


def test_signalled_waits_still_run():
    def signal_in_loop_then_wait(x_ref, o_ref, sem):
        def body(i, c):
            pl.semaphore_signal(sem, 1)
            return c
        jax.lax.fori_loop(0, 3, body, 0)
        pl.semaphore_wait(sem, 3)
        pl.semaphore_wait(sem, 0)
        o_ref[...] = x_ref[...] * 2.0

    def copies(x_ref, o_ref, sem):
        copy = pltpu.make_async_copy(x_ref, o_ref, sem)
        copy.start()
        copy.wait()
    x = _x(2)
    got = _call(signal_in_loop_then_wait, [pltpu.SemaphoreType.REGULAR])(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(x, np.float64) * 2.0, rtol=1e-6)
    got = _call(copies, [pltpu.SemaphoreType.DMA])(x)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(x))


def test_the_deadlock_ends_in_a_subprocess_instead_of_hanging():
    """The state before the fix was a hang: bounded here so it fails, not blocks."""
    script = textwrap.dedent("""
        import jax, jax.numpy as jnp
        import pallas_frontend as pl, pallas_tpu as pltpu
        def k(x_ref, o_ref, sem):
            pltpu.make_async_copy(x_ref, o_ref, sem).wait()
        f = pl.pallas_call(k, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                           scratch_shapes=[pltpu.SemaphoreType.DMA],
                           interpret=pltpu.InterpretParams())
        try:
            f(jnp.ones((8, 128)))
        except pl.SemaphoreDeadlockError as e:
            print("DEADLOCK-REPORTED", e)
    """)
    env = dict(os.environ, PALLAS_FRONTEND_BACKENDS="tpu")
    try:
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             timeout=180, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail("TPU interpret mode hung on a wait nothing signals")
    assert "DEADLOCK-REPORTED" in out.stdout, out.stderr[-2000:]
