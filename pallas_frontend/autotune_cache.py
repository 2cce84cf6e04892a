"""The autotune cache: which candidate won for a kernel on a device, kept in a JSON file.

One file holds every entry, keyed by ``cache_key(name, signature, device_kind,
backend)``. An entry is plain JSON, so measurements made elsewhere (a script on
a TPU host without this project, an export-and-run route) can fill the same
file: ``config_label`` names a candidate, ``choose_winner`` picks from a
``{label: seconds}`` table, ``make_entry`` and ``write_entry`` store it::

    {"format": "pallas_frontend.autotune/1",
     "entries": {"<key>": {"winner": "<label>", "seconds": {"<label>": 1.2e-3, ...},
                           "errors": {"<label>": "why it was dropped"}, ...}}}

Where the file is: ``$PALLAS_FRONTEND_AUTOTUNE_CACHE`` (a file path; ``off`` keeps
choices in memory only), else ``$XDG_CACHE_HOME/pallas_frontend/autotune.json``,
else ``~/.cache/pallas_frontend/autotune.json``. Writes are atomic (a temporary
file renamed over the old one) and safe between processes and threads: a writer
holds a lock file beside the cache (``<name>.lock``, removed when it is done)
while it reads the file again, adds its entry to what it finds and renames the
result over it, so no writer loses another's entry. A file that cannot be read
or parsed (not UTF-8, not JSON, nested too deeply, not a cache file) is ignored
with a warning, never an error; a path that is not a regular file (a FIFO, a
device) is never opened: it is refused with a warning, and the choice is kept
in memory only.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import tempfile
import threading
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pallas_frontend import env_config

ENV_CACHE = env_config.ENV_AUTOTUNE_CACHE
FORMAT = "pallas_frontend.autotune/1"


def _user_level() -> int:
    """The ``stacklevel`` that makes a warning name the first caller outside the
    frontend (the user's tuned call, not the tuner's internals)."""
    import sys
    here = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame, level = sys._getframe(2), 2          # 1 would be the function that warns
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(here):
        frame, level = frame.f_back, level + 1
    return level


def default_cache_path() -> Path | None:
    """The cache file the environment names; None when ``PALLAS_FRONTEND_AUTOTUNE_CACHE=off``.
    A directory or a path not ending in ``.json`` raises ``ConfigError``."""
    return env_config.autotune_cache_path()


def config_label(config: Mapping[str, Any]) -> str:
    """The stable name of a candidate: its keyword arguments sorted by name, each
    by ``repr`` (e.g. ``"block_shape=(512, 512), block_k=1024"``)."""
    return ", ".join(f"{k}={v!r}" for k, v in sorted(config.items()))


def cache_key(name: str, signature: str, device_kind: str, backend: str | None) -> str:
    """The key of one choice: what is tuned, for which arguments, on which device and backend."""
    return json.dumps({"name": name, "signature": signature, "device_kind": device_kind,
                       "backend": backend}, sort_keys=True)


def choose_winner(seconds: Mapping[str, float | None]) -> str:
    """The label with the fewest seconds; ``None`` (or a non-finite time) marks a
    candidate that did not run. Ties go to the earlier label. Raises ValueError
    when no candidate has a time."""
    timed = [(s, i, label) for i, (label, s) in enumerate(seconds.items())
             if s is not None and math.isfinite(s) and s >= 0]
    if not timed:
        raise ValueError(f"no candidate has a time to choose from: {dict(seconds)}")
    return min(timed)[2]


def make_entry(seconds: Mapping[str, float | None], *, errors: Mapping[str, str] | None = None,
               **info: Any) -> dict[str, Any]:
    """A cache entry from a ``{label: seconds}`` table: the winner, every time,
    why candidates were dropped, and any other JSON-ready ``info`` (e.g. the
    device kind, the JAX version, when it was measured)."""
    return {**info, "winner": choose_winner(seconds), "seconds": dict(seconds),
            "errors": dict(errors or {})}


#: how long a writer waits for another writer's lock before giving up (with a warning)
LOCK_TIMEOUT_S = 10.0

try:
    import fcntl as _fcntl
except ImportError:          # no POSIX file locks (Windows): threads of one process only
    _fcntl = None

_thread_locks: dict[str, threading.Lock] = {}
_thread_locks_guard = threading.Lock()


class _Refused(OSError):
    """The cache path is not something this module reads or writes (its message says why)."""


def _not_regular(mode: int) -> str:
    """What a non-regular file is, in words."""
    kinds = [(stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket")]
    return next((word for test, word in kinds if test(mode)), "not a regular file")


def _refusal(path: Path, mode: int) -> str:
    return (f"autotune cache {path} is {_not_regular(mode)}, not a regular file, so it is "
            f"never opened (opening a FIFO waits for a writer forever); the choice is kept in "
            f"memory only. Point {ENV_CACHE} (or cache=) at a regular .json file, or off.")


def _read_text(path: Path) -> str:
    """The file's text. Opens without blocking and checks, on the open file, that it is
    a regular file: a FIFO or a device raises ``_Refused`` instead of waiting."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise _Refused(_refusal(path, mode))
        data = f.read()
    return data.decode("utf-8")


