"""benchmarks/tpu_native_bench.py without a TPU: its dry run (the chip run's
code on CPU in the TPU interpret modes: ours, JAX's and XLA against NumPy
float64, pl.autotune over the generated space with its pruned candidates, the
wide grid, the saved JSON) and the table tpu_check.py renders from it.
Needs pallas_tpu: tox env all-plugins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pallas_tpu")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
BENCH = ROOT / "benchmarks" / "tpu_native_bench.py"


def test_dry_run_and_table(tmp_path):
    r = subprocess.run([sys.executable, str(BENCH), "--out", str(tmp_path), "--dry-run",
                        "--only", "ops.tpu.matmul 256", "gmm"],
                       env={**os.environ, "JAX_PLATFORMS": "cpu"}, capture_output=True,
                       text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    results = json.loads((tmp_path / "bench.json").read_text())
    assert results["route"] == "native" and results["chip"]["vmem_bytes"] > 0
    rows = {row["name"]: row for row in results["cases"]}
    assert set(rows) == {"ops.tpu.megablox.gmm", "ops.tpu.matmul 256^3 bf16 block 128x128x128"}
    for row in rows.values():
        for side, cell in row["sides"].items():
            assert cell["ok"] and cell["seconds"] > 0, (row["name"], side, cell)
        assert row["ours_equals_jax"]
        tune = row["autotune"]
        assert "error" not in tune, tune
        timed = {k: c for k, c in tune["space"].items() if "seconds" in c}
        assert tune["pick"] in timed and any("pruned" in c for c in tune["space"].values())
    matmul = rows["ops.tpu.matmul 256^3 bf16 block 128x128x128"]["autotune"]
    assert matmul["wide"] and matmul["wide_total"] >= len(matmul["wide"])
    assert not set(matmul["wide"]) & {k for k, c in matmul["space"].items() if "seconds" in c}
    import tpu_check
    table = tpu_check.render(results)
    assert "natively: Python" in table and "pl.autotune` live" in table
    assert "| ops.tpu.megablox.gmm | 128x128x128 (JAX's default) |" in table
    assert "ours' choice (JAX's matmul has no default block)" in table


def test_bandwidth_only_beyond_vmem():
    import tpu_check
    peaks = {"vmem_bytes": 128 << 20, "hbm_bytes_per_second": 8.2e11,
             "bf16_flops_per_second": 1.97e14}
    small = {"flops": 0, "bytes": 48 << 20}
    big = {"flops": 0, "bytes": 1 << 30}
    assert tpu_check._speed(small, {"seconds": 1e-4}, peaks) == "not bandwidth (48 MiB)"
    rate = (1 << 30) / 2e-3
    assert tpu_check._speed(big, {"seconds": 2e-3}, peaks) == \
        f"{rate / 1e9:.0f} GB/s ({100 * rate / 8.2e11:.0f}% of 820)"
    mm = {"flops": 2.0 * 8192 ** 3, "bytes": 0}
    assert tpu_check._speed(mm, {"seconds": 5.7e-3}, peaks).endswith("% of 197)")


def test_runs_merge_by_kernel_and_write_into_the_native_block(tmp_path):
    import tpu_check

    def row(name, ms, **extra):
        return {"name": name, "sides": {"ours": {"seconds": ms / 1e3}}, **extra}
    first = {"date": "2026-12-06T05:45:00+00:00", "route": "native",
             "cases": [row("a", 2.0), row("b", 1.0)]}
    later = {"date": "2026-12-06T11:25:00+00:00", "route": "native",
             "cases": [row("a", 1.5), row("b", 0, error="not run: the time budget was spent"),
                       row("c", 3.0)]}
    merged = tpu_check.merge_results([first, later])
    assert [(r["name"], r["sides"]["ours"]["seconds"] * 1e3) for r in merged["cases"]] == [
        ("a", 1.5), ("b", 1.0), ("c", 3.0)]     # b: the later run did not reach it
    assert merged["dates"] == [first["date"], later["date"]]
    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text(f"x\n{tpu_check.START}\nexport\n{tpu_check.END}\n"
                   f"{tpu_check.NATIVE_START}\nold\n{tpu_check.NATIVE_END}\n")
    tpu_check.write("new table", doc, native=True)
    assert doc.read_text() == (f"x\n{tpu_check.START}\nexport\n{tpu_check.END}\n"
                               f"{tpu_check.NATIVE_START}\nnew table\n{tpu_check.NATIVE_END}\n")
