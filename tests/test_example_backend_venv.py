"""A real third-party install: the example backend and the frontend go into a
NEW virtual environment from their own directories; the backend must then be
discovered, listed by `pallas backends`, selected by its compiler params, and
pass its own tests and the conformance suite there.

Dependencies come from the package index; the two local projects are
installed with --no-deps. With uv on PATH (tox installs it) the venv is made
by uv from its shared cache in seconds; pip re-unpacking jax and jaxlib into
a fresh venv was most of this suite's time inside tox.
"""

import importlib.metadata as md
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "example_backend"


def _run(args, **kw):
    out = subprocess.run(args, capture_output=True, text=True, timeout=600, **kw)
    assert out.returncode == 0, f"{args}\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}"
    return out.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("example-venv")
    bindir = root / "venv" / ("Scripts" if os.name == "nt" else "bin")
    py = bindir / "python"
    uv = shutil.which("uv")
    if uv:
        _run([uv, "venv", "-q", "--python", sys.executable, str(root / "venv")])
        pip = [uv, "pip", "install", "-q", "--python", str(py)]
    else:
        _run([sys.executable, "-m", "venv", str(root / "venv")])
        pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    pins = [f"{d}=={md.version(d)}" for d in ("jax", "jaxlib", "numpy", "pluggy", "pytest")]
    _run(pip + pins)
    _run(pip + ["--no-deps", str(REPO), str(EXAMPLE)])
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PALLAS_FRONTEND_") and k != "PYTHONPATH"}
    return py, bindir, env, root


def test_listed_by_pallas_backends(venv):
    py, bindir, env, root = venv
    out = _run([str(bindir / "pallas"), "backends"], env=env, cwd=root)
    line = next(ln for ln in out.splitlines() if ln.startswith("example "))
    assert "pallas-example-backend" in line and "0.1.0" in line and "yes" in line
    assert "interpret  pallas-frontend" in out


def test_selected_by_its_compiler_params(venv):
    py, bindir, env, root = venv
    code = ("import pallas_example_backend as ex\n"
            "from pallas_frontend import registry\n"
            "b = registry.select_backend(platform='cpu', interpret=False,\n"
            "    compiler_params=ex.CompilerParams(), backend=None)\n"
            "print(b.name, type(b).__module__)\n")
    assert _run([str(py), "-c", code], env=env, cwd=root).split() == ["example",
                                                                       "pallas_example_backend"]


def test_own_tests_and_conformance_suite_pass(venv):
    py, bindir, env, root = venv
    out = _run([str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                str(EXAMPLE / "tests"), "--pyargs", "pallas_frontend.testing",
                "--pallas-backend=example"], env=env, cwd=root)
    last = out.strip().splitlines()[-1]
    assert " passed" in last and "failed" not in last, out[-3000:]
