"""benchmarks/gpu_check.py, the one command for the first GPU, kept working on CPU:
its SKIP line without a GPU, and its ``--dry-run --quick`` logic (every case built,
the numerics on the backends' interpret paths against XLA, every timed entry traced
at full size, the report written). Needs both GPU plugins: tox env all-plugins."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pallas_triton")
pytest.importorskip("pallas_mgpu")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"
sys.path.insert(0, str(SCRIPT.parents[1] / "tools"))
from jax_ops_copy import shipped  # noqa: E402

# JAX's Triton-style GPU ops files (JAX 0.12.1 ships none of them)
TRITON_OPS = shipped("gpu.softmax") and shipped("gpu.layer_norm") and shipped("gpu.attention")
ENV = {**os.environ, "JAX_PLATFORMS": "cpu"}


def _run(*args, timeout=240):
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=ENV, capture_output=True,
                          text=True, timeout=timeout)


def test_skips_without_a_gpu():
    r = _run()
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1].startswith("SKIP: no GPU (jax.devices() = [CpuDevice")


def test_dry_run_quick(tmp_path):
    out = tmp_path / "report.md"
    r = _run("--dry-run", "--quick", "--out", str(out), "--seed", "7")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    table = out.read_text()
    rows = [ln.split(" | ") for ln in table.splitlines() if ln.startswith("| ") and "---" not in ln]
    numeric = [r for r in rows if len(r) == 5 and r[0] != "| kernel"]
    # the portable kernels on both interpret paths match XLA within the stated tolerance
    conformance = [r for r in numeric if not r[0].startswith("| gpu.")]
    assert {r[1] for r in conformance} == {"triton", "mgpu"}
    assert all(r[2] == "ok" for r in conformance), conformance
    # JAX's Triton-style ops through ours on Triton's interpreter, forward and grad
    ops = {r[0][2:]: r[2] for r in numeric if r[0].startswith("| gpu.") and r[1] == "triton"}
    assert ops == ({"gpu.softmax": "ok", "gpu.layer_norm": "ok", "gpu.layer_norm grad": "ok"}
                   if TRITON_OPS else {}), ops
    # every benchmark lists every implementation, each traced or with its error
    timed = [r for r in rows if len(r) == 7 and r[0] != "| benchmark"]
    benches = {r[0] for r in timed}
    assert len(benches) == 7
    impls = {b: {r[1] for r in timed if r[0] == b} for b in benches}
    for b, i in impls.items():    # without JAX's Triton ops files: their rows left out
        need = {"ours-Triton", "JAX-Triton", "XLA"} if TRITON_OPS or "matmul" in b \
            else {"XLA"} if "flash attn" in b else {"ours-Triton", "XLA"}
        assert need <= i, (b, i)
    assert sum("ours-MGPU" in i for i in impls.values()) == 5, impls
    ours_triton = [r for r in timed if r[1] == "ours-Triton"]
    assert all("traced at full size" in r[6] for r in ours_triton), ours_triton
    assert all(r[3].endswith(("TFLOP/s", "GB/s")) for r in timed if r[1] == "XLA")
