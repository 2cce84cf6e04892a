"""Builds the docs site into a folder that is kept (``docs/_build/html`` by
default, gitignored), as ``tox -e docs`` does: Sphinx + MyST, every warning an
error, every page re-read (``-E``: a warning of an unchanged page is not lost,
and the API reference follows the docstrings).

    .venv/bin/pip install -r docs/requirements.txt   # once: sphinx, myst-parser
    .venv/bin/python tools/build_docs.py             # then open docs/_build/html/index.html
    .venv/bin/python tools/build_docs.py --out DIR   # elsewhere (PALLAS_DOCS_HTML=DIR too)
    .venv/bin/python tools/build_docs.py --where     # only print where the site is

The API reference is autodoc over the installed frontend and plugins: from a
checkout, ``pip install -e . -e plugins/pallas_triton -e plugins/pallas_tpu
-e plugins/pallas_mgpu`` (as ``tox -e docs`` does), or their pages fail to build.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "docs" / "_build" / "html"


def out_dir() -> Path:
    return Path(os.environ.get("PALLAS_DOCS_HTML") or DEFAULT_OUT)


def build(out: Path, *, timeout: float = 900) -> subprocess.CompletedProcess:
    """Runs Sphinx; the result's stdout/stderr hold its warnings."""
    return subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-E", "-q",
                           "-b", "html", str(REPO / "docs"), str(out)],
                          capture_output=True, text=True, timeout=timeout)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help=f"default: {DEFAULT_OUT}")
    parser.add_argument("--where", action="store_true", help="print where the site is; no build")
    args = parser.parse_args(argv)
    out = (args.out or out_dir()).resolve()
    index = out / "index.html"
    if args.where:
        print(f"docs site: {index}" if index.is_file() else f"docs site: not built ({out})")
        return 0
    result = build(out)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    if result.returncode != 0:
        print(f"docs build failed (warnings are errors); partial output in {out}", file=sys.stderr)
        return result.returncode
    print(f"docs site: {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
