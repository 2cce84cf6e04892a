"""A NEW virtual environment holding this checkout's frontend, for the tests that
install a backend as a third party would (the example backend, the guide's
`pallas-looped`).

jax, jaxlib, numpy, pluggy and pytest are pinned to the versions running the
tests and come from the package index; with uv on PATH (tox installs it) uv
makes the venv from its shared cache in seconds, where pip would unpack jax
and jaxlib anew. The frontend itself goes in with --no-deps. Under tox, the
bytecode store (tools/bytecode_store.py) spares the first import compiling jax.
"""

import importlib.metadata as md
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PINNED = ("jax", "jaxlib", "numpy", "pluggy", "pytest")


def run(args, ok=True, timeout=900, **kw):
    """Runs a command; with ``ok`` it must succeed (its output tail in the message)."""
    out = subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kw)
    if ok:
        assert out.returncode == 0, f"{args}\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}"
    return out


def make(root: Path, *, extra=(), local=(), editable=(), timeout=900):
    """A venv at ``root/venv`` with the pins, ``extra`` requirements, the frontend
    and the ``local`` projects (--no-deps), and the ``editable`` ones (-e,
    --no-deps, no build isolation: setuptools comes with ``extra``); each
    command within ``timeout`` seconds.
    Returns ``(python, bindir, env)``; ``env`` is os.environ without the
    frontend's selection variables and PYTHONPATH, so only the venv counts."""
    venv = root / "venv"
    bindir = venv / ("Scripts" if os.name == "nt" else "bin")
    py = bindir / "python"
    uv = shutil.which("uv")
    if uv:
        run([uv, "venv", "-q", "--python", sys.executable, str(venv)], timeout=timeout)
        pip = [uv, "pip", "install", "-q", "--python", str(py)]
    else:
        run([sys.executable, "-m", "venv", str(venv)], timeout=timeout)
        pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    run(pip + [f"{d}=={md.version(d)}" for d in PINNED] + list(extra), timeout=timeout)
    run(pip + ["--no-deps", str(REPO), *map(str, local)], timeout=timeout)
    for project in editable:
        run(pip + ["--no-deps", "--no-build-isolation", "-e", str(project)], timeout=timeout)
    store = os.environ.get("PALLAS_BYTECODE_STORE")
    if store:   # tox's: the bytecode of jax & co. from the envs before (not compiled again)
        run([str(py), str(REPO / "tools" / "bytecode_store.py"), "restore", store], timeout=timeout)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PALLAS_FRONTEND_") and k != "PYTHONPATH"}
    return py, bindir, env
