"""tools/run_tests.py, the README's test command (issue 34): it counts tests from
each tox env's JUnit report, so every pytest command of tox.ini must write one;
its progress line and closing summary carry the counts, the slowest tests and
a pytest-style line for CI."""

import configparser
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import run_tests  # noqa: E402

SAMPLE = """
    import pytest, time

    def test_ok():
        pass

    def test_slow():
        time.sleep(0.3)

    @pytest.mark.skip(reason="not here")
    def test_skipped():
        pass

    def test_bad():
        assert 1 == 2
"""


def test_counts_and_times_come_from_the_junit_report(tmp_path):
    (tmp_path / "test_sample.py").write_text(textwrap.dedent(SAMPLE))
    report = tmp_path / "results" / "demo.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "test_sample.py", f"--junitxml={report}"], cwd=tmp_path,
                   capture_output=True, timeout=300)
    counts, times = run_tests.read_report(report)
    assert (counts.passed, counts.skipped, counts.failed, counts.errors) == (2, 1, 1, 0)
    slowest = max(times)
    assert slowest[1].endswith("test_sample::test_slow") and slowest[0] >= 0.3

    progress = run_tests.Progress(["demo", "other"], report.parent)
    progress.status = {"demo": "FAIL"}
    assert progress.line().startswith(
        "[tests] 1/2 envs done, 4 tests so far (2 passed, 1 skipped, 1 failed)")
    text, total = run_tests.summary(progress, wall=75.0, cpu=130.0, slowest=2)
    assert re.search(r"demo\s+FAIL\s+2 passed, 1 skipped, 1 failed", text), text
    assert re.search(r"other\s+\?\s+\(no test report\)", text), text
    assert "slowest 2 tests:" in text and "demo: test_sample::test_slow" in text, text
    assert "wall 1m15s, CPU 2.2 min" in text, text
    assert total.words() == "2 passed, 1 skipped, 1 failed"


def test_every_pytest_command_of_tox_ini_writes_its_report():
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(ROOT / "tox.ini")
    assert ini["results"]["junit"] == "--junitxml={toxworkdir}{/}results{/}{envname}.xml"
    missing = [f"[{name}] {line.strip()}" for name in ini.sections()
               for key in ("commands",) if key in ini[name]
               for line in ini[name][key].splitlines()
               if line.strip().startswith("pytest ") and "{[results]junit}" not in line]
    assert not missing, "\n".join(missing)


def test_the_readme_test_command_is_this_script():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Run the tests", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    assert block.strip().endswith(".venv-tox/bin/python tools/run_tests.py"), block


def test_the_envs_counted_are_those_tox_p_runs():
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(ROOT / "tox.ini")
    envlist = [e.strip() for e in ini["tox"]["envlist"].split(",")]
    assert run_tests.envlist([]) == envlist and "frontend" not in envlist
    assert run_tests.envlist(["-e", "docs,wheels", "--", "-x"]) == ["docs", "wheels"]


LIVE_SAMPLE = """
    import json, os, pathlib, time

    def test_a():
        pass

    def test_b():
        assert 1 == 2

    def test_c():
        pass

    def test_zz_counts_so_far_are_on_disk():
        live = pathlib.Path(os.environ["LIVE_FILE"])
        for _ in range(100):      # under xdist the controller writes after the worker reports
            data = json.loads(live.read_text())
            if data["passed"] + data["failed"] >= 3:
                break
            time.sleep(0.05)
        assert (data["passed"], data["failed"], data["finished"]) == (2, 1, False)
"""


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_running_envs_counts_are_live_and_on_the_progress_line(tmp_path, workers):
    # issue 39: the line counted only finished envs ("0 tests" for 8.5 minutes)
    (tmp_path / "test_live.py").write_text(textwrap.dedent(LIVE_SAMPLE))
    results = tmp_path / "results"
    results.mkdir()
    (results / run_tests.LIVE_MARKER).touch()
    live = results / f"demo{run_tests.LIVE_SUFFIX}"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-n", workers, "test_live.py", f"--junitxml={results / 'demo.xml'}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "LIVE_FILE": str(live)})
    assert "1 failed, 3 passed" in done.stdout, done.stdout + done.stderr
    assert json.loads(live.read_text()) == {"passed": 3, "failed": 1, "skipped": 0,
                                            "errors": 0, "finished": True}
    live.write_text(json.dumps({"passed": 7, "failed": 2, "skipped": 1, "errors": 0,
                                "finished": False}))     # as while the env runs
    progress = run_tests.Progress(["demo", "other"], results)
    (results / "demo.xml").unlink()
    line = progress.line()
    # (under tox the envs this very run has going are listed beside demo)
    assert line.startswith("[tests] 0/2 envs done, 10 tests so far (7 passed, 1 skipped, "
                           "2 failed); running: "), line
    assert "demo 7 passed, 2 failed" in line.split("running: ", 1)[1], line


def test_without_the_marker_no_live_file_is_written(tmp_path):
    (tmp_path / "test_one.py").write_text("def test_one():\n    pass\n")
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                    "test_one.py", "--junitxml=out/r.xml"], cwd=tmp_path, capture_output=True,
                   timeout=300)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["r.xml"]
