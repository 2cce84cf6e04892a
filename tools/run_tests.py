"""The README's test command: ``tox p`` with feedback while it runs and counts at the end.

    .venv-tox/bin/python tools/run_tests.py [tox arguments, e.g. -e docs,wheels]

``tox p`` alone shows a spinner that counts running envs (or, off a terminal,
nothing until an env ends), and no test counts for envs that pass. Here:

- every ``--every`` seconds (default 30) one line: envs finished out of all,
  the tests run so far (passed, skipped, failed; running envs included), each
  running env with its passed and failed so far, the time;
- at the end, per env: its tox result, passed/skipped/failed/errors and time;
  the slowest tests of the run; wall time and CPU time (user + system of
  every process tox started), so a run can be compared on another machine;
- last, a pytest-style line (``N passed, N skipped, N failed in ...``) for CI.

The counts come from each env's JUnit XML report: tox.ini gives every pytest
command ``--junitxml={toxworkdir}/results/{envname}.xml``; while an env runs,
from the ``<envname>.live.json`` the frontend's pytest plugin writes beside it
(``pallas_frontend.testing.live_counts``). The exit status is tox's.
"""

from __future__ import annotations

import argparse
import configparser
import dataclasses
import json
import os
import re
import resource
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# pallas_frontend.testing.live_counts (a pytest11 plugin, in every env) writes
# <env>.live.json beside <env>.xml after each test where this marker is
LIVE_MARKER, LIVE_SUFFIX = ".live-counts", ".live.json"
RESULT_LINE = re.compile(r"^\s*(?P<env>[\w.-]+): (?P<status>OK|FAIL|SKIP)\b(?P<rest>.*)$")


@dataclasses.dataclass
class Counts:
    passed: int = 0
    skipped: int = 0
    failed: int = 0
    errors: int = 0
    seconds: float = 0.0

    def add(self, other: Counts) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def words(self) -> str:
        text = f"{self.passed} passed, {self.skipped} skipped, {self.failed} failed"
        return text + (f", {self.errors} errors" if self.errors else "")


