"""One jitted kernel called from several threads at once, each result checked
against NumPy: for a backend whose interpreter keeps a run's state in module
globals, as JAX's TPU and Mosaic GPU interpreters do (their runs take turns at
a ``backend_api.RunGate``; without it, overlapping runs gave wrong results and
internal errors, issue 32). Imports no pytest."""

from __future__ import annotations

import threading

import jax
import numpy as np

from pallas_frontend.testing import kernels


def check_calls_from_threads(*, threads: int = 6, calls: int = 3, timeout: float = 300.0,
                             **call) -> None:
    """Calls one jitted ``vector_add`` (built with the call options ``call``,
    e.g. ``interpret=pallas_tpu.InterpretParams()``) ``calls`` times from each
    of ``threads`` threads at once, on fresh random data per thread; raises
    ``AssertionError`` naming the thread and call on a hang, an error or a
    result off NumPy's float64 sum."""
    f = jax.jit(kernels.vector_add(n=256, block=128, **call))
    rng = np.random.default_rng()
    inputs = [tuple(rng.standard_normal(256).astype(np.float32) for _ in range(2))
              for _ in range(threads)]
    results = {}

    def work(k):
        for c in range(calls):
            try:
                results[k, c] = np.asarray(f(*inputs[k]))
            except Exception as e:      # reported below, with the others
                results[k, c] = e

    workers = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout)
    assert not any(w.is_alive() for w in workers), f"a thread hung (over {timeout} s)"
    for (k, c), out in sorted(results.items(), key=lambda kv: kv[0]):
        assert not isinstance(out, Exception), f"thread {k} call {c}: {out!r}"
        np.testing.assert_allclose(out, kernels.vector_add_ref(*inputs[k]), rtol=1e-6,
                                   err_msg=f"thread {k} call {c}")
    assert len(results) == threads * calls
