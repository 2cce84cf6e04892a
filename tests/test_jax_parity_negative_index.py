"""A static negative Ref index counts from the end, as NumPy and JAX do: JAX's
own test (indexing_test.py::IndexerOpsInterpretTest::
test_multi_indexing_interpreter_only) run from JAX's file with only the Pallas
imports swapped, and a kernel compared with JAX's interpret mode."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import pallas_frontend as pl
from jax.experimental import pallas as jax_pl

ROOT = Path(__file__).resolve().parents[1]
# a JAX source checkout or bare clone (as tools/jax_suite.py --jax-src takes)
JAX_SRC = Path(os.environ.get("PALLAS_JAX_SRC", "/nonexistent"))
sys.path.insert(0, str(ROOT / "tools"))
import jax_suite  # noqa: E402


def _kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]
    o_ref[-1, :] = x_ref[-2, :] * 2 + x_ref[:, -1][-3]
    o_ref[:, -128] = x_ref[-8, :8]  # dim 1: 128 - 128 = 0


@pytest.mark.parametrize("grid", [(), (2,)])
def test_negative_static_indices_match_jax_interpret(grid):
    x = np.random.default_rng().standard_normal((16, 128)).astype(np.float32)

    def call(lib, **kw):
        spec = lib.BlockSpec((8, 128), lambda *i: (i[0] if i else 0, 0))
        return np.asarray(lib.pallas_call(
            _kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=grid or (2,),
            in_specs=[spec], out_specs=spec, **kw)(x))
    want = call(jax_pl, interpret=True)
    np.testing.assert_array_equal(call(pl), want)
    np.testing.assert_array_equal(call(pl, interpret=True), want)
    blocks = x.astype(np.float64).reshape(2, 8, 128).copy()
    ref = blocks.copy()
    ref[:, -1, :] = blocks[:, -2, :] * 2 + blocks[:, -3, -1][:, None]
    ref[:, :, 0] = blocks[:, -8, :8]
    np.testing.assert_allclose(want, ref.reshape(16, 128), rtol=1e-6)


def _jax_test_env() -> dict[str, str]:
    # JAX's test case asserts that a test leaves the compilation cache as it found it:
    # tox's persistent-cache variables would make the first compile create one.
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    return {**env, "JAX_PLATFORMS": "cpu"}


@pytest.mark.skipif(not JAX_SRC.exists(), reason="needs JAX's source (tests/pallas): set "
                    "PALLAS_JAX_SRC to a checkout or bare clone of jax")
def test_jax_indexing_test_multi_indexing_interpreter_only(tmp_path):
    src = jax_suite.read_tests(JAX_SRC, "HEAD", "indexing_test.py")
    skewed = [m for m in jax_suite.SKEW_SHIMS if not jax_suite._module_exists(m)]
    (tmp_path / "indexing_test.py").write_text(jax_suite.make_copy(src, True, skewed))
    for m in skewed:
        shim = jax_suite.SHIMS / f"{jax_suite.SKEW_SHIMS[m]}.py"
        (tmp_path / shim.name).write_text(shim.read_text())
    test = "indexing_test.py::IndexerOpsInterpretTest::test_multi_indexing_interpreter_only"
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-q", test],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env=_jax_test_env())
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]
