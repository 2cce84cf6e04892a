"""Run JAX's own Pallas tests against JAX's Pallas and against ours; tabulate.

    python tools/jax_suite.py --jax-src PATH [--rev REV] [--files a_test.py ... | all]
                              [--work DIR] [--out docs/jax-suite.md] [--reuse-jax]
                              [--timeout S] [--jobs N]

PATH is a JAX source checkout or a bare clone (then REV, default HEAD, names
the revision to read). For each test file of ``tests/pallas/`` two copies are
made: one as it stands ("jax") and one whose Pallas imports name
``pallas_frontend``, ``pallas_tpu``, ``pallas_triton`` and ``pallas_mgpu``
("ours"), private imports included where what they import is public in JAX
(``from jax._src.pallas import primitives`` used only for ``multiple_of``
becomes ``import pallas_frontend``): what a user porting the code would write
(``rewrite_private_public``). Helpers the tests import from ``jax._src`` that
the installed jax no longer ships are replaced by small shims
(``tools/jax_suite_shims``), identically in both copies. Each copy runs under
pytest in its own process with a JUnit report; the page written to ``--out``
gives, per file, passed / failed / skipped for both, and every test that
passes under JAX but not under ours with the first line of its failure.
``tools/jax_suite_reasons.json`` maps such tests (``file::Class::test`` or a
prefix ending in ``*``) to a reason, e.g. that the test inspects JAX
internals.

``--files all`` (the default) takes every ``*_test.py`` of the revision. A
file whose two copies are identical (no Pallas module it imports has a
stand-in) tests only JAX: its JAX side runs, it is listed, not run under ours
and not counted; so is a file with no test passing under JAX on CPU. Each file
runs in the environment its plugins need (``file_env``) under ``--timeout``:
at the limit pytest is interrupted, the tests it finished are kept and the
page says the file was cut. JAX's side does not depend on our code: its
results are cached in ``--work/jax-cache`` per JAX revision, installed jax,
copy text and shims, and ``--reuse-jax`` reads them instead of running it
again (files not cached still run). ``--jobs`` runs that many files at once.

The environment running this script needs jax, pallas_frontend and its
plugins, pytest, hypothesis and absl-py. Nothing here is run by CI: it needs a
JAX checkout, and the resulting page is committed with its date and versions.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import datetime
import hashlib
import importlib
import importlib.util
import inspect
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHIMS = HERE / "jax_suite_shims"
REASONS = HERE / "jax_suite_reasons.json"

# What the plugins need on a machine without accelerators (tox.ini's tpu env):
# libtpu must not look for a TPU; JAX stays on CPU. JAX's TPU interpret mode
# runs blocks the chip refuses, so ours' chip checks are off on both sides.
TPU_ENV = {"TPU_ACCELERATOR_TYPE": "v5litepod-4", "TPU_WORKER_HOSTNAMES": "localhost",
           "ALLOW_MULTIPLE_LIBTPU_LOAD": "1", "PALLAS_TPU_CHIP_CHECKS": "0"}


def file_env(name: str, target: str, directory: Path) -> dict[str, str]:
    """The environment one copy of one file runs in; the same for both sides."""
    # The copy's own directory first (its shims), then whatever the caller set (a worktree).
    pythonpath = os.pathsep.join(p for p in (str(directory), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PALLAS_JAX_SUITE_TARGET=target, PYTHONPATH=pythonpath, **TPU_ENV)
    env.setdefault("JAX_PLATFORMS", "cpu")
    # No allow-list (a file may import any plugin), except for the tpu files, which
    # run as tox.ini's tpu env does.
    env.pop("PALLAS_FRONTEND_BACKENDS", None)
    if name.startswith("tpu_"):
        env["PALLAS_FRONTEND_BACKENDS"] = "tpu"
    return env


# JAX's public Pallas modules and the distributions that stand in for them.
OUR_MODULES = {
    "jax.experimental.pallas.tpu_sc": "pallas_tpu.tpu_sc",
    "jax.experimental.pallas.tpu": "pallas_tpu",
    "jax.experimental.pallas.triton": "pallas_triton",
    "jax.experimental.pallas.mosaic_gpu": "pallas_mgpu",
    "jax.experimental.pallas": "pallas_frontend",
}

# jax._src test helpers the tests import; replaced by a shim only where the
# installed jax lacks them (version skew between the checkout and the wheel).
SKEW_SHIMS = {
    "jax._src.pallas.pallas_test_util": "_suite_pallas_test_util",
    "jax._src.hypothesis_test_util": "_suite_hypothesis_test_util",
}


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def _rewrite_module_imports(src: str, old: str, new: str) -> str:
    """Rewrites both import spellings of module ``old`` to module ``new``."""
    parent, _, leaf = old.rpartition(".")
    new_parent, _, new_leaf = new.rpartition(".")
    if new_parent:
        from_new = f"from {new_parent} import {new_leaf}"
    else:
        from_new = f"import {new_leaf}"
    # `from parent import leaf as alias` / `from parent import leaf`
    pat = re.compile(rf"^(\s*)from {re.escape(parent)} import {re.escape(leaf)}\b(\s+as\s+\w+)?",
                     re.M)

    def repl(m):
        alias = m.group(2) or f" as {leaf}"
        return f"{m.group(1)}{from_new}{alias}"
    src = pat.sub(repl, src)
    # `import a.b.c as alias`
    src = re.sub(rf"^(\s*)import {re.escape(old)}(\s+as\s+\w+)",
                 lambda m: f"{m.group(1)}import {new}{m.group(2)}", src, flags=re.M)
    return src


# Where a name JAX exports from several public Pallas modules is looked for first.
PUBLIC_ORDER = ("jax.experimental.pallas", "jax.experimental.pallas.tpu",
                "jax.experimental.pallas.triton", "jax.experimental.pallas.mosaic_gpu",
                "jax.experimental.pallas.tpu_sc")

_PRIVATE_FROM = re.compile(r"^(\s*)from (jax\._src\.pallas[\w.]*) import (\w+)(\s+as\s+(\w+))?[ \t]*$",
                           re.M)


def _public_homes(name: str, obj) -> list[str]:
    """JAX's public Pallas modules exporting ``obj`` under ``name``, in PUBLIC_ORDER."""
    homes = []
    for module_name in PUBLIC_ORDER:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        # dir(): a deprecated or missing name may answer getattr with a fallback.
        if name in dir(module) and getattr(module, name) is obj:
            homes.append(module_name)
    return homes


