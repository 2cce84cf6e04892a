"""Loading a plugin under a time limit: an import that blocks (a network
mount, a device probe that waits forever, a deadlock) must not hang
``pallas backends`` or ``pl.backends()``, the diagnostics users are told to run.

The import runs in a daemon thread; after ``PALLAS_FRONTEND_IMPORT_TIMEOUT``
seconds (default 20; 0: no limit) the caller stops waiting and records where
the thread is blocked. The thread is left running (Python cannot stop it);
being a daemon, it does not keep the process alive.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
import traceback
from collections.abc import Callable

from pallas_frontend.env_config import ConfigError

ENV_IMPORT_TIMEOUT = "PALLAS_FRONTEND_IMPORT_TIMEOUT"
DEFAULT_IMPORT_TIMEOUT = 20.0


class PluginImportTimeout(TimeoutError):
    """A plugin's import or hook did not return within the import timeout."""


def import_timeout() -> float | None:
    """Seconds a plugin's import may take (``PALLAS_FRONTEND_IMPORT_TIMEOUT``); None: no limit."""
    raw = os.environ.get(ENV_IMPORT_TIMEOUT, "").strip()
    if not raw:
        return DEFAULT_IMPORT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise ConfigError(
            f"{ENV_IMPORT_TIMEOUT}={raw!r} is not a number of seconds: set it to a "
            f"non-negative number (e.g. {ENV_IMPORT_TIMEOUT}=60; 0 means no limit), or unset "
            f"it for the default of {DEFAULT_IMPORT_TIMEOUT:g} s")
    return value or None


def _blocked_at(thread: threading.Thread) -> tuple[str, str]:
    """(innermost line outside the standard library, whole stack) of a live thread."""
    frame = sys._current_frames().get(thread.ident)
    if frame is None:
        return "", ""
    stack = traceback.extract_stack(frame)
    paths = sysconfig.get_paths()
    installed = (paths["purelib"], paths["platlib"])

    def stdlib(name: str) -> bool:
        return name.startswith("<frozen") or (name.startswith(paths["stdlib"])
                                             and not name.startswith(installed))
    own = [f for f in stack if not stdlib(f.filename)]
    where = own[-1] if own else stack[-1]
    return f"{where.filename}:{where.lineno} ({where.line or where.name})", \
        "".join(traceback.format_list(stack))


def call_with_timeout(fn: Callable[[], object], what: str, limit: float | None,
                      label: str = "") -> object:
    """``fn()``, in a daemon thread (named after ``label``) when ``limit``
    (seconds) is set; raises what it raised, or ``PluginImportTimeout`` saying
    that ``what`` (e.g. "its import") did not return and where it blocks."""
    if limit is None:
        return fn()
    result: dict[str, object] = {}

    def target():
        try:
            result["value"] = fn()
        except BaseException as e:  # handed to the caller, which records it
            result["error"] = e
    worker = threading.Thread(target=target, name=f"pallas_frontend: {label or what}",
                              daemon=True)
    worker.start()
    worker.join(limit)
    if worker.is_alive():
        where, stack = _blocked_at(worker)
        raise PluginImportTimeout(
            f"{what} did not return within {limit:g} s ({ENV_IMPORT_TIMEOUT}) and was "
            f"abandoned; it is blocked at {where or 'an unknown line'}. Fix the plugin, or "
            f"raise {ENV_IMPORT_TIMEOUT} if it is just slow.\nStack of the blocked "
            f"call:\n{stack}")
    if "error" in result:
        raise result["error"]
    return result["value"]
