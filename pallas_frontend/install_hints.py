"""The one place that writes "how to install X": a command that works pasted
where the user stands.

The distributions are on no index yet, so ``pip install pallas-triton`` fails
("No matching distribution"). Where this pallas-frontend came from decides
the command:

- a clone (an editable install, or the package inside a checkout):
  ``pip install -e <clone>/plugins/pallas_triton``;
- a wheelhouse (a wheel file named on the command line records its folder;
  ``--find-links`` records nothing, so the folder is then named in words):
  ``pip install --find-links <dir> pallas-triton``;
- an index, once ``PUBLISHED``: ``pip install pallas-triton``.

The installer is this interpreter's (``pip_install``): plain ``pip`` when the
``pip`` on PATH belongs to it, else ``<python> -m pip``, or uv for a venv
without pip.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import sys
import urllib.parse
import urllib.request
from importlib import metadata
from pathlib import Path

#: True once the distributions are on PyPI: hints then name them alone.
PUBLISHED = False
FRONTEND = "pallas-frontend"
#: backend name -> the distribution this project ships it in
SHIPPED = {"triton": "pallas-triton", "tpu": "pallas-tpu", "mgpu": "pallas-mgpu"}
WHEELHOUSE_PLACEHOLDER = "WHEELHOUSE"


def _direct_url() -> dict:
    """pallas-frontend's PEP 610 record (how pip/uv installed it), or {}."""
    try:
        text = metadata.distribution(FRONTEND).read_text("direct_url.json")
        return json.loads(text) if text else {}
    except (metadata.PackageNotFoundError, ValueError, OSError):
        return {}


def _local_path(url: str) -> Path | None:
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme != "file":
        return None
    return Path(urllib.request.url2pathname(parsed.path))


def clone_root() -> Path | None:
    """The checkout this pallas-frontend runs from, if it runs from one."""
    record = _direct_url()
    candidates = []
    if record.get("dir_info", {}).get("editable") and "url" in record:
        candidates.append(_local_path(record["url"]))
    candidates.append(Path(__file__).resolve().parents[1])   # the package inside a clone
    for root in candidates:
        if root is not None and (root / "plugins").is_dir() and (root / "pyproject.toml").is_file():
            return root
    return None


def wheelhouse() -> Path | None:
    """The folder of the wheel pallas-frontend was installed from: recorded when the
    wheel file was named; after ``--find-links DIR`` (pip records nothing), the
    folder that holds this pallas-frontend's wheel among ``PIP_FIND_LINKS`` (which
    pip reads too), ``./wheelhouse`` and ``wheelhouse`` beside this environment."""
    record = _direct_url()
    path = _local_path(record.get("url", "")) if "archive_info" in record else None
    if path is not None and path.suffix == ".whl":
        return path.parent
    links = os.environ.get("PIP_FIND_LINKS", "").split()
    candidates = [(_local_path(u) if "://" in u else Path(u)) for u in links]
    candidates += [Path.cwd() / "wheelhouse", Path(sys.prefix).parent / "wheelhouse"]
    for folder in candidates:
        if folder is not None and _holds_this_frontend(folder):
            return folder.resolve()
    return None


def _holds_this_frontend(folder: Path) -> bool:
    try:
        version = metadata.version(FRONTEND)
    except metadata.PackageNotFoundError:
        return False
    try:
        return any(folder.glob(f"pallas_frontend-{version}-*.whl"))
    except OSError:
        return False


def pip_install() -> str:
    """The start of a command that installs into this interpreter: ``pip install``
    when the ``pip`` on PATH is this interpreter's, else ``<python> -m pip install``,
    or ``uv pip install --python <python>`` where this interpreter has no pip (a
    venv made by uv) and uv is on PATH."""
    found = shutil.which("pip")
    if found and Path(found).parent == Path(sys.executable).parent:
        return "pip install"
    python = shlex.quote(sys.executable)
    if importlib.util.find_spec("pip") is None and shutil.which("uv"):
        return f"uv pip install --python {python}"
    return f"{python} -m pip install"


def requirements_command(*requirements: str) -> str:
    """A command installing third-party ``requirements`` (on PyPI) into this interpreter."""
    return f"{pip_install()} {' '.join(shlex.quote(r) for r in requirements)}"


def _requirement(dist: str, extra: str | None) -> str:
    return shlex.quote(f"{dist}[{extra}]") if extra else dist


def install_command(dist: str, extra: str | None = None) -> str:
    """A shell command that installs distribution ``dist`` (with ``extra``) of
    this project from where this pallas-frontend came from; a wheelhouse that
    was not recorded is written ``WHEELHOUSE`` and explained after the command."""
    root = clone_root()
    if root is not None:
        project = root if dist == FRONTEND else root / "plugins" / dist.replace("-", "_")
        if project.is_dir():
            target = f"{project}[{extra}]" if extra else str(project)
            try:     # shorter, and still right, from inside the clone
                shown = os.path.relpath(target, Path.cwd())
                target = shown if not shown.startswith("..") else target
            except ValueError:     # another drive (Windows)
                pass
            return f"{pip_install()} -e {shlex.quote(target)}"
    if PUBLISHED:
        return f"{pip_install()} {_requirement(dist, extra)}"
    house = wheelhouse()
    links = shlex.quote(str(house)) if house is not None else WHEELHOUSE_PLACEHOLDER
    command = f"{pip_install()} --find-links {links} {_requirement(dist, extra)}"
    if house is None:
        command += (f" ({WHEELHOUSE_PLACEHOLDER}: the folder of wheels {FRONTEND} was installed "
                    "from, the DIR you gave --find-links: replace WHEELHOUSE by it; set "
                    "PIP_FIND_LINKS=DIR and pip and these hints find it alone; in a clone, "
                    "python tools/build_wheelhouse.py DIR builds one; "
                    "the distributions are on no index yet)")
    return command


def extra_command(dist: str, extra: str) -> str:
    """A command that installs what extra ``extra`` of the installed ``dist``
    adds (third-party packages, on PyPI), read from ``dist``'s metadata; works
    wherever ``dist`` came from. ``install_command(dist, extra)`` when ``dist``
    is not installed or its metadata names none."""
    try:
        lines = metadata.requires(dist) or []
    except metadata.PackageNotFoundError:
        lines = []
    marker = re.compile(r"""^extra\s*==\s*["']%s["']$""" % re.escape(extra))
    wanted = []
    for line in lines:      # 'libtpu==0.0.50.*; extra == "libtpu"'
        requirement, _, condition = line.partition(";")
        if marker.match(condition.strip()):
            wanted.append(shlex.quote(requirement.strip()))
    if not wanted:
        return install_command(dist, extra)
    return f"{pip_install()} {' '.join(wanted)}"


def backend_install_command(name: str, extra: str | None = None) -> str | None:
    """``install_command`` for backend ``name`` when this project ships it, else None."""
    dist = SHIPPED.get(name)
    return install_command(dist, extra) if dist is not None else None