def rewrite_private_public(source: str) -> tuple[str, list[str]]:
    """Private imports (``from jax._src.pallas... import x``) of what JAX also
    exports publicly, pointed at ours, as a user porting the code would write
    them: a name -> ``from <ours> import name``; a module all of whose uses
    (``alias.attr``) are public names of one public module -> ``import <ours>
    as alias``. Anything else stays JAX's. Returns the text and what changed."""
    changed = []

    def repl(m):
        indent, module_name, name, alias = m.group(1), m.group(2), m.group(3), m.group(5)
        try:        # a submodule, or a name the module defines
            obj = importlib.import_module(f"{module_name}.{name}")
        except ImportError:
            try:
                obj = getattr(importlib.import_module(module_name), name)
            except (ImportError, AttributeError):
                return m.group(0)
        alias = alias or name
        if inspect.ismodule(obj):
            attrs = set(re.findall(rf"(?<![\w.]){re.escape(alias)}\.(\w+)", source))
            homes = [h for h in PUBLIC_ORDER
                     if attrs and all(h in _public_homes(a, getattr(obj, a, None)) for a in attrs)]
            if not homes:
                return m.group(0)
            changed.append(f"{module_name}.{name} ({', '.join(sorted(attrs))}) -> {homes[0]}")
            return f"{indent}import {OUR_MODULES[homes[0]]} as {alias}"
        homes = _public_homes(name, obj)
        if not homes:
            return m.group(0)
        changed.append(f"{module_name}.{name} -> {homes[0]}")
        return f"{indent}from {OUR_MODULES[homes[0]]} import {name} as {alias}"
    return _PRIVATE_FROM.sub(repl, source), changed


def write_side_copies(jax_src: Path, rev: str, name: str, work: Path,
                      ours_text=None) -> dict[str, Path]:
    """JAX's test file ``name`` at ``rev`` as two folders under ``work``, "jax" and
    "ours" (the Pallas imports swapped), each with the shims; ``ours_text`` may
    rewrite ours' copy further. Returns {side: folder}."""
    skewed = [m for m in SKEW_SHIMS if not _module_exists(m)]
    source = read_tests(jax_src, rev, name)
    dirs = {}
    for side in ("jax", "ours"):
        folder = work / side
        folder.mkdir(parents=True, exist_ok=True)
        for shim in SHIMS.glob("*.py"):
            (folder / shim.name).write_text(shim.read_text())
        text = make_copy(source, side == "ours", skewed)
        if side == "ours" and ours_text is not None:
            text = ours_text(text)
        (folder / name).write_text(text)
        dirs[side] = folder
    return dirs


