"""Shares compiled bytecode between the virtual environments of one tox run.

    python tools/bytecode_store.py save STORE [SITE_PACKAGES]
    python tools/bytecode_store.py restore STORE [SITE_PACKAGES]

uv installs no bytecode, so every new environment (each tox env, each fresh
venv of the tests) compiles jax, triton, ... again on its first import: about
5 CPU-seconds per environment on the CI machine, most of a small env's set-up.
`save` copies the ``__pycache__`` files of the installed distributions into
STORE, by distribution name and version; `restore` puts them next to the same
distribution's sources in another environment (SITE_PACKAGES defaults to this
interpreter's).

Why this is safe: a ``.pyc`` records the size and modification time of the
source it was compiled from, and Python recompiles when they differ. uv
hard-links every environment's files from its one cache, so the same version
of a distribution has the very same sources everywhere; where they differ (a
pip install, another build), the copied file is ignored and rewritten. The
store holds bytecode only; nothing in it is ever run without that check.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import sysconfig
from pathlib import Path


def _distributions(site: Path):
    """(name-version, [source paths relative to ``site``]) per installed distribution."""
    for record in site.glob("*.dist-info/RECORD"):
        key = record.parent.name[: -len(".dist-info")]
        sources = []
        for line in record.read_text(errors="replace").splitlines():
            path = line.split(",", 1)[0]
            if path.endswith(".py") and not path.startswith(("..", "/")):
                sources.append(path)
        yield key, sources


def _cached(source: str) -> str:
    """The ``__pycache__`` path (relative) of a source (relative)."""
    head, name = os.path.split(source)
    tag = sys.implementation.cache_tag
    return os.path.join(head, "__pycache__", f"{name[:-3]}.{tag}.pyc")


def _place(src: Path, dst: Path) -> bool:
    if dst.exists() or not src.is_file():
        return False
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f"{dst.name}.{os.getpid()}.tmp")
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)   # atomic: a concurrent reader sees no half-written file
    return True


def save(store: Path, site: Path) -> int:
    """Copies ``site``'s bytecode into ``store``; returns how many files were new."""
    count = 0
    for key, sources in _distributions(site):
        for source in sources:
            rel = _cached(source)
            count += _place(site / rel, store / key / rel)
    return count


def restore(store: Path, site: Path) -> int:
    """Puts ``store``'s bytecode for ``site``'s distributions in place; returns the count."""
    count = 0
    for key, sources in _distributions(site):
        if not (store / key).is_dir():
            continue
        for source in sources:
            rel = _cached(source)
            count += _place(store / key / rel, site / rel)
    return count


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("save", "restore"))
    parser.add_argument("store", type=Path)
    parser.add_argument("site", type=Path, nargs="?", default=Path(sysconfig.get_paths()["purelib"]))
    args = parser.parse_args(argv)
    count = (save if args.action == "save" else restore)(args.store, args.site)
    print(f"bytecode_store: {args.action}d {count} files ({args.site} <-> {args.store})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
