"""``pl.enable_debug_checks`` is part of the trace context, and is JAX's own
``jax_pallas_enable_debug_checks`` switch (issue 24, defect 8): a function
jitted with checks off is traced again when they are turned on."""

import jax
import jax.experimental.pallas as jpl   # its pl.enable_debug_checks is the same switch
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
from conftest import rand


def _jitted():
    def kernel(x_ref, o_ref):
        pl.debug_check(jnp.all(x_ref[...] < 0), "values must be negative")
        o_ref[...] = x_ref[...]

    return jax.jit(lambda x: pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x))


@pytest.mark.parametrize("switch", ["pl", "jpl", "config"])
def test_checks_turned_on_after_an_outer_jit_traced(rng, switch):
    x = jnp.asarray(np.abs(rand(rng, 8)) + 1.0)
    f = _jitted()
    np.testing.assert_array_equal(f(x), x)            # traced with checks off
    if switch == "config":
        jax.config.update("jax_pallas_enable_debug_checks", True)
        try:
            with pytest.raises(Exception, match="values must be negative"):
                jax.block_until_ready(f(x))
        finally:
            jax.config.update("jax_pallas_enable_debug_checks", False)
    else:
        with (pl if switch == "pl" else jpl).enable_debug_checks(True):
            with pytest.raises(Exception, match="values must be negative"):
                jax.block_until_ready(f(x))
    np.testing.assert_array_equal(f(x), x)            # off again: the first trace is reused


def test_bare_call_sets_jax_switch_and_restores():
    assert not jax.config.jax_pallas_enable_debug_checks
    try:
        pl.enable_debug_checks(True)
        assert jax.config.jax_pallas_enable_debug_checks
        with pl.enable_debug_checks(False):
            assert not jax.config.jax_pallas_enable_debug_checks
            assert pl.enable_debug_checks.value is False
        assert pl.enable_debug_checks.value is True
    finally:
        pl.enable_debug_checks(False)
    assert pl.enable_debug_checks.value is False


def _oob_kernel(mod):
    def kern(i_ref, x, o):
        i = i_ref[0]
        o[...] = x[...] * 0.5
        o[0] = x[i]
        o[mod.ds(1, 4)] = x[mod.ds(i, 4)]
        o[mod.ds(i + 3, 4)] = x[mod.ds(0, 4)] * 3
    return kern


def _oob_call(mod, i, x):
    return mod.pallas_call(_oob_kernel(mod), out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                           interpret=True)(jnp.array([i], jnp.int32), x)


@pytest.mark.parametrize("i", [-17, -3, -1, 0, 13, 14, 16, 200])
def test_dynamic_out_of_block_index_with_checks_off_is_as_documented(rng, i):
    """docs/errors.md: the interpreter counts a negative index from the end,
    then clamps into the Ref -- as JAX's interpret=True does."""
    x = rand(rng, 16)
    got = np.asarray(_oob_call(pl, i, x))
    np.testing.assert_array_equal(got, _oob_call(jpl, i, x))
    n, j = 16, i + 16 if i < 0 else i
    want = x * 0.5
    want[0] = x[np.clip(j, 0, n - 1)]
    s = np.clip(j, 0, n - 4)
    want[1:5] = x[s:s + 4]
    j3 = i + 3 + n if i + 3 < 0 else i + 3
    s3 = np.clip(j3, 0, n - 4)
    want[s3:s3 + 4] = x[0:4] * 3
    np.testing.assert_array_equal(got, want)


def test_dynamic_out_of_block_index_with_checks_on_raises(rng):
    x = rand(rng, 16)
    with pl.enable_debug_checks(True):
        with pytest.raises(Exception, match="Out-of-range Ref access"):
            jax.block_until_ready(_oob_call(pl, 14, x))
        np.testing.assert_array_equal(_oob_call(pl, 3, x), _oob_call(jpl, 3, x))


# --- issue 32: `with pl.enable_debug_checks(...)` is this thread's alone ----------------

class _PausingSwitch:
    """JAX's switch, with the thread-local swap held until the main thread has
    looked: the window where the old code had already changed the global."""

    def __init__(self, state, reached, resume):
        self._state, self._reached, self._resume = state, reached, resume

    def swap_local(self, value):
        self._reached.set()
        self._resume.wait(10)
        return self._state.swap_local(value)

    def __getattr__(self, name):
        return getattr(self._state, name)


def test_with_block_in_another_thread_leaves_this_thread_alone(monkeypatch):
    import threading

    from pallas_frontend import _jax_compat as jc
    reached, resume, seen = threading.Event(), threading.Event(), []
    monkeypatch.setattr(jc, "debug_checks_state",
                        _PausingSwitch(jc.debug_checks_state, reached, resume))

    def other():
        with pl.enable_debug_checks(False):
            seen.append(pl.enable_debug_checks.value)
    try:
        pl.enable_debug_checks(True)
        t = threading.Thread(target=other)
        t.start()
        assert reached.wait(10)
        main_value = pl.enable_debug_checks.value     # the other thread is entering its block
        resume.set()
        t.join(10)
        assert main_value is True
        assert seen == [False]
        assert pl.enable_debug_checks.value is True
        assert jax.config.jax_pallas_enable_debug_checks
    finally:
        resume.set()
        monkeypatch.undo()
        pl.enable_debug_checks(False)


def test_many_threads_with_blocks_keep_main_checks_and_global(rng):
    import threading
    x = jnp.asarray(np.abs(rand(rng, 8)) + 1.0)      # positive: the check fails
    f = _jitted()
    stop, errors = threading.Event(), []

    def toggler():
        while not stop.is_set():
            with pl.enable_debug_checks(False):
                if pl.enable_debug_checks.value is not False:
                    errors.append("block value")
    try:
        pl.enable_debug_checks(True)
        threads = [threading.Thread(target=toggler) for _ in range(4)]
        for t in threads:
            t.start()
        try:
            for _ in range(40):
                with pytest.raises(Exception, match="values must be negative"):
                    jax.block_until_ready(f(x))
        finally:
            stop.set()
            for t in threads:
                t.join(10)
        assert not errors
        assert jax.config.jax_pallas_enable_debug_checks    # the global stays on
    finally:
        pl.enable_debug_checks(False)
    np.testing.assert_array_equal(f(x), x)
