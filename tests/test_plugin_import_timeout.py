"""A plugin whose import blocks cannot hang `pallas backends` or
`pl.backends()` (issue 24 #10): after PALLAS_FRONTEND_IMPORT_TIMEOUT seconds
the plugin is recorded as a load failure saying where its import is blocked,
and the other backends are listed."""

import json
import subprocess
import sys
import threading

import pytest

from fake_dists import backend_source, discovering, make_dist, site_env

SLEEPS = "import time\ntime.sleep(3600)\n"
# Blocks until the test opens the gate (so the in-process test leaves no thread behind).
WAITS = "import pf_gate\npf_gate.OPEN.wait()\n"


def test_cli_lists_the_others_and_names_the_plugin_that_hangs(tmp_path):
    make_dist(tmp_path, "pallas-good", "1.0", "pf_good", backend_source("good"), "good")
    make_dist(tmp_path, "pallas-sleepy", "0.1", "pf_sleepy", SLEEPS, "sleepy")
    # a fresh process: it must also exit although the import thread still sleeps
    out = subprocess.run(
        [sys.executable, "-m", "pallas_frontend.cli", "backends", "--json"],
        env=site_env(tmp_path, {"PALLAS_FRONTEND_IMPORT_TIMEOUT": "2",
                                 "PALLAS_FRONTEND_BACKENDS": "good,sleepy"}),
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stderr[-3000:]
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert rows["good"]["available"] == "yes, natively (cpu)"
    row = rows["sleepy"]
    assert row["distribution"] == "pallas-sleepy" and row["available"] == "no: failed to load"
    error = row["load error"]
    assert "its import did not return within 2 s (PALLAS_FRONTEND_IMPORT_TIMEOUT)" in error, error
    assert f"{tmp_path / 'pf_sleepy.py'}:2 (time.sleep(3600))" in error, error


def test_backends_returns_with_the_blocked_plugin_recorded(tmp_path, monkeypatch):
    make_dist(tmp_path, "pallas-good", "1.0", "pf_good", backend_source("good"), "good")
    make_dist(tmp_path, "pallas-blocks", "0.1", "pf_blocks", WAITS, "blocks")
    (tmp_path / "pf_gate.py").write_text("import threading\nOPEN = threading.Event()\n")
    from pallas_frontend import discovery, registry
    env = {"PALLAS_FRONTEND_IMPORT_TIMEOUT": "0.5", "PALLAS_FRONTEND_BACKENDS": "good,blocks"}
    with discovering(monkeypatch, tmp_path, env):
        try:
            with pytest.warns(discovery.BackendLoadWarning, match="'blocks'"):
                names = set(registry.backends())
            failure = registry.load_failures()["blocks"]
            with pytest.raises(pl_unavailable(), match="its import did not return within 0.5 s"):
                registry.get_backend("blocks")
        finally:
            import pf_gate
            pf_gate.OPEN.set()
            for t in threading.enumerate():
                if t.name.startswith("pallas_frontend: loading blocks"):
                    t.join(60)
    assert {"good", "interpret"} <= names and "blocks" not in names
    assert f"{tmp_path / 'pf_blocks.py'}:2 (pf_gate.OPEN.wait())" in failure.reason
    # --verbose prints the blocked import's whole stack
    assert "Stack of the blocked call" in discovery.format_cause(failure)


def pl_unavailable():
    from pallas_frontend.backend_api import BackendUnavailableError
    return BackendUnavailableError


@pytest.mark.parametrize("value", ["soon", "-1", "inf"])
def test_malformed_timeout_names_the_variable_and_the_fix(tmp_path, monkeypatch, value):
    make_dist(tmp_path, "pallas-good", "1.0", "pf_good", backend_source("good"), "good")
    from pallas_frontend import registry
    with discovering(monkeypatch, tmp_path, {"PALLAS_FRONTEND_IMPORT_TIMEOUT": value}):
        with pytest.raises(ValueError) as info:
            registry.get_backend("good")
    msg = str(info.value)
    assert f"PALLAS_FRONTEND_IMPORT_TIMEOUT={value!r}" in msg
    assert "non-negative number" in msg and "0 means no limit" in msg and "unset" in msg


def test_a_blocking_is_available_is_reported_in_its_row(tmp_path, monkeypatch):
    body = ("def is_available(self):\n"
            "                import pf_gate; pf_gate.OPEN.wait(); return True, ''")
    make_dist(tmp_path, "pallas-probe", "0.1", "pf_probe", backend_source("probe", body=body),
              "probe")
    (tmp_path / "pf_gate.py").write_text("import threading\nOPEN = threading.Event()\n")
    from pallas_frontend import diagnostics
    env = {"PALLAS_FRONTEND_IMPORT_TIMEOUT": "0.5", "PALLAS_FRONTEND_BACKENDS": "probe"}
    with discovering(monkeypatch, tmp_path, env):
        try:
            rows = {r["name"]: r for r in diagnostics.backend_rows("cpu")}
        finally:
            import pf_gate
            pf_gate.OPEN.set()
    available = rows["probe"]["available"]
    assert available.startswith("no: is_available() did not return within 0.5 s"), available
    assert "pf_probe.py" in available and "pf_gate.OPEN.wait()" in available, available
