"""The docs site (tox -e docs): docs/support-matrix.md is what the installed
backends declare, and Sphinx builds the site with no warning. In one pytest
session with the snippet tests, so that the build (one busy core for a while)
runs beside them."""

import subprocess
import sys
from pathlib import Path

import support_matrix

REPO = Path(__file__).resolve().parents[1]


def test_support_matrix_is_current(capsys):
    # stale: the diff is printed, with how to regenerate the page
    assert support_matrix.main(["--check"]) == 0, capsys.readouterr()


def test_site_builds_with_no_warnings(tmp_path):
    out = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                          str(REPO / "docs"), str(tmp_path / "html")],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    assert (tmp_path / "html" / "index.html").is_file()
