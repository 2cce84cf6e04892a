"""The docs site (tox -e docs): docs/support-matrix.md is what the installed
backends declare, and Sphinx builds the site with no warning. In one pytest
session with the snippet tests, so that the build (one busy core for a while)
runs beside them. The site is kept where tools/build_docs.py puts it
(docs/_build/html, or $PALLAS_DOCS_HTML) and its path printed."""

import sys

import build_docs
import support_matrix


def test_support_matrix_is_current(capsys):
    # stale: the diff is printed, with how to regenerate the page
    assert support_matrix.main(["--check"]) == 0, capsys.readouterr()


def test_site_builds_with_no_warnings(capsys):
    html = build_docs.out_dir()
    out = build_docs.build(html)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    assert (html / "index.html").is_file()
    with capsys.disabled():   # seen in a -n 0 run; tox -e docs prints it after the session
        sys.stdout.write(f"\ndocs site: {html / 'index.html'}\n")
