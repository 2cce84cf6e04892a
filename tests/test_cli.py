"""The `pallas` CLI, print_backend_info, and the conformance suite run for `interpret`."""

import io
import json
import os
import subprocess
import sys

import pallas_frontend as pl
from pallas_frontend import cli


def test_backends_table_lists_the_interpreter(capsys):
    assert cli.main(["backends"]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[1]
    for column in ("name", "distribution", "version", "api", "platforms", "capabilities",
                   "available", "load error"):
        assert column in header
    assert "interpret  pallas-frontend" in out


def test_backends_json(capsys):
    cli.main(["backends", "--json"])
    rows = json.loads(capsys.readouterr().out)
    (row,) = [r for r in rows if r["name"] == "interpret"]
    assert row["available"] == "yes, natively (cpu)" and row["api"] == "%d.%d" % pl.API_VERSION


def test_doctor_passes_on_the_interpreter(capsys):
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "PASS  interpret" in out and "all available backends pass" in out


def test_print_backend_info_writes_to_a_file():
    buf = io.StringIO()
    pl.print_backend_info(file=buf)
    assert "pallas-frontend" in buf.getvalue() and "interpret" in buf.getvalue()


def test_conformance_suite_passes_for_the_interpreter(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALLAS_FRONTEND_")}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs",
         "pallas_frontend.testing", "--pallas-backend=interpret", "-rs"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    last = out.stdout.strip().splitlines()[-1]
    assert " passed" in last and "failed" not in last, last
    # the one permitted skip: the interpreter has no compiler params to vary
    skips = [ln for ln in out.stdout.splitlines() if ln.startswith("SKIPPED")]
    assert len(skips) <= 1 and all("no non-default compiler params" in s for s in skips), skips


def test_suite_is_skipped_without_a_backend(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALLAS_FRONTEND_")}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs",
         "pallas_frontend.testing.test_contract", "-rs"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:]
    assert "no backend named" in out.stdout and " passed" not in out.stdout


MANIFEST_CONFTEST = '''
from pallas_frontend import registry

class Manifested(type(registry.get_backend("interpret"))):
    name = "manifested"
    conformance_unsupported = {"test_softmax": "no exp unit"}
    conformance_xfail = {"test_vector_add": "known bug", "test_nothing_*": "stale entry"}

registry.register_backend(Manifested())
'''


def test_manifests_skip_and_strict_xfail(tmp_path):
    (tmp_path / "conftest.py").write_text(MANIFEST_CONFTEST)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALLAS_FRONTEND_")}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rsX", "--pyargs",
         "pallas_frontend.testing.test_kernels", "--pallas-backend=manifested",
         "-k", "test_vector_add or test_softmax"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    text = out.stdout
    assert out.returncode == 1, text[-3000:]            # the unexpected pass fails the run
    assert "[XPASS(strict)] manifested xfail manifest: known bug" in text
    assert "unsupported by 'manifested' (manifest): no exp unit" in text
    assert "'test_nothing_*' matches no conformance test" in text


def test_version(capsys):
    import pytest
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"pallas-frontend {pl.__version__} (backend API %d.%d)" % pl.API_VERSION)
    # pyproject.toml's static version is the installed one
    import importlib.metadata as md
    assert md.version("pallas-frontend") == pl.__version__


def test_table_wraps_long_cells_instead_of_cutting_them():
    from pallas_frontend import diagnostics
    caps = ",".join(f"capability_{i}" for i in range(12))
    row = {c: "-" for c in diagnostics.COLUMNS}
    row.update(name="wide", capabilities=caps, available="yes, natively (cpu)")
    table = diagnostics.format_table([row])
    assert "..." not in table and all(len(ln) < 200 for ln in table.splitlines())
    assert len(table.splitlines()) > 3                     # the row spans several lines
    joined = "".join(ln[ln.index("capability_") if "capability_" in ln else 0:].split("  ")[0]
                     for ln in table.splitlines() if "capability_" in ln)
    assert joined.replace(" ", "") == caps
