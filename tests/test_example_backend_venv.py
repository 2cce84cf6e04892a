"""A real third-party install: the example backend and the frontend go into a
NEW virtual environment from their own directories; the backend must then be
discovered, listed by `pallas backends`, selected by its compiler params, and
pass its own tests and the conformance suite there.

The venv is made by ``fresh_venv`` (uv when on PATH; the local projects with
--no-deps).
"""

import functools

import pytest

from fresh_venv import REPO, make, run

EXAMPLE = REPO / "examples" / "example_backend"
TIMEOUT = 600   # seconds per command in the venv
_run = functools.partial(run, timeout=TIMEOUT)


# made once: one xdist worker runs the whole module (--dist loadfile)
@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("example-venv")
    py, bindir, env = make(root, local=[EXAMPLE], timeout=TIMEOUT)
    return py, bindir, env, root


def test_listed_by_pallas_backends(venv):
    py, bindir, env, root = venv
    out = _run([str(bindir / "pallas"), "backends"], env=env, cwd=root).stdout
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
    assert _run([str(py), "-c", code], env=env, cwd=root).stdout.split() == ["example",
                                                                       "pallas_example_backend"]


def test_own_tests_and_conformance_suite_pass(venv):
    py, bindir, env, root = venv
    out = _run([str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                str(EXAMPLE / "tests"), "--pyargs", "pallas_frontend.testing",
                "--pallas-backend=example"], env=env, cwd=root).stdout
    last = out.strip().splitlines()[-1]
    assert " passed" in last and "failed" not in last, out[-3000:]
