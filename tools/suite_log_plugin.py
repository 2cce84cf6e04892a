"""pytest plugin (``-p suite_log_plugin``): which tests of a JAX test file run,
and a log of each as it starts and ends, so that a run cut by a time limit, a
SIGKILL or a crash in native code keeps every outcome it reached (a JUnit
report is written only at the end). Used by tools/tpu_cpu_suite.py (CPU
rehearsal) and tools/tpu_native.py (the chip), through
``jax_suite.run_logged``.

- ``PALLAS_SUITE_ONLY`` / ``PALLAS_SUITE_SKIP``: files of ``Class::test`` ids,
  one a line: keep only those tests / leave those out;
- ``PALLAS_SUITE_PER_TEST=N``: keep the first N cases of each parameterized
  test (a sample of a file too long to run whole);
- ``PALLAS_SUITE_LOG``: one JSON line as each test starts and one with its
  outcome, each written at once;
- ``PALLAS_SUITE_TEST_LIMIT=S``: a test still running after S seconds is
  logged as failed and the process exits with ``TEST_LIMIT_EXIT``, so that
  ``run_logged`` goes on with the tests after it (on a chip, one test that does
  not end would otherwise spend the rest of the file's time). JAX's backend is
  started before the first test, so that test's clock does not also hold the
  process's start-up (on the v5e, 20 s and more: a test after a limit-ended
  one starts a new process).
"""

from __future__ import annotations

import collections
import json
import os
import threading
from pathlib import Path

TEST_LIMIT_EXIT = 75      # the exit status of a process that ended a test at its limit
_watchdog: threading.Timer | None = None


def test_id(nodeid: str) -> str:
    """``Class::test`` (as tools/jax_suite.parse_junit names it, less the file)."""
    return nodeid.split("::", 1)[1] if "::" in nodeid else nodeid


def _ids(var: str) -> set[str] | None:
    path = os.environ.get(var)
    return set(Path(path).read_text().split("\n")) if path else None


def pytest_collection_modifyitems(config, items):
    only, skip = _ids("PALLAS_SUITE_ONLY"), _ids("PALLAS_SUITE_SKIP") or set()
    chosen = [i for i in items if (only is None or test_id(i.nodeid) in only)
              and test_id(i.nodeid) not in skip]
    if per_test := int(os.environ.get("PALLAS_SUITE_PER_TEST", "0")):
        seen = collections.Counter()
        for i in list(chosen):
            # absl's parameterized cases wrap the test method they were made from
            fn = getattr(i, "function", None)
            key = (getattr(i.cls, "__name__", ""), getattr(getattr(fn, "__wrapped__", fn),
                                                           "__name__", i.name))
            seen[key] += 1
            if seen[key] > per_test:
                chosen.remove(i)
    if len(chosen) < len(items):
        kept = set(map(id, chosen))
        config.hook.pytest_deselected(items=[i for i in items if id(i) not in kept])
        items[:] = chosen


def pytest_sessionstart(session):
    if float(os.environ.get("PALLAS_SUITE_TEST_LIMIT", "0")):
        try:
            import jax
            jax.jit(lambda x: x + 1)(1).block_until_ready()
        except Exception:       # noqa: BLE001 - the tests meet it again and report it
            pass


def _log(record: dict) -> None:
    if path := os.environ.get("PALLAS_SUITE_LOG"):
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")


def _expire(test: str, limit: float) -> None:
    _log(dict(test=test, outcome="failed", text="", seconds=limit,
              message=f"did not end within the per-test limit of {limit:g} s "
                      "(PALLAS_SUITE_TEST_LIMIT); the process was ended"))
    os._exit(TEST_LIMIT_EXIT)


def pytest_runtest_logstart(nodeid, location):
    global _watchdog
    _log(dict(test=test_id(nodeid), outcome="started"))
    if limit := float(os.environ.get("PALLAS_SUITE_TEST_LIMIT", "0")):
        _watchdog = threading.Timer(limit, _expire, (test_id(nodeid), limit))
        _watchdog.daemon = True
        _watchdog.start()


def pytest_runtest_logfinish(nodeid, location):
    if _watchdog is not None:
        _watchdog.cancel()


def pytest_runtest_logreport(report):
    # the call's outcome; setup's when it did not pass (a skip, a failed fixture);
    # teardown's when it failed
    if not (report.when == "call" or report.outcome != "passed"):
        return
    if report.outcome == "skipped":
        why = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _log(dict(test=test_id(report.nodeid), outcome="skipped",
                  message=why.removeprefix("Skipped: "), text="",
                  seconds=round(report.duration, 2)))
        return
    crash = getattr(report.longrepr, "reprcrash", None)
    _log(dict(test=test_id(report.nodeid), outcome=report.outcome,
              message=getattr(crash, "message", "") or "",
              text=report.longreprtext[-20000:] if report.outcome == "failed" else "",
              seconds=round(report.duration, 2)))
