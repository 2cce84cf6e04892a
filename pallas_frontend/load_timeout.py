"""Loading a plugin under a time limit: an import that blocks (a network
mount, a device probe that waits forever, a deadlock) must not hang
``pallas backends`` or ``pl.backends()``, the diagnostics users are told to run.

The import runs in a daemon thread; after ``PALLAS_FRONTEND_IMPORT_TIMEOUT``
seconds (default 20; 0: no limit) the caller stops waiting and records where
the thread is blocked. The thread is left running (Python cannot stop it);
being a daemon, it does not keep the process alive.

What is enforced, precisely: the caller stops waiting at the limit whenever
the importing thread lets other threads run, which pure Python code does every
few milliseconds (``sys.getswitchinterval()``) and blocking I/O, sleeps and
most native libraries do while they wait. A single native call that holds the
GIL (an extension's long computation, a ``ctypes.PyDLL`` call) stops every
thread of the process, the waiting one included, until it returns: no thread
can end that wait, so the caller resumes only then. The outcome does not
depend on it: an import that returns after the limit, however late the caller
saw it, is recorded as timed out (``PluginImportTimeout``), saying for how long
it held the caller; it is not used.

An abandoned import may hold Python's global import lock (``_imp``): then
every later import in any thread (another plugin's, even a ``find_spec``)
waits for it, which would stretch a 3 s limit to however long that import
blocks. So once an abandoned call holds the lock, further plugin imports are
not started but recorded as failures at once, naming the holder
(``import_lock_holder``), and the presence checks of ``backend_needs`` skip.
"""

from __future__ import annotations

import _imp
import sys
import sysconfig
import threading
import time
import traceback
from collections.abc import Callable

from pallas_frontend.env_config import (  # noqa: F401 (names of this module's API)
    DEFAULT_IMPORT_TIMEOUT, ENV_IMPORT_TIMEOUT, import_timeout)


class PluginImportTimeout(TimeoutError):
    """A plugin's import or hook did not return within the import timeout."""


#: how much later than the limit the caller may resume before its wait is blamed on the GIL
_GIL_SLACK_S = 1.0

_abandoned: list[tuple[threading.Thread, str]] = []   # (thread, what it was doing)


def import_lock_holder() -> str | None:
    """What an abandoned call is doing, when one is alive and Python's import lock is
    held (by it, as far as can be told: this thread never holds it between imports)."""
    alive = [(t, what) for t, what in _abandoned if t.is_alive()]
    _abandoned[:] = alive
    if alive and _imp.lock_held():
        return alive[0][1]
    return None


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
    holder = import_lock_holder()
    if holder is not None and what == "its import":
        raise PluginImportTimeout(
            f"its import was not started: Python's import lock is held by an abandoned call "
            f"({holder}) that did not return within {ENV_IMPORT_TIMEOUT}, so this import would "
            "wait for it. Fix or uninstall that plugin (or leave it out with "
            "PALLAS_FRONTEND_BACKENDS).")
    if limit is None:
        return fn()
    result: dict[str, object] = {}

    def target():
        try:
            result["value"] = fn()
        except BaseException as e:  # handed to the caller, which records it
            result["error"] = e
        result["done"] = time.monotonic()
    worker = threading.Thread(target=target, name=f"pallas_frontend: {label or what}",
                              daemon=True)
    start = time.monotonic()
    worker.start()
    worker.join(limit)
    waited = time.monotonic() - start
    held = (f" It held Python's GIL (native code that lets no other thread run), so the "
            f"caller could stop waiting only after {waited:.1f} s."
            if waited > limit + _GIL_SLACK_S else "")
    if not worker.is_alive() and result["done"] - start > limit:
        # it returned, but after the limit (see the module doc): the same outcome as a timeout
        raise PluginImportTimeout(
            f"{what} did not return within {limit:g} s ({ENV_IMPORT_TIMEOUT}): it returned "
            f"after {result['done'] - start:.1f} s, so it was not used.{held} Fix the plugin, "
            f"or raise {ENV_IMPORT_TIMEOUT} if it is just slow.") from result.get("error")
    if worker.is_alive():
        _abandoned.append((worker, f"{label or what}"))
        where, stack = _blocked_at(worker)
        raise PluginImportTimeout(
            f"{what} did not return within {limit:g} s ({ENV_IMPORT_TIMEOUT}) and was "
            f"abandoned; it is blocked at {where or 'an unknown line'}.{held} Fix the plugin, or "
            f"raise {ENV_IMPORT_TIMEOUT} if it is just slow.\nStack of the blocked "
            f"call:\n{stack}")
    if "error" in result:
        raise result["error"]
    return result["value"]