def read_report(path: Path) -> tuple[Counts, list[tuple[float, str]]]:
    """(counts, [(seconds, test id)]) of one JUnit XML report."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts, times = Counts(), []
    for suite in suites:
        total = int(suite.get("tests", 0))
        counts.failed += int(suite.get("failures", 0))
        counts.errors += int(suite.get("errors", 0))
        counts.skipped += int(suite.get("skipped", 0))
        counts.passed += total - int(suite.get("failures", 0)) - int(suite.get("errors", 0)) \
            - int(suite.get("skipped", 0))
        counts.seconds += float(suite.get("time", 0.0))
        for case in suite.iter("testcase"):
            name = f"{case.get('classname', '')}::{case.get('name', '')}".lstrip(":")
            times.append((float(case.get("time", 0.0)), name))
    return counts, times


def envlist(args: list[str]) -> list[str]:
    """The envs this run will run: those given with ``-e``, else tox.ini's envlist
    (``tox l`` would add the envs outside it, which ``tox p`` does not run)."""
    chosen = next((args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-e", "--env")), None)
    if chosen is None:
        ini = configparser.ConfigParser(interpolation=None)
        ini.read(REPO / "tox.ini")
        chosen = ini["tox"]["envlist"]
    return [e.strip() for e in chosen.split(",") if e.strip()]


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


class Progress:
    def __init__(self, envs: list[str], results: Path):
        self.envs, self.results = envs, results
        self.status: dict[str, str] = {}          # env -> OK / FAIL ... (tox's word)
        self.start = time.monotonic()
        self.lock = threading.Lock()

    def reports(self) -> dict[str, tuple[Counts, list]]:
        found = {}
        for env in self.envs:
            path = self.results / f"{env}.xml"
            if path.is_file():
                try:
                    found[env] = read_report(path)
                except (ET.ParseError, OSError):     # being written
                    continue
        return found

    def live(self) -> dict[str, Counts]:
        """Counts so far of the envs whose pytest is running (``LIVE_SUFFIX`` files,
        rewritten after every test by pallas_frontend.testing.live_counts)."""
        found = {}
        for env in self.envs:
            try:
                data = json.loads((self.results / f"{env}{LIVE_SUFFIX}").read_text())
                found[env] = Counts(**{k: int(data.get(k, 0)) for k in
                                       ("passed", "skipped", "failed", "errors")})
            except (OSError, ValueError, TypeError):     # none yet, or being replaced
                continue
        return found

    def line(self) -> str:
        with self.lock:
            done = [e for e in self.envs if e in self.status]
        total = Counts()
        for env, (counts, _) in self.reports().items():
            if env in done:
                total.add(counts)
        live = {e: c for e, c in self.live().items() if e not in done}
        for counts in live.values():
            total.add(counts)
        running = sorted(set(_running_envs()) | set(live))
        shown = [f"{e} {live[e].passed} passed, {live[e].failed + live[e].errors} failed"
                 if e in live else e for e in running]
        return (f"[tests] {len(done)}/{len(self.envs)} envs done, "
                f"{total.passed + total.skipped + total.failed + total.errors} tests so far "
                f"({total.words()})"
                + (f"; running: {'; '.join(shown)}" if shown else "")
                + f"; {_minutes(time.monotonic() - self.start)}")


def _running_envs() -> list[str]:
    """Envs whose processes are alive now (their paths under .tox/ in a command line)."""
    try:
        out = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True).stdout
    except OSError:
        return []
    names = set(re.findall(re.escape(str(REPO / ".tox")) + r"/([\w.-]+)/", out))
    return sorted(n for n in names if not n.startswith(".") and n != "results")


def summary(progress: Progress, wall: float, cpu: float, slowest: int) -> tuple[str, Counts]:
    reports = progress.reports()
    rows, total, times = [], Counts(), []
    for env in progress.envs:
        counts, env_times = reports.get(env, (None, []))
        status = progress.status.get(env, "?")
        if counts is None:
            rows.append(f"  {env:<16} {status:<5} (no test report)")
            continue
        total.add(counts)
        times += [(t, f"{env}: {name}") for t, name in env_times]
        rows.append(f"  {env:<16} {status:<5} {counts.words():<44} {counts.seconds:7.1f} s")
    times.sort(reverse=True)
    lines = ["", "per env (tox result, tests, pytest's time):", *rows]
    if times and slowest:
        lines += ["", f"slowest {min(slowest, len(times))} tests:"]
        lines += [f"  {t:7.1f} s  {name}" for t, name in times[:slowest]]
    lines += ["", f"wall {_minutes(wall)}, CPU {cpu / 60:.1f} min (user + system of every "
                  f"process; {os.cpu_count()} cores)"]
    return "\n".join(lines), total


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--every", type=float, default=30.0, help="seconds between progress lines")
    p.add_argument("--slowest", type=int, default=10, help="how many slowest tests to name")
    args, tox_args = p.parse_known_args(argv)
    tox = [sys.executable, "-m", "tox"]
    envs = envlist(tox_args)
    results = REPO / ".tox" / "results"
    results.mkdir(parents=True, exist_ok=True)
    for env in envs:                          # an old report must not count for this run
        (results / f"{env}.xml").unlink(missing_ok=True)
        (results / f"{env}{LIVE_SUFFIX}").unlink(missing_ok=True)
    (results / LIVE_MARKER).touch()           # asks each env's pytest for live counts
    progress = Progress(envs, results)
    print(f"[tests] tox p: {len(envs)} envs ({', '.join(envs)}); a line every "
          f"{args.every:g} s, counts at the end", flush=True)
    # unbuffered: tox's line for an ended env reaches us (and the progress line) at once
    process = subprocess.Popen([*tox, "p", *tox_args], cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, bufsize=1,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    stop = threading.Event()

    def beat():
        while not stop.wait(args.every):
            print(progress.line(), flush=True)
    threading.Thread(target=beat, daemon=True).start()
    for line in process.stdout:
        sys.stdout.write(line)
        m = RESULT_LINE.match(line)
        if m and m["env"] in envs:
            with progress.lock:
                progress.status[m["env"]] = m["status"]
            if not line.startswith(" "):      # an env just ended (the final summary is indented)
                print(progress.line(), flush=True)
    code = process.wait()
    stop.set()
    wall = time.monotonic() - progress.start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    text, total = summary(progress, wall, usage.ru_utime + usage.ru_stime, args.slowest)
    print(text)
    # the line CI reads (pytest's form)
    failed_envs = [e for e in envs if progress.status.get(e) != "OK"]
    envs_note = f", {len(failed_envs)} envs not OK ({', '.join(failed_envs)})" if failed_envs \
        else ""
    print(f"== {total.words()}{envs_note} in {wall:.0f}s ({len(envs)} tox envs) ==", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
