"""Issue 39 #4: errors a user can act on. The frontend's and the plugins' frames
leave tracebacks as JAX's own do (the kernel's line stays); a Python ``if`` on a
traced value names the kernel's line and the fix; a TPU-only primitive on another
backend names the user's line, the backend running it, and advice that works."""

import os
import traceback

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
from pallas_frontend.backend_api import BackendCapabilityError

FRONTEND = os.path.dirname(pl.__file__) + os.sep
HERE = os.path.abspath(__file__)


def _x():
    return jnp.asarray(np.random.default_rng(3).standard_normal(8), jnp.float32)


def _line_of(fn, text):
    import inspect
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, ln in enumerate(lines) if text in ln)


def _frames(exc):
    return [(f.filename, f.lineno) for f in traceback.extract_tb(exc.__traceback__)]


def broadcast_bug(x_ref, o_ref):
    o_ref[...] = x_ref[...] + jnp.ones((3,), jnp.float32)


def _raised(call):
    try:
        call()
    except Exception as e:   # noqa: BLE001 - the test reads what was raised
        return e
    raise AssertionError("no error")


def test_traceback_shows_no_frontend_frame_and_keeps_the_kernel_line():
    out = jax.ShapeDtypeStruct((8,), jnp.float32)
    ours = _raised(lambda: pl.pallas_call(broadcast_bug, out_shape=out)(_x()))
    frames = _frames(ours)
    assert not [f for f in frames if f[0].startswith(FRONTEND)], frames
    assert (HERE, _line_of(broadcast_bug, "jnp.ones")) in frames
    # JAX's Pallas on the same mistake: ours shows no more frames than JAX's
    from jax.experimental import pallas as jpl
    theirs = _raised(lambda: jpl.pallas_call(broadcast_bug, out_shape=out, interpret=True)(_x()))
    assert type(ours) is type(theirs)
    assert len(frames) <= len(_frames(theirs)), (frames, _frames(theirs))


def test_a_bad_spec_is_reported_from_the_call_line_alone():
    f = pl.pallas_call(broadcast_bug, out_shape=jax.ShapeDtypeStruct((8,), jnp.float32),
                       grid=(2,), in_specs=[pl.BlockSpec((4,), lambda i: (i, 0))])
    err = _raised(lambda: f(_x()))
    assert [fr for fr in _frames(err) if fr[0].startswith(FRONTEND)] == []
    assert "test_errors_actionable.py" in str(err)


def branches_on_a_value(x_ref, o_ref):
    if x_ref[0] > 0:
        o_ref[...] = x_ref[...]
    else:
        o_ref[...] = -x_ref[...]


@pytest.mark.parametrize("grid", [(), (2,)])
def test_python_if_on_a_traced_value_names_the_line_and_the_fix(grid):
    spec = dict(grid=grid, in_specs=[pl.BlockSpec((4,), lambda i: (i,))],
                out_specs=pl.BlockSpec((4,), lambda i: (i,))) if grid else {}
    f = pl.pallas_call(branches_on_a_value, out_shape=jax.ShapeDtypeStruct((8,), jnp.float32),
                       **spec)
    with pytest.raises(jax.errors.TracerBoolConversionError) as err:
        f(_x())
    msg = str(err.value)
    line = _line_of(branches_on_a_value, "if x_ref[0] > 0")
    assert msg.startswith(f"At {HERE}:{line} (`if x_ref[0] > 0:`)"), msg
    assert "jax.lax.cond" in msg and "pl.when" in msg
    assert "tracing.py" not in msg and "flat[" not in msg
    assert "function branches_on_a_value at" in msg and "argument x_ref" in msg
    assert not [f for f in _frames(err.value) if f[0].startswith(FRONTEND)]


def test_the_advised_when_runs():
    def kernel(x_ref, o_ref):
        o_ref[...] = -x_ref[...]

        @pl.when(x_ref[0] > 0)
        def _():
            o_ref[...] = x_ref[...]
    x = _x()
    got = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8,), jnp.float32))(x)
    want = np.asarray(x, np.float64) * (1 if float(x[0]) > 0 else -1)
    np.testing.assert_allclose(np.asarray(got), want, rtol=0)


def seeds(x_ref, o_ref):
    import pallas_tpu as pltpu
    pltpu.prng_seed(0)
    o_ref[...] = x_ref[...]


def copies(x_ref, o_ref):
    import pallas_tpu as pltpu
    pltpu.sync_copy(x_ref, o_ref)


@pytest.mark.parametrize("kernel,text,backend,prim", [
    (seeds, "prng_seed(0)", "interpret", "tpu_prng_seed"),
    (copies, "sync_copy(x_ref", "triton", "tpu_dma_start"),
])
def test_tpu_primitive_elsewhere_names_the_users_line_and_advice_that_works(
        kernel, text, backend, prim):
    pltpu = pytest.importorskip("pallas_tpu")
    kw = {}
    if backend == "triton":
        kw["interpret"] = pytest.importorskip("pallas_triton").InterpretParams()
    out = jax.ShapeDtypeStruct((8,), jnp.float32)
    with pytest.raises(BackendCapabilityError) as err:
        pl.pallas_call(kernel, out_shape=out, **kw)(_x())
    msg = str(err.value)
    assert f"'{prim}' of backend 'tpu' at {HERE}:{_line_of(kernel, text)}," in msg, msg
    assert f"which backend '{backend}' (the one running this kernel)" in msg
    assert "primitives.py" not in msg
    assert "interpret=pallas_tpu.InterpretParams()" in msg
    assert "compiler_params=pallas_tpu.CompilerParams(...)" in msg and "On a TPU machine" in msg
    assert not [f for f in _frames(err.value) if "pallas_tpu" + os.sep in f[0]]
    x = _x()    # the advice for this machine runs the kernel
    got = pl.pallas_call(kernel, out_shape=out, interpret=pltpu.InterpretParams())(x)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(x))


def scoped_copies(x_ref, o_ref):
    import pallas_tpu as pltpu

    def body(sem):
        pltpu.async_copy(x_ref, o_ref, sem).wait()
    pl.run_scoped(body, pltpu.SemaphoreType.DMA)


def looped_copies(x_ref, o_ref):
    import pallas_tpu as pltpu

    @pl.loop(0, 2)
    def _(i):
        pltpu.sync_copy(x_ref, o_ref)


@pytest.mark.parametrize("kernel,text", [
    (scoped_copies, "async_copy(x_ref"),      # the user's own scope: its inner line
    (looped_copies, "sync_copy(x_ref"),       # a library scope inside the user's loop
])
def test_a_primitive_in_a_scope_is_named_at_the_users_line(kernel, text):
    # JAX cuts a nested body's tracebacks at its trace: sync_copy's own scope
    # held no user frame, and the message fell back to the kernel's def line.
    pytest.importorskip("pallas_tpu")
    triton = pytest.importorskip("pallas_triton")
    with pytest.raises(BackendCapabilityError) as err:
        pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8,), jnp.float32),
                       interpret=triton.InterpretParams())(_x())
    assert f"'tpu_dma_start' of backend 'tpu' at {HERE}:{_line_of(kernel, text)}," \
        in str(err.value), str(err.value)
