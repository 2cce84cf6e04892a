"""TPU interpret mode from several threads: JAX's interpreter keeps one
process-global simulated memory, so overlapping runs of the same jitted call
gave wrong results and internal errors (issue 32). Runs are serialized."""

import threading

import jax
import jax.numpy as jnp
import numpy as np

import pallas_frontend as pl
import pallas_tpu


def _square_plus_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] * x_ref[...] + 1


def test_one_jitted_call_from_six_threads_matches_numpy():
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    f = jax.jit(pl.pallas_call(
        _square_plus_one, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
        grid=(2,), in_specs=[spec], out_specs=spec, interpret=pallas_tpu.InterpretParams()))
    rng = np.random.default_rng(32)
    xs = [rng.standard_normal((16, 128)).astype(np.float32) for _ in range(6)]
    results = {}

    def work(k):
        for call in range(3):
            try:
                results[k, call] = np.asarray(f(xs[k]))
            except Exception as e:      # reported below, with the others
                results[k, call] = e

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    for (k, call), out in sorted(results.items(), key=lambda kv: kv[0]):
        assert not isinstance(out, Exception), f"thread {k} call {call}: {out!r}"
        np.testing.assert_allclose(out, xs[k].astype(np.float64) ** 2 + 1, rtol=1e-6,
                                   err_msg=f"thread {k} call {call}")
    assert len(results) == 18
