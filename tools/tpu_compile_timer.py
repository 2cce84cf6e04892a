"""pytest plugin (``-p tpu_compile_timer``): what a TPU host spends before a
test's kernels run, measured on a host without one. Each ``jax.jit`` call a
test file makes (``*_test.py``, ``test_*.py``) is traced, lowered and compiled
device-less for one v5e chip (libtpu), never run; the call returns zeros of
its result's shape, so value checks mean nothing here: only the times count.

- ``TPU_COMPILE_TIMER_LOG``: a JSON-lines file, one line per jit call (test,
  function, trace/lower/compile seconds, whether libtpu compiled it);
- JAX's TPU queries answer for a v5e (tools/tpu_cpu_plugin.py), as on the chip.

Run it on both copies of a suite file (tools/jax_suite.py) to compare ours'
compile path with JAX's, e.g. from ``.tpu-native/suite/ours``:
``PYTHONPATH=TOOLS:. PALLAS_JAX_SUITE_TARGET=ours JAX_PLATFORMS=cpu
TPU_COMPILE_TIMER_LOG=/tmp/ours.jsonl python -m pytest -p tpu_compile_timer FILE``.
"""

from __future__ import annotations

import json
import os
import sys
import time

from tpu_cpu_plugin import answer_as_chip, answer_tpu_info

_test = {"id": None}


def _from_test_file(frame) -> bool:
    name = os.path.basename(frame.f_code.co_filename)
    return name.endswith("_test.py") or name.startswith("test_")


class _CompileOnly:
    """A jitted function whose calls compile for the chip instead of running."""

    def __init__(self, jitted, fn):
        self._jitted, self._name = jitted, getattr(fn, "__name__", repr(fn))

    def __getattr__(self, name):
        return getattr(self._jitted, name)

    def __call__(self, *args, **kwargs):
        import jax
        import numpy as np
        from jax.sharding import NamedSharding, PartitionSpec
        from pallas_tpu.aot import topology_mesh
        if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((args, kwargs))):
            return self._jitted(*args, **kwargs)     # inside another traced function
        mesh = topology_mesh()
        on_chip = NamedSharding(mesh, PartitionSpec())
        spec = lambda a: (jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=on_chip)
                          if isinstance(a, (jax.Array, np.ndarray)) else a)
        args, kwargs = jax.tree.map(spec, (args, kwargs))
        record = {"test": _test["id"], "fn": self._name}
        with jax.set_mesh(mesh):
            t0 = time.perf_counter()
            traced = self._jitted.trace(*args, **kwargs)
            t1 = time.perf_counter()
            lowered = traced.lower()
            t2 = time.perf_counter()
            try:
                lowered.compile()
                record["compiled"] = True
            except Exception as e:  # the record says why; the test goes on
                record["compiled"] = False
                record["error"] = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
            t3 = time.perf_counter()
        record.update(trace=round(t1 - t0, 4), lower=round(t2 - t1, 4), compile=round(t3 - t2, 4))
        if path := os.environ.get("TPU_COMPILE_TIMER_LOG"):
            with open(path, "a") as f:
                f.write(json.dumps(record) + "\n")
        return jax.tree.map(lambda a: np.zeros(a.shape, a.dtype), traced.out_info)


def pytest_configure(config):
    import jax
    answer_as_chip("v5e")
    answer_tpu_info("v5e")
    real_jit = jax.jit

    def jit(fn=None, /, **kw):
        if fn is None:                     # @jax.jit(static_argnums=...)
            return lambda f: jit(f, **kw)
        jitted = real_jit(fn, **kw)
        # only the test file's own calls: JAX and ours jit helpers of their own
        return _CompileOnly(jitted, fn) if _from_test_file(sys._getframe(1)) else jitted
    jax.jit = jit


def pytest_runtest_setup(item):
    _test["id"] = item.nodeid.split("::", 1)[-1]
