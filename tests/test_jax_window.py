"""The JAX window (jax 0.10 to 0.12): a JAX older than it is refused with one
line on first use of the API; a newer one is warned about; the declared
requirements say the same."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _import_under(version: str) -> subprocess.CompletedProcess:
    """Imports the frontend's JAX internals with jax.__version__ set to ``version``."""
    code = ("import jax; jax.__version__ = %r\n"
            "import pallas_frontend._jax_compat\n"
            "print('imported')" % version)
    return subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True,
                          text=True, timeout=300, cwd=REPO)


def test_an_older_jax_is_refused_with_one_line():
    out = _import_under("0.9.3")
    assert out.returncode != 0 and "imported" not in out.stdout
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: pallas-frontend needs jax >= 0.10 (this is jax 0.9.3)")
    assert "install 'jax>=0.10,<0.13' 'jaxlib>=0.10,<0.13'" in last


def test_a_newer_jax_is_warned_about_and_still_imports():
    for newer in ("0.13.0", "0.12.2"):
        out = _import_under(newer)
        assert out.returncode == 0 and "imported" in out.stdout, out.stderr
        assert f"tested with jax 0.10.0 to 0.12.1; jax {newer} is newer" in out.stderr
    for tested in ("0.12.1", "0.12.0.1"):
        assert "is newer" not in _import_under(tested).stderr


@pytest.mark.parametrize("pyproject", ["pyproject.toml", "plugins/pallas_tpu/pyproject.toml",
                                       "plugins/pallas_mgpu/pyproject.toml"])
def test_every_distribution_declares_the_window(pyproject):
    project = tomllib.loads((REPO / pyproject).read_text())["project"]
    assert project["requires-python"] == ">=3.11"
    deps = project["dependencies"]
    assert "jax>=0.10,<0.13" in deps and "jaxlib>=0.10,<0.13" in deps, deps


def test_the_triton_plugin_declares_python_311():
    project = tomllib.loads((REPO / "plugins/pallas_triton/pyproject.toml").read_text())
    assert project["project"]["requires-python"] == ">=3.11"