def make_copy(source: str, ours: bool, skewed: list[str]) -> str:
    for old in skewed:
        src_mod = SKEW_SHIMS[old]
        source = _rewrite_module_imports(source, old, src_mod)
    if ours:
        source, _ = rewrite_private_public(source)
        for old, new in OUR_MODULES.items():
            source = _rewrite_module_imports(source, old, new)
    return source


def read_tests(jax_src: Path, rev: str, name: str) -> str:
    path = jax_src / "tests" / "pallas" / name
    if path.exists():
        return path.read_text()
    out = subprocess.run(["git", "-C", str(jax_src), "show", f"{rev}:tests/pallas/{name}"],
                         check=True, capture_output=True, text=True)
    return out.stdout


def jax_revision(jax_src: Path, rev: str) -> str:
    out = subprocess.run(["git", "-C", str(jax_src), "log", "-1", "--format=%H %cs", rev],
                         capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def our_revision() -> str:
    out = subprocess.run(["git", "-C", str(HERE.parent), "log", "-1", "--format=%h %cs"],
                         capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def wait_or_interrupt(proc: subprocess.Popen, timeout: float) -> bool:
    """Waits for a pytest process started in a session of its own; at ``timeout`` it
    gets SIGINT (pytest still writes its report), then SIGKILL 120 s later. Whether
    it ended within ``timeout``."""
    try:
        proc.wait(timeout=timeout)
        return True
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        return False


def run_copy(directory: Path, name: str, timeout: float, target: str):
    """Runs one file: ({test id: (outcome, first failure line)}, note, seconds).
    At ``timeout`` pytest gets SIGINT (it still writes the report) and ``note`` says so."""
    report = directory / (name + ".xml")
    report.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
           f"--junitxml={report}", "-o", "junit_family=xunit1", name]
    start = time.monotonic()
    note = ""
    proc = subprocess.Popen(cmd, cwd=directory, env=file_env(name, target, directory),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    if not wait_or_interrupt(proc, timeout):
        note = f"cut at the {timeout:.0f} s limit"
    seconds = time.monotonic() - start
    if not report.exists():
        return {f"{name}::<file>": ("failed", note or "pytest wrote no report (crash?)")}, \
            note, seconds
    return parse_junit(report, name), note, seconds


class Stopped(Exception):
    """SIGTERM (what ``timeout`` sends) reached a process that called
    ``stop_on_sigterm``."""


_stop = {"requested": False, "waiting": False}


def stop_on_sigterm() -> None:
    """From now on the first SIGTERM stops the run: inside ``stoppable()`` (a
    wait on a pytest) it raises ``Stopped``, so ``run_logged`` cuts its pytest
    as at its limit and returns what it logged; anywhere else it only marks the
    stop, so what the tool was doing (reading a log, writing its record) ends
    whole. Callers, seeing ``stop_requested()``, write their record and run
    nothing more. Later SIGTERMs are ignored."""
    def stop(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _stop["requested"] = True
        if _stop["waiting"]:
            raise Stopped
    signal.signal(signal.SIGTERM, stop)


@contextlib.contextmanager
def stoppable():
    """The one place a SIGTERM may raise ``Stopped``: a wait on a child process.
    (Raised elsewhere, e.g. while handling a limit's cut, it lost a chip run's
    record on 2026-12-07.)"""
    if _stop["requested"]:
        raise Stopped
    _stop["waiting"] = True
    try:
        yield
    finally:
        _stop["waiting"] = False


def stop_requested() -> bool:
    return _stop["requested"]


def run_logged(args: list[str], cwd: Path, env: dict, stem: Path, limit: float, *,
               only: list[str] | None = None, per_test: int = 0):
    """Runs pytest with ``suite_log_plugin`` and ``args`` (other plugins, the
    tests): ({``Class::test``: (outcome, first line)}, note,
    seconds). Each test's outcome is logged as it ends (``stem``.jsonl), so a
    process killed at ``limit`` keeps what it ran; one that dies in a test (a
    crash in native code) fails that test, and pytest runs again on the tests
    not yet run, as it does after a test the plugin ended at
    ``PALLAS_SUITE_TEST_LIMIT`` (in ``env``). A pytest that fails outside any
    test (a copy that does not import) gives ``<file>`` failed, with the last
    error line of its output (``stem``.out). After ``stop_on_sigterm``, a
    SIGTERM cuts the pytest as ``limit`` does. ``only``/``per_test``: which
    tests (see suite_log_plugin)."""
    from suite_log_plugin import TEST_LIMIT_EXIT
    log, skip = stem.with_name(stem.name + ".jsonl"), stem.with_name(stem.name + ".skip")
    log.unlink(missing_ok=True)
    env = {**env, "PYTHONPATH": os.pathsep.join(
               p for p in (env.get("PYTHONPATH"), str(HERE)) if p),
           "PALLAS_SUITE_LOG": str(log), "PALLAS_SUITE_SKIP": str(skip),
           "PALLAS_SUITE_PER_TEST": str(per_test)}
    if only is not None:
        chosen = stem.with_name(stem.name + ".only")
        chosen.write_text("\n".join(only))
        env["PALLAS_SUITE_ONLY"] = str(chosen)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
           "-p", "suite_log_plugin", *args]
    output = stem.with_name(stem.name + ".out")
    results: dict[str, tuple[str, str]] = {}
    start, note = time.monotonic(), ""
    while True:
        skip.write_text("\n".join(results))
        with open(output, "w") as out:
            proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        try:
            with stoppable():
                rc = proc.wait(timeout=max(1.0, limit - (time.monotonic() - start)))
        except (subprocess.TimeoutExpired, Stopped) as cut:
            # SIGKILL at once: SIGINT waits out a compile in native code, and the
            # log already holds every finished test
            with contextlib.suppress(ProcessLookupError):   # it may have just ended
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc, note = None, (f"cut at the {limit:.0f} s limit" if isinstance(
                cut, subprocess.TimeoutExpired) else "cut: the command running it was stopped")
        running = read_outcome_log(log, results)
        if rc == TEST_LIMIT_EXIT:
            continue  # the plugin ended a test at its limit (logged): on past it
        if running is None and rc not in (None, 0, 1, 5):
            # pytest itself failed (a copy that does not import fails at collection):
            # a failure of the file, not a file that ran nothing
            results["<file>"] = (
                "failed", f"pytest ended with exit status {rc} outside any test: "
                          f"{_last_error(output)}")
        if rc is None or rc in (0, 1, 5) or running is None:
            break     # done, cut, or failed outside any test: the log says what ran
        results[running] = ("failed", f"the test process died (exit status {rc}) in this test")
    return results, note, time.monotonic() - start


def _last_error(output: Path) -> str:
    """The last ``E   ...`` line (or else the last line) pytest printed."""
    lines = [l for l in output.read_text(errors="replace").splitlines() if l.strip()]
    errors = [l[1:].strip() for l in lines if l.startswith("E ")]
    return (errors or lines or ["no output"])[-1][:300]


def read_outcome_log(log: Path, results: dict) -> str | None:
    """Outcomes of a ``suite_log_plugin`` log into ``results``; the test that
    started last and has none (the one a dying process was in), or None."""
    running = None
    for line in log.read_text().splitlines() if log.exists() else []:
        r = json.loads(line)
        if r["outcome"] == "started":
            running = r["test"]
            continue
        why = r["message"] if r["outcome"] == "skipped" else first_line(
            r["message"] or r["text"], r["text"])
        results[r["test"]] = (r["outcome"], why)
        if running == r["test"]:
            running = None
    return running if running not in results else None


def parse_junit(report: Path, name: str) -> dict[str, tuple[str, str]]:
    results: dict[str, tuple[str, str]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        cls = case.get("classname", "").rpartition(".")[2]
        test_id = f"{name}::{cls}::{case.get('name')}" if cls else f"{name}::{case.get('name')}"
        outcome, why = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = "skipped" if tag == "skipped" else "failed"
                why = first_line(node.get("message") or node.text or "", node.text or "")
                break
        results[test_id] = (outcome, why)
    return results


def first_line(message: str, text: str = "") -> str:
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    tb = "Traceback (most recent call last):"
    if lines and (lines[0].endswith(tb) or lines[0] == "collection failure"):
        # Raised in a callback, or while importing: the cause is the report's last exception.
        cause = [m.group(1) for m in re.finditer(r"^E?\s*([\w.]+(?:Error|Exception): .*)$",
                                                  text or message, re.M)
                 if not m.group(1).endswith("(most recent call last):")]
        return f"{lines[0].removesuffix(tb).rstrip(': ')}: {cause[-1]}"[:220] if cause else lines[0][:220]
    return lines[0][:220] if lines else ""


def load_reasons() -> dict[str, str]:
    if REASONS.exists():
        return json.loads(REASONS.read_text())
    return {}


def reason_for(test_id: str, reasons: dict[str, str]) -> str | None:
    if test_id in reasons:
        return reasons[test_id]
    for key, why in reasons.items():
        if key.endswith("*") and test_id.startswith(key[:-1]):
            return why
    return None


def tally(results: dict[str, tuple[str, str]]) -> tuple[int, int, int]:
    outcomes = [o for o, _ in results.values()]
    return outcomes.count("passed"), outcomes.count("failed"), outcomes.count("skipped")


def list_test_files(jax_src: Path, rev: str) -> list[str]:
    directory = jax_src / "tests" / "pallas"
    if directory.is_dir():
        return sorted(p.name for p in directory.glob("*_test.py"))
    out = subprocess.run(["git", "-C", str(jax_src), "ls-tree", "--name-only", rev, "tests/pallas/"],
                         check=True, capture_output=True, text=True)
    return sorted(Path(line).name for line in out.stdout.splitlines() if line.endswith("_test.py"))


def cache_path(work: Path, jax_rev: str, name: str, copy_text: str) -> Path:
    """Where JAX's side of one file is cached: keyed by revision, jax, copy and shims."""
    import jax
    digest = hashlib.sha256(copy_text.encode())
    for shim in sorted(SHIMS.glob("*.py")):
        digest.update(shim.read_bytes())
    folder = f"{jax_rev.split()[0][:12]}-jax{jax.__version__}"
    return work / "jax-cache" / folder / f"{name}.{digest.hexdigest()[:16]}.json"


def save_run(path: Path, run: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(run))


def load_run(path: Path) -> dict:
    run = json.loads(path.read_text())
    return dict(run, results={t: tuple(v) for t, v in run["results"].items()})


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def write_page(out: Path, files, jax_runs, our_runs, jax_only, meta) -> int:
    reasons = load_reasons()
    counted = [n for n in files if n in our_runs]
    idle = [n for n in files if n not in jax_only and n not in our_runs]
    jax_s = sum(jax_runs[n]["seconds"] for n in files)
    our_s = sum(our_runs[n]["seconds"] for n in counted)
    lines = [
        "# JAX's Pallas test suite, run against ours",
        "",
        "Generated by `tools/jax_suite.py` (do not edit by hand). Each file of JAX's",
        "`tests/pallas/` runs twice under pytest on CPU: as it stands (JAX's Pallas) and",
        "with only its Pallas imports changed to `pallas_frontend` / `pallas_tpu` /",
        "`pallas_triton` / `pallas_mgpu`, the test helper's `pallas_call` pointing at ours;",
        "a private import (`jax._src.pallas...`) changes too where all it brings in is",
        "public in JAX, as a user porting the code would change it.",
        "Counted: every file with a Pallas import to change and at least one test passing",
        "under JAX on CPU.",
        "",
        f"- JAX source: {meta['jax_rev']}; installed jax {meta['jax']}, jaxlib {meta['jaxlib']}",
        f"- pallas-frontend: tree at {meta['ours_rev']}; Python {meta['python']}; {meta['machine']}",
        f"- shims for version skew (both runs): {', '.join(meta['skewed']) or 'none'}",
        f"- run: JAX's side {meta['jax_dates']}, ours {meta['date']} (per-file times added "
        f"up: {jax_s / 60:.0f} and {our_s / 60:.0f} min; {meta['jobs']} file(s) at a time, "
        f"on a machine shared with other work): `{meta['command']}`",
        "",
        "| file | JAX passed | JAX failed | JAX skipped | ours passed | ours failed "
        "| ours skipped | lost | s JAX / ours |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lost_rows, explained, cut = [], 0, []
    totals = [0] * 7
    for name in counted:
        j, o = jax_runs[name]["results"], our_runs[name]["results"]
        lost = [t for t, (oc, _) in j.items() if oc == "passed" and o.get(t, ("missing", ""))[0] != "passed"]
        row = (*tally(j), *tally(o), len(lost))
        totals = [a + b for a, b in zip(totals, row)]
        secs = f"{jax_runs[name]['seconds']:.0f} / {our_runs[name]['seconds']:.0f}"
        lines.append(f"| `{name}` | " + " | ".join(str(v) for v in row) + f" | {secs} |")
        cut += [f"`{name}` ({side}: {run['note']})" for side, run in
                (("JAX", jax_runs[name]), ("ours", our_runs[name])) if run.get("note")]
        for t in sorted(lost):
            why = reason_for(t, reasons)
            if why:
                explained += 1
            broken = [m for oc, m in o.values() if m.startswith("collection failure")]
            not_run = f"not reached ({our_runs[name]['note']})" if our_runs[name].get("note") \
                else (broken or ["not collected under ours"])[0]
            oc, msg = o.get(t, ("missing", not_run))
            lost_rows.append((t, oc, why or msg))
    lines += ["| **total** | " + " | ".join(f"**{v}**" for v in totals) + " | |", ""]
    if cut:
        lines += ["Cut at the time limit (the tests finished by then are counted): "
                  + ", ".join(cut) + ".", ""]

    def listing(names):
        return ", ".join(f"`{n}` ({'/'.join(map(str, tally(jax_runs[n]['results'])))})"
                         for n in names) or "none"
    lines += ["Not counted (JAX's passed/failed/skipped in brackets):", "",
              "- testing only JAX (no Pallas import to change): " + listing(jax_only),
              "- no test passing under JAX on CPU: " + listing(idle), ""]
    lines += [f"Passing under JAX but not under ours: {len(lost_rows)} "
              f"({explained} with a stated reason).", ""]
    if lost_rows:  # quoted output (a code block), not statements of the docs' own
        lines += ["Each: the test, its outcome under ours, the first line of its failure or the "
                  "stated reason.", "", "```text"]
        lines += [f"{t} ({oc})\n    {why}" for t, oc, why in lost_rows] + ["```", ""]
    gained = sum(1 for name in counted for t, (oc, _) in our_runs[name]["results"].items()
                 if oc == "passed" and jax_runs[name]["results"].get(t, ("", ""))[0] != "passed")
    lines += [f"Passing under ours but not under JAX: {gained}.", ""]
    out.write_text("\n".join(lines) + _kept_native_section(out))
    return len(lost_rows) - explained


# Sections after the tables that other tools keep up to date, kept (with
# whatever follows the first of them) when the CPU tables are written anew:
# tools/tpu_native.py's chip run; the SparseCore counts of tools/sc_cpu_suite.py
# and tools/sc_mosaic.py; the TPU files' CPU rehearsal of tools/tpu_cpu_suite.py.
KEPT_SECTIONS = ("\n## TPU v5e, natively", "\n## SparseCore",
                 "\n## TPU files rehearsed on CPU")


def _kept_native_section(page: Path) -> str:
    old = page.read_text() if page.exists() else ""
    starts = [i for i in (old.find(h) for h in KEPT_SECTIONS) if i >= 0]
    return old[min(starts):] if starts else ""


def run_many(names, directory: Path, timeout: float, target: str, jobs: int, done) -> None:
    """Runs the files, ``jobs`` at a time; ``done(name, run)`` gets each one's result."""
    def one(name):
        print(f"[{target}] {name} ...", flush=True)
        started = _now()
        results, note, seconds = run_copy(directory, name, timeout, target)
        run = dict(results=results, note=note, seconds=seconds, timeout=timeout,
                   started=started, date=_now(), rev=our_revision())
        done(name, run)
        print(f"[{target}] {name}: passed/failed/skipped = {tally(results)} in {seconds:.0f} s"
              + (f" ({note})" if note else ""), flush=True)
    # Longest files first, so that the last ones to finish are short.
    names = sorted(names, key=lambda n: -(directory / n).stat().st_size)
    with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
        for future in [pool.submit(one, n) for n in names]:
            future.result()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jax-src", type=Path, required=True)
    ap.add_argument("--rev", default="HEAD")
    ap.add_argument("--files", nargs="*", default=["all"], help="tests/pallas files, or all")
    ap.add_argument("--work", type=Path, default=Path("/tmp/pallas-jax-suite"))
    ap.add_argument("--out", type=Path, default=HERE.parent / "docs" / "jax-suite.md")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per file and copy")
    ap.add_argument("--jobs", type=int, default=1, help="files run at once")
    ap.add_argument("--only", choices=("jax", "ours"), help="run one side only")
    ap.add_argument("--reuse-jax", action="store_true", help="JAX's side from --work's cache")
    ap.add_argument("--reuse-ours", nargs="*", default=[], metavar="FILE",
                    help="files (or `all`) whose side of ours an earlier run in --work left")
    args = ap.parse_args(argv)

    import jax
    import jaxlib
    skewed = [m for m in SKEW_SHIMS if not _module_exists(m)]
    from jax._src import config
    dropped_flags = [] if hasattr(config, "jax_pallas_use_mosaic_gpu") else [
        "config.jax_pallas_use_mosaic_gpu (conftest.py)"]
    files = list_test_files(args.jax_src, args.rev) if args.files == ["all"] else args.files
    jax_rev = jax_revision(args.jax_src, args.rev)
    copies = {}
    for side in ("jax", "ours"):
        directory = args.work / side
        directory.mkdir(parents=True, exist_ok=True)
        # Written only where changed: another run may be using this --work directory.
        for shim in SHIMS.glob("*.py"):
            _write_if_changed(directory / shim.name, shim.read_text())
        for name in files:
            text = make_copy(read_tests(args.jax_src, args.rev, name), side == "ours", skewed)
            _write_if_changed(directory / name, text)
            copies[side, name] = text
    jax_only = [n for n in files if copies["jax", n] == copies["ours", n]]

    jax_runs = {}
    if args.reuse_jax:
        for name in files:
            path = cache_path(args.work, jax_rev, name, copies["jax", name])
            run = load_run(path) if path.exists() else None
            if run and not (run["note"] and run.get("timeout", 0) < args.timeout):  # not cut earlier
                jax_runs[name] = run
    if args.only != "ours":
        def keep_jax(name, run):
            jax_runs[name] = run
            save_run(cache_path(args.work, jax_rev, name, copies["jax", name]), run)
        run_many([n for n in files if n not in jax_runs], args.work / "jax", args.timeout,
                 "jax", args.jobs, keep_jax)

    our_runs = {}
    ours_dir = args.work / "ours"
    wanted = [n for n in files if n not in jax_only
              and (n not in jax_runs or tally(jax_runs[n]["results"])[0] > 0)]
    for name in wanted:
        saved = ours_dir / (name + ".json")
        if (name in args.reuse_ours or args.reuse_ours == ["all"]) and saved.exists():
            our_runs[name] = load_run(saved)
    if args.only != "jax":
        def keep_ours(name, run):
            our_runs[name] = run
            save_run(ours_dir / (name + ".json"), run)
        run_many([n for n in wanted if n not in our_runs], ours_dir, args.timeout, "ours",
                 args.jobs, keep_ours)
    if args.only:
        return 0
    def span(runs):  # first start to last end, and the wall-clock minutes between
        first = min(run.get("started", run["date"]) for run in runs.values())
        last = max(run["date"] for run in runs.values())
        wall = datetime.datetime.fromisoformat(last) - datetime.datetime.fromisoformat(first)
        return f"{first} to {last} UTC ({wall.total_seconds() / 60:.0f} min)"
    ordered = [(r["date"], r.get("rev", "?")) for r in our_runs.values()]
    meta = dict(
        date=span(our_runs), jax_dates=span(jax_runs), jax_rev=jax_rev, jax=jax.__version__,
        jaxlib=jaxlib.__version__, python=platform.python_version(),
        ours_rev=" to ".join(dict.fromkeys(rev for _, rev in (min(ordered), max(ordered)))),
        machine=f"{platform.machine()}, {os.cpu_count()} cores, CPU only",
        skewed=skewed + dropped_flags, jobs=args.jobs,
        command="python tools/jax_suite.py --jax-src JAX --files "
                + ("all" if args.files == ["all"] else " ".join(files)))
    unexplained = write_page(args.out, files, jax_runs, our_runs, jax_only, meta)
    print(f"wrote {args.out}; unexplained losses: {unexplained}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
