"""The compile-only columns of docs/jax-ops.md, in CI: JAX's shipped kernels
(only the Pallas imports swapped) lowered and compiled for devices this
machine lacks, wherever JAX's own file does the same here.

- Mosaic GPU kernels lowered for cuda under an abstract H100 (no CUDA plugin
  needed): in process.
- TPU kernels AOT-compiled for v5e (libtpu) and, where the XLA:GPU compiler is
  installed (tox envs *-cuda-aot), GPU kernels compiled device-less for H100:
  through ``tools/jax_ops_aot.py``'s worker processes, one small shape each.
Select with ``-m jax_ops``; the full table is ``python tools/jax_ops.py``.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pallas_tpu")
pytest.importorskip("pallas_mgpu")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import jax_ops_aot  # noqa: E402
import jax_ops_cases  # noqa: E402

pytestmark = pytest.mark.jax_ops

# Cells where JAX compiles and ours does not (yet), with the cause and owner; each must
# come out of this list the day it compiles.
KNOWN_AOT: dict[str, str] = {}


class _Device:
    """What a case's call is given for a device target (its kinds need no mesh)."""


def _lower_for_h100(case, ours: bool, rng) -> str:
    import jax

    from jax_ops_copy import jax_ops, ours_ops
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        mod = ours_ops().load(case.module) if ours else jax_ops(case.module)
    args = case.inputs(rng, "small")
    structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in args]
    h100 = jax.sharding.AbstractMesh(
        (), (), abstract_device=jax.sharding.AbstractDevice("NVIDIA H100 80GB HBM3", 132, "cuda"))
    with jax.sharding.use_abstract_mesh(h100):     # the GPU the kernels size themselves for
        lowered = jax.jit(lambda *xs: case.call(mod, xs, _Device())).trace(*structs).lower(
            lowering_platforms=("cuda",))
    return lowered.as_text()


@pytest.mark.parametrize("case", jax_ops_cases.MGPU_CASES, ids=lambda c: c.name)
def test_mosaic_gpu_kernel_lowers_for_cuda_as_under_jax(case, rng):
    try:
        _lower_for_h100(case, False, rng)
    except Exception as e:  # noqa: BLE001  (JAX's own file does not lower here)
        pytest.skip(f"JAX's own file does not lower here: {type(e).__name__}: {e}"[:300])
    text = _lower_for_h100(case, True, rng)
    assert "mosaic_gpu" in text


def _targets():
    out = [pytest.param("v5e", marks=pytest.mark.skipif(
        importlib.util.find_spec("libtpu") is None, reason="needs libtpu"))]
    cuda = importlib.util.find_spec("jax_cuda12_plugin") is not None
    out.append(pytest.param("H100", marks=pytest.mark.skipif(
        not cuda, reason="needs jax-cuda12-plugin/pjrt (tox -e triton-cuda-aot)")))
    return out


@pytest.mark.parametrize("target", _targets())
def test_kernels_compile_for_target_as_under_jax(target, monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    cases = [c for c in jax_ops_cases.CASES if c.kind in jax_ops_aot.TARGETS[target][1]]
    cells = jax_ops_aot.compile_columns(cases, ["small"], [target], jobs=2)[target]
    lost = {json.loads(k)[0]: c["ours"].get("error") for k, c in cells.items()
            if c["jax"]["status"] == "ok" and c["ours"]["status"] != "ok"}
    known = {name for name in KNOWN_AOT if any(
        json.loads(k)[0] == name and c["jax"]["status"] == "ok" for k, c in cells.items())}
    assert set(lost) - known == set(), lost
    assert known <= set(lost), f"now compiled, remove from KNOWN_AOT: {known - set(lost)}"
    assert sum(c["jax"]["status"] == "ok" for c in cells.values()) > 0
    kernels = [(c["jax"]["kernels"], c["ours"]["kernels"]) for c in cells.values()
               if c["jax"]["status"] == "ok" and c["ours"]["status"] == "ok"]
    assert all(o > 0 for _, o in kernels)
    assert np.all([j == o for j, o in kernels]), kernels
