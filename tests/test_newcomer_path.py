"""The README's two commands: the Python each needs said up front (3.11 for the
project, 3.12 for the test matrix), an older Python stopped with one line from
us, reruns start from a clean venv, and .ci/run runs exactly these commands."""

import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def _python(minor: int) -> str | None:
    """A Python 3.<minor> on this machine (pyenv's, or on PATH), if any."""
    candidates = sorted(glob.glob(os.path.expanduser(
        f"~/.pyenv/versions/3.{minor}*/bin/python3.{minor}")))
    found = shutil.which(f"python3.{minor}")
    return candidates[-1] if candidates else found


def _section(heading: str) -> str:
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", README, re.M | re.S)
    assert match, f"README.md has no '## {heading}' section"
    return match.group(1)


def _first_bash_block(text: str) -> str:
    match = re.search(r"^```bash\n(.*?)^```", text, re.M | re.S)
    assert match, "no bash block"
    return match.group(1).strip()


@pytest.mark.parametrize("args, old_minor, needed", [
    (["tools/require_python.py"], 10, "3.11"),
    (["examples/demo.py"], 10, "3.11"),
    (["tools/require_python.py", "3.12"], 11, "3.12")])
def test_an_old_python_gets_one_line_from_us(args, old_minor, needed):
    old = _python(old_minor)
    if old is None:
        pytest.skip(f"no Python 3.{old_minor} on this machine (pyenv install 3.{old_minor})")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([old, str(REPO / args[0]), *args[1:]], capture_output=True,
                         text=True, env=env, cwd=REPO, timeout=120)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and f"needs Python >= {needed}" in lines[0] \
        and f"3.{old_minor}" in lines[0], out.stderr


def test_this_python_passes_the_check():
    out = subprocess.run([sys.executable, str(REPO / "tools/require_python.py")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stderr == "" and out.stdout == ""


def test_readme_states_the_pythons_at_the_top_and_in_both_sections():
    assert "Python >= 3.11" in README.split("\n## ", 1)[0]
    assert "Python >= 3.11" in _section("Run the demo")
    assert "Python >= 3.12" in _section("Run the tests")


@pytest.mark.parametrize("heading", ["Run the demo", "Run the tests"])
def test_readme_commands_check_python_and_survive_a_rerun(heading):
    command = _first_bash_block(_section(heading))
    assert command.startswith("python tools/require_python.py"), command
    assert "python -m venv --clear .venv" in command, command


def test_test_section_documents_pytest_and_the_test_extra():
    text = _section("Run the tests")
    assert '[test]"' in text and "pytest plugins/" in text and "--pallas-backend" in text


def test_ci_entry_runs_the_readme_commands():
    ci = (REPO / ".ci" / "run").read_text()
    assert 'for section in "Run the demo" "Run the tests"' in ci and "README.md" in ci
    extract = subprocess.run(
        ["bash", "-c", 'source <(sed -n "/^readme_command()/,/^}/p" .ci/run); '
                       'readme_command "Run the tests"'],
        capture_output=True, text=True, cwd=REPO, timeout=60)
    assert extract.stdout.strip() == _first_bash_block(_section("Run the tests"))
    assert "tox-uv" in extract.stdout