def read_entries(path: Path | str) -> dict[str, dict[str, Any]]:
    """Every entry of the cache file at ``path``; empty when it does not exist, or
    (with a warning) when it cannot be read, is not a regular file, or is not a
    cache file (not UTF-8, not JSON, nested too deeply, another format)."""
    path = Path(path)
    try:
        text = _read_text(path)
    except FileNotFoundError:
        return {}
    except _Refused as e:
        warnings.warn(str(e), stacklevel=_user_level())
        return {}
    except OSError as e:
        warnings.warn(f"autotune cache {path} cannot be read ({e}); ignoring it", stacklevel=_user_level())
        return {}
    except UnicodeDecodeError as e:
        warnings.warn(f"autotune cache {path} is not UTF-8 text ({e}); ignoring it. Delete the "
                      "file to start a new one.", stacklevel=_user_level())
        return {}
    try:
        data = json.loads(text)
    except ValueError as e:
        warnings.warn(f"autotune cache {path} is not valid JSON ({e}); ignoring it. Delete the "
                      "file to start a new one.", stacklevel=_user_level())
        return {}
    except RecursionError:
        warnings.warn(f"autotune cache {path} is JSON nested too deeply to parse (a cache file "
                      "is two levels of objects); ignoring it. Delete the file to start a new "
                      "one.", stacklevel=_user_level())
        return {}
    entries = data.get("entries") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(entries, dict):
        warnings.warn(f"autotune cache {path} is not a {FORMAT} file; ignoring it. Delete the "
                      "file to start a new one.", stacklevel=_user_level())
        return {}
    return {k: e for k, e in entries.items()
            if isinstance(e, dict) and isinstance(e.get("winner"), str)}


def read_entry(path: Path | str, key: str) -> dict[str, Any] | None:
    """The entry stored under ``key``, or None."""
    return read_entries(path).get(key)


def _thread_lock(path: Path) -> threading.Lock:
    name = os.path.abspath(path)
    with _thread_locks_guard:
        return _thread_locks.setdefault(name, threading.Lock())


@contextlib.contextmanager
def _writer_lock(path: Path, timeout: float):
    """Holds the writers' lock of the cache file ``path``: a lock in this process
    (threads) and an exclusive ``flock`` of ``<path>.lock`` (processes), which the
    holder removes when done. Raises ``TimeoutError`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    in_process = _thread_lock(path)
    if not in_process.acquire(timeout=max(timeout, 0)):
        raise TimeoutError(f"another thread of this process held {path}'s lock for {timeout:g} s")
    try:
        if _fcntl is None:
            yield
            return
        lock_path = path.with_name(path.name + ".lock")
        while True:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                while True:
                    try:
                        _fcntl.flock(fd, _fcntl.LOCK_EX | _fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() > deadline:
                            raise TimeoutError(f"another process held {lock_path} for "
                                               f"{timeout:g} s") from None
                        time.sleep(0.005)
                # The holder before us may have removed the file we locked (and a third
                # writer made a new one): ours counts only while it is the one at the path.
                try:
                    current = os.stat(lock_path)
                except FileNotFoundError:
                    current = None
                mine = os.fstat(fd)
                if current is not None and (current.st_ino, current.st_dev) == (
                        mine.st_ino, mine.st_dev):
                    break
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.unlink(lock_path)        # while still held: see the check above
            os.close(fd)
    finally:
        in_process.release()


def write_entry(path: Path | str, key: str, entry: Mapping[str, Any]) -> bool:
    """Stores ``entry`` under ``key``, other entries kept, atomically: under the
    writers' lock it reads the file again, adds the entry to what it finds (so
    concurrent writers, processes or threads, lose nothing) and renames a new
    file over it. Returns False, with a warning, when the file cannot be written
    (an unwritable place, a path that is not a regular file, a lock held by
    another writer for ``LOCK_TIMEOUT_S`` seconds)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _writer_lock(path, LOCK_TIMEOUT_S):
            try:
                mode = os.stat(path).st_mode
            except FileNotFoundError:
                mode = None
            if mode is not None and not stat.S_ISREG(mode):
                raise _Refused(_refusal(path, mode))
            entries = read_entries(path)
            entries[key] = dict(entry)
            text = json.dumps({"format": FORMAT, "entries": entries}, indent=1, sort_keys=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(text + "\n")
                os.replace(tmp, path)   # readers see the old file or the new one, never half
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
    except _Refused as e:
        warnings.warn(str(e), stacklevel=_user_level())
        return False
    except (OSError, TimeoutError) as e:
        warnings.warn(f"autotune cache {path} cannot be written ({e}); the choice is kept in "
                      f"memory only. Point cache= (or {ENV_CACHE}) at a writable file.", stacklevel=_user_level())
        return False
    return True
