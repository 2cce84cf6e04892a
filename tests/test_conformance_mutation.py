"""Mutation test of the conformance suite: run against backends that each
plant one fault (tests/conformance_mutants.py: the built-in interpreter with
aliases ignored, float64 rounded through float32, the grid walked
column-major, outputs reversed, ragged edge blocks clamped into the array,
scratch zeroed at every grid point, program ids reversed, input-Ref writes
dropped, pl.Element padding at the wrong end or with its ends swapped,
Element offsets rounded to multiples of 8, the last grid step dropped), the
suite must fail each one by at least two tests, and pass the same wrapper
with no fault.

The mutants are installed as a distribution (a ``*.dist-info`` with entry
points on PYTHONPATH, as tests/fake_dists.py does) and the suite runs
against all of them in one subprocess (``pytest.main`` once per backend).
Only the layers that run kernels (execution, interpret parity) run: no
semantic fault can show in the others, and the run stays short.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import conformance_mutants as cm
from fake_dists import site_env

HERE = Path(__file__).resolve().parent
SUITE_ARGS = ["-m", "execution or interpret_parity",
              # the mutants' module imports pallas_frontend before pytest starts
              "-W", "ignore::pytest.PytestAssertRewriteWarning"]
FAULTS = [f for f in cm.FAULTS if f != "none"]


def test_at_least_twelve_faults_are_planted():
    assert len(FAULTS) >= 12, FAULTS
    assert "element_padding_at_end" in FAULTS


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    root = tmp_path_factory.mktemp("mutants")
    info = root / "pallas_conformance_mutants-0.0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: pallas-conformance-mutants\nVersion: 0.0.1\n")
    (info / "entry_points.txt").write_text(cm.entry_points_text())
    env = site_env(root)
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(HERE), env.get("PYTHONPATH", "")])
    for key in [k for k in env if k.startswith("PYTEST_XDIST")]:
        del env[key]
    out = root / "outcomes.json"
    names = [f"mutant_{f}" for f in cm.FAULTS]
    proc = subprocess.run([sys.executable, str(HERE / "conformance_mutants.py"), str(out),
                           *names, "--", *SUITE_ARGS],
                          env=env, cwd=root, capture_output=True, text=True, timeout=900)
    assert out.exists(), proc.stdout[-4000:] + proc.stderr[-4000:]
    return json.loads(out.read_text())


def test_the_unbroken_wrapper_passes_the_suite(outcomes):
    control = outcomes["mutant_none"]
    assert control["exit"] == 0 and not control["failed"], control
    assert control["passed"] >= 20, control       # the execution layers ran, not skipped


@pytest.mark.parametrize("fault", FAULTS)
def test_the_suite_fails_the_broken_backend(outcomes, fault):
    result = outcomes[f"mutant_{fault}"]
    failed = result["failed"]
    assert len(failed) >= 2, f"the suite caught {fault} by {len(failed)} test(s): {failed}"
    # Caught by a test's check, not by a broken set-up.
    assert all(f.endswith("(call)") for f in failed), failed
