"""pl.autotune compiles its candidates ahead, several at a time
(pallas_frontend/autotune_compile.py): each keeps its own program or error,
and the default timer runs the loops compiled for it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
from pallas_frontend import autotune_compile, device_timing
from pallas_frontend.backend_base import Backend, default_seconds_per_call


def _scaled(scale):
    def call(x):
        if scale == 0:
            raise ValueError("scale 0 is refused")     # fails while tracing
        return x * scale + 1.0
    return call


def test_each_candidate_keeps_its_program_or_its_error():
    x = jnp.asarray(np.random.default_rng().standard_normal((64, 128)), jnp.float32)
    calls = [(_scaled(s), [x]) for s in (2.0, 0, 3.0, -1.5)]
    results = autotune_compile.compile_calls(calls)
    assert isinstance(results[1], ValueError) and "scale 0" in str(results[1])
    for s, program in zip((2.0, 3.0, -1.5), (results[0], results[2], results[3])):
        np.testing.assert_allclose(np.asarray(program(x)), np.asarray(x, np.float64) * s + 1.0,
                                   rtol=1e-6)


def test_the_default_timer_runs_the_loop_compiled_for_it(monkeypatch):
    x = jnp.asarray(np.random.default_rng().standard_normal((32, 128)), jnp.float32)
    call = _scaled(2.0)
    autotune_compile.prepare_timing_loops(default_seconds_per_call, [(call, [x])])
    assert call in device_timing._prepared
    built = []
    real = device_timing.device_loop
    monkeypatch.setattr(device_timing, "device_loop", lambda *a: built.append(1) or real(*a))
    assert device_timing.time_per_call(call, x, min_loop_seconds=0.001, repetitions=1).seconds > 0
    assert not built and call not in device_timing._prepared      # used once, then gone


def test_a_backend_with_its_own_timer_gets_no_loops():
    x = jnp.ones((8, 128), jnp.float32)
    call = _scaled(2.0)

    class OwnClock(Backend):
        name = "own_clock"

        def seconds_per_call(self, fn, args):
            return 1.0
    autotune_compile.prepare_timing_loops(OwnClock().seconds_per_call, [(call, [x])])
    assert call not in device_timing._prepared
    inherited = type("Inherited", (Backend,), {"name": "inherited"})()
    autotune_compile.prepare_timing_loops(inherited.seconds_per_call, [(call, [x])])
    assert call in device_timing._prepared
    device_timing._prepared.pop(call)


def test_a_measured_autotune_drops_a_wrong_candidate_and_times_the_rest():
    rng = np.random.default_rng()
    x = jnp.asarray(rng.standard_normal((16, 256)), jnp.float32)

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    def double(x, *, block):
        spec = pl.BlockSpec((16, block), lambda i: (0, i))
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(x.shape[1] // block,), in_specs=[spec], out_specs=spec,
                              interpret=True)(x)
    # block 96: the grid 256 // 96 leaves the output's last 64 columns unwritten
    tuned = pl.autotune(double, configs=[{"block": 128}, {"block": 96}, {"block": 256}],
                        name="test_autotune_compile.double", measure=True, cache=False)
    with pytest.warns(pl.UnwrittenOutputWarning):
        out = tuned(x)
    np.testing.assert_allclose(np.asarray(out), np.asarray(x, np.float64) * 2.0, rtol=1e-6)
    seconds = {t.config["block"]: t.seconds for t in tuned.trials[tuned.cache_key(x)]}
    assert seconds[96] is None and seconds[128] > 0 and seconds[256] > 0
