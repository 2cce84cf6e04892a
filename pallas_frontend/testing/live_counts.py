"""Live test counts for the README's test command (``tools/run_tests.py``).

A JUnit report is written only when its pytest session ends, so a tox env's
counts were unknown while it ran (the progress line read "0 tests" for minutes).
When the folder of ``--junitxml PATH`` holds the marker file ``MARKER`` (which
``run_tests.py`` puts there), this plugin rewrites ``PATH`` with the suffix
``.live.json`` after every test report: ``{"passed": n, "failed": n,
"skipped": n, "errors": n, "finished": bool}``, counted as the JUnit report
counts them. Anywhere else it does nothing. Pure Python: no JAX, cheap to load.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

MARKER = ".live-counts"
SUFFIX = ".live.json"


def live_path(junit_xml: str | os.PathLike, base: str | os.PathLike = ".") -> Path | None:
    """Where the live counts of a session reporting to ``junit_xml`` go, or None
    when its folder did not ask for them."""
    xml = Path(base) / Path(junit_xml).expanduser()
    if not (xml.parent / MARKER).is_file():
        return None
    return xml.with_name(xml.name[:-4] + SUFFIX if xml.name.endswith(".xml") else
                         xml.name + SUFFIX)


class LiveCounts:
    """Counts test reports as they arrive (in xdist's controller, which gets every
    worker's reports) and rewrites the file atomically after each."""

    def __init__(self, path: Path):
        self.path = path
        self.counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
        self._write(finished=False)

    def pytest_runtest_logreport(self, report):
        if report.when == "call":
            key = {"passed": "passed", "failed": "failed"}.get(report.outcome, "skipped")
        elif report.failed:                  # setup or teardown: an error, as JUnit says
            key = "errors"
        elif report.when == "setup" and report.skipped:
            key = "skipped"
        else:
            return
        self.counts[key] += 1
        self._write(finished=False)

    def pytest_collectreport(self, report):
        if report.failed:                    # a module that does not import
            self.counts["errors"] += 1
            self._write(finished=False)

    def pytest_sessionfinish(self, session):
        self._write(finished=True)

    def _write(self, finished: bool) -> None:
        tmp = self.path.with_name(self.path.name + f".{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps({**self.counts, "finished": finished}))
            os.replace(tmp, self.path)
        except OSError:                      # progress is a nicety: never fail a run for it
            pass


def register(config) -> None:
    """Registers the counter in a session whose JUnit folder asks for live counts."""
    xml = getattr(config.option, "xmlpath", None)
    if not xml or hasattr(config, "workerinput"):     # xdist workers: the controller counts
        return
    path = live_path(xml, config.invocation_params.dir)
    if path is not None:
        config.pluginmanager.register(LiveCounts(path), "pallas_frontend_live_counts")
