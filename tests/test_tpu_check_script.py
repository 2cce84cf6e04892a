"""benchmarks/tpu_check.py and tools/tpu_remote.py kept working without a TPU:
the SKIP line, the dry run (the same packing, running, comparing, timing and
table code on CPU, JAX's and ours' TPU kernels in their interpret modes, checked
against the NumPy float64 references), and the export for an older TPU host
(the Mosaic payload as generic MLIR text, the StableHLO artifact readable back).
Needs pallas_tpu: tox env all-plugins."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pallas_tpu")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "tpu_check.py"
REMOTE = ROOT / "tools" / "tpu_remote.py"
ENV = {**os.environ, "JAX_PLATFORMS": "cpu"}


def _run(*args, timeout=400):
    return subprocess.run([sys.executable, *map(str, args)], env=ENV, capture_output=True,
                          text=True, timeout=timeout)


def test_skips_without_a_tpu():
    r = _run(SCRIPT)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1].startswith("SKIP: no TPU here")


def test_dry_run(tmp_path):
    saved = tmp_path / "results.json"
    r = _run(SCRIPT, "--dry-run", "--json", saved, "--only", "conformance.softmax",
             "paged_attention", "ops.tpu.matmul 256")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    results = json.loads(saved.read_text())
    names = [row["name"] for row in results["cases"]]
    assert names == ["conformance.softmax", "ops.tpu.paged_attention",
                     "ops.tpu.matmul 256^3 bf16 block 128x128x128"]
    for row in results["cases"]:
        assert "error" not in row, row
        for side, cell in [*row["sides"].items(), *row["tune"].items()]:
            # every side and candidate ran, within the case's tolerance of NumPy float64
            assert "error" not in cell, (row["name"], side, cell)
            assert cell["ok"] and cell["rel"] <= row["rtol"], (row["name"], side, cell)
            assert cell["seconds"] > 0, (row["name"], side, cell)
    # both TPU interpreters agree bit for bit on JAX's own kernels
    assert all(row["ours_equals_jax"] for row in results["cases"][1:])
    table = r.stdout
    assert "| ops.tpu.paged_attention |" in table
    # JAX ships no default pages_per_compute_block: the baseline is named ours' choice
    assert re.search(r"\| ops\.tpu\.paged_attention \| pages4 \(ours' choice: JAX has no "
                     r"default pages_per_compute_block\) \| [0-9.]+ \| pages(4|8) \|", table)


def test_tpu_export_for_an_older_host(tmp_path):
    """The pack for a TPU: each kernel's Mosaic body is generic-form MLIR text
    without locations, and the artifact deserializes with this JAX too."""
    r = _run(REMOTE, "pack", "--out", tmp_path, "--size", "small", "--only", "conformance.softmax")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    (case,) = manifest["cases"]
    assert case["sides"]["ours"]["kernels"] == case["sides"]["jax"]["kernels"] == 1
    import jax
    for side in ("ours", "jax"):
        exported = jax.export.deserialize((tmp_path / case["sides"][side]["file"]).read_bytes())
        text = exported.mlir_module()
        (config,) = re.findall(r'backend_config = "(\{\\22custom_call_config.*?)"', text)
        body = json.loads(config.replace("\\22", '"'))["custom_call_config"]["body"]
        kernel = base64.b64decode(body).decode()
        assert kernel.startswith('"builtin.module"()'), kernel[:80]
        assert "loc(" not in kernel
    assert (tmp_path / "conformance_kernels_jax.py").read_text().count(
        "from jax.experimental import pallas as pl") == 1


def _remote_module():
    sys.path.insert(0, str(ROOT / "tools"))
    import tpu_remote
    return tpu_remote


def test_pack_without_flatbuffers_stops_with_one_line(monkeypatch):
    tpu_remote = _remote_module()
    real = tpu_remote.importlib.util.find_spec
    monkeypatch.setattr(tpu_remote.importlib.util, "find_spec",
                        lambda name, *a: None if name == "flatbuffers" else real(name, *a))
    with pytest.raises(SystemExit, match=r"needs the flatbuffers package here, to write the "
                                         r"exports: pip install flatbuffers"):
        tpu_remote.pack_cases("unused-folder")


def test_a_pack_with_a_failed_export_exits_nonzero(monkeypatch, tmp_path):
    tpu_remote = _remote_module()
    manifest = {"cases": [{"name": "k", "sides": {"ours": {"file": "a.bin"},
                                                  "jax": {"error": "export: TypeError: x"}},
                           "tune": {}}]}
    monkeypatch.setattr(tpu_remote, "pack_cases", lambda *a, **k: manifest)
    assert tpu_remote.failed_exports(manifest) == ["k: jax"]
    assert tpu_remote.main(["pack", "--out", str(tmp_path)]) == 1


def test_the_host_reads_flatbuffers_from_the_pack(monkeypatch, tmp_path):
    tpu_remote = _remote_module()
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    real = tpu_remote.importlib.util.find_spec
    monkeypatch.setattr(tpu_remote.importlib.util, "find_spec",
                        lambda name, *a: None if name == "flatbuffers" else real(name, *a))
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(SystemExit, match="its wheel in the pack's wheels/ folder"):
        tpu_remote._flatbuffers_from_pack(tmp_path)
    fake = wheels / "flatbuffers-25.0-py2.py3-none-any.whl"
    fake.write_bytes(b"")
    with pytest.raises(SystemExit):
        tpu_remote._flatbuffers_from_pack(tmp_path)
    assert str(fake) in sys.path
