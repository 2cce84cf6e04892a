"""tools/tpu_compile_timer.py: a test file's jitted calls are compiled for a
v5e without a device (never run) and timed."""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[1] / "tools"

TEST_FILE = textwrap.dedent("""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import pallas_frontend as pl
    import pallas_tpu as pltpu

    def scaled_sum(x, y):
        def kernel(x_ref, y_ref, o_ref):
            o_ref[...] = x_ref[...] * 2.0 + y_ref[...]
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(kernel, grid=(x.shape[0] // 8,), in_specs=[spec, spec],
                              out_specs=spec, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              compiler_params=pltpu.CompilerParams())(x, y)

    def test_kernel():
        rng = np.random.default_rng()
        x, y = (rng.standard_normal((32, 128)).astype(np.float32) for _ in range(2))
        got = jax.jit(scaled_sum)(x, y)
        want = x.astype(np.float64) * 2.0 + y
        assert got.shape == want.shape
        # compiled only: zeros come back, never the kernel's values
        assert not np.allclose(got, want, atol=1e-5)
        assert not np.any(got)
""")


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="needs libtpu")
@pytest.mark.skipif(importlib.util.find_spec("absl") is None,
                    reason="JAX's test utilities need absl-py")
def test_timer_compiles_a_test_files_kernel_for_v5e_without_running_it(tmp_path):
    (tmp_path / "timed_test.py").write_text(TEST_FILE)
    log = tmp_path / "times.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TOOLS), os.environ.get("PYTHONPATH", "")]),
           "TPU_COMPILE_TIMER_LOG": str(log), "JAX_PLATFORMS": "cpu",
           "PALLAS_FRONTEND_BACKENDS": "tpu"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "tpu_compile_timer", "timed_test.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["test"], r["fn"], r["compiled"]) for r in records] == [
        ("test_kernel", "scaled_sum", True)]
    assert all(records[0][k] > 0 for k in ("trace", "lower", "compile"))
