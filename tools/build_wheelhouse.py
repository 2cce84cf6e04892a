"""Builds the wheel and the sdist of the four distributions into one directory.

    python tools/build_wheelhouse.py DIR

Uses the `build` package (PEP 517, isolated build envs; with uv when it is
installed). Each wheel is built from its sdist, so a file missing from an
sdist breaks the build here rather than a user's install. Then, from DIR:

    pip install --find-links DIR "pallas-frontend[triton]"
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# distribution name -> its project directory
DISTRIBUTIONS = {
    "pallas-frontend": REPO,
    "pallas-triton": REPO / "plugins" / "pallas_triton",
    "pallas-tpu": REPO / "plugins" / "pallas_tpu",
    "pallas-mgpu": REPO / "plugins" / "pallas_mgpu",
}


def build(project: Path, outdir: Path) -> None:
    command = [sys.executable, "-m", "build", "--outdir", str(outdir)]
    if shutil.which("uv"):
        command += ["--installer", "uv"]
    command.append(str(project))
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    args = parser.parse_args(argv)
    if importlib.util.find_spec("build") is None:
        # without it, each build fails with a bare "No module named build" traceback
        print(f"build_wheelhouse.py needs the PEP 517 builder `build` in this Python "
              f"({sys.executable}): run `python -m pip install build`, then this again.",
              file=sys.stderr)
        return 2
    args.outdir.mkdir(parents=True, exist_ok=True)
    for name in DISTRIBUTIONS:
        for stale in args.outdir.glob(name.replace("-", "_") + "-*"):
            stale.unlink()
    # the four builds are independent processes (own projects, own file names): run them at once
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for done in [pool.submit(build, project, args.outdir) for project in DISTRIBUTIONS.values()]:
            done.result()
    for project in DISTRIBUTIONS.values():
        # setuptools leaves build/ and *.egg-info next to the sources
        shutil.rmtree(project / "build", ignore_errors=True)
    for artifact in sorted(args.outdir.iterdir()):
        print(artifact.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
