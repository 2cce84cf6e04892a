"""Run JAX's own Pallas tests against JAX's Pallas and against ours; tabulate.

    python tools/jax_suite.py --jax-src PATH [--rev REV] [--files a_test.py ...]
                              [--work DIR] [--out docs/jax-suite.md]

PATH is a JAX source checkout or a bare clone (then REV, default HEAD, names
the revision to read). For each test file of ``tests/pallas/`` two copies are
made: one as it stands ("jax") and one whose Pallas imports name
``pallas_frontend``, ``pallas_tpu``, ``pallas_triton`` and ``pallas_mgpu``
("ours"). Helpers the tests import from ``jax._src`` that the installed jax
no longer ships are replaced by small shims (``tools/jax_suite_shims``),
identically in both copies. Each copy runs under pytest in its own process
with a JUnit report; the page written to ``--out`` gives, per file, passed /
failed / skipped for both, and every test that passes under JAX but not under
ours with the first line of its failure. ``tools/jax_suite_reasons.json``
maps such tests (``file::Class::test`` or a prefix ending in ``*``) to a
reason, e.g. that the test inspects JAX internals.

The environment running this script needs jax, pallas_frontend and its
plugins, pytest, hypothesis and absl-py. Nothing here is run by CI: it needs a
JAX checkout, and the resulting page is committed with its date and versions.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHIMS = HERE / "jax_suite_shims"
REASONS = HERE / "jax_suite_reasons.json"

DEFAULT_FILES = (
    "pallas_test.py", "indexing_test.py", "pallas_vmap_test.py", "ops_test.py",
    "pallas_error_handling_test.py", "tpu_pallas_interpret_test.py",
    "tpu_pallas_pipeline_test.py", "tpu_pallas_random_test.py",
    "tpu_pallas_state_test.py", "triton_pallas_test.py",
)

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


def make_copy(source: str, ours: bool, skewed: list[str]) -> str:
    for old in skewed:
        src_mod = SKEW_SHIMS[old]
        source = _rewrite_module_imports(source, old, src_mod)
    if ours:
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


def run_copy(directory: Path, name: str, timeout: float, target: str) -> dict[str, tuple[str, str]]:
    """Runs one test file; returns {test id: (outcome, first failure line)}."""
    report = directory / (name + ".xml")
    # The copy's own directory first (its shims), then whatever the caller set (a worktree).
    pythonpath = os.pathsep.join(p for p in (str(directory), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PALLAS_JAX_SUITE_TARGET=target, PYTHONPATH=pythonpath)
    env.setdefault("JAX_PLATFORMS", "cpu")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
           f"--junitxml={report}", "-o", "junit_family=xunit1", name]
    try:
        subprocess.run(cmd, cwd=directory, env=env, timeout=timeout,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {f"{name}::<file>": ("failed", f"timed out after {timeout:.0f} s")}
    if not report.exists():
        return {f"{name}::<file>": ("failed", "pytest wrote no report (crash?)")}
    return parse_junit(report, name)


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
                why = first_line(node.get("message") or node.text or "")
                break
        results[test_id] = (outcome, why)
    return results


def first_line(message: str) -> str:
    for line in message.strip().splitlines():
        line = line.strip()
        if line:
            return line[:220]
    return ""


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


def write_page(out: Path, files, jax_res, our_res, meta) -> int:
    reasons = load_reasons()
    lines = [
        "# JAX's Pallas test suite, run against ours",
        "",
        "Generated by `tools/jax_suite.py` (do not edit by hand). Each file of JAX's",
        "`tests/pallas/` runs twice under pytest on CPU: as it stands (JAX's Pallas) and",
        "with only its Pallas imports changed to `pallas_frontend` / `pallas_tpu` /",
        "`pallas_triton` / `pallas_mgpu`, the test helper's `pallas_call` pointing at ours.",
        "",
        f"- date: {meta['date']}",
        f"- JAX source: {meta['jax_rev']}; installed jax {meta['jax']}, jaxlib {meta['jaxlib']}",
        f"- pallas-frontend: {meta['ours_rev']}; Python {meta['python']}; {meta['machine']}",
        f"- shims for version skew (both runs): {', '.join(meta['skewed']) or 'none'}",
        "",
        "| file | JAX passed | JAX failed | JAX skipped | ours passed | ours failed | ours skipped | lost |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lost_rows, explained = [], 0
    totals = [0] * 7
    for name in files:
        j, o = jax_res[name], our_res[name]
        lost = [t for t, (oc, _) in j.items() if oc == "passed" and o.get(t, ("missing", ""))[0] != "passed"]
        row = (*tally(j), *tally(o), len(lost))
        totals = [a + b for a, b in zip(totals, row)]
        lines.append(f"| `{name}` | " + " | ".join(str(v) for v in row) + " |")
        for t in sorted(lost):
            why = reason_for(t, reasons)
            if why:
                explained += 1
            oc, msg = o.get(t, ("missing", "not collected under ours"))
            lost_rows.append((t, oc, why or msg))
    lines.append("| **total** | " + " | ".join(f"**{v}**" for v in totals) + " |")
    lines += ["", f"Passing under JAX but not under ours: {len(lost_rows)} "
              f"({explained} with a stated reason).", ""]
    if lost_rows:
        lines += ["| test | ours | cause or reason |", "|---|---|---|"]
        for t, oc, why in lost_rows:
            lines.append(f"| `{t}` | {oc} | {why.replace('|', '/')} |")
        lines.append("")
    gained = sum(1 for name in files for t, (oc, _) in our_res[name].items()
                 if oc == "passed" and jax_res[name].get(t, ("", ""))[0] != "passed")
    lines += [f"Passing under ours but not under JAX: {gained}.", ""]
    out.write_text("\n".join(lines))
    return len(lost_rows) - explained


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jax-src", type=Path, required=True)
    ap.add_argument("--rev", default="HEAD")
    ap.add_argument("--files", nargs="*", default=list(DEFAULT_FILES))
    ap.add_argument("--work", type=Path, default=Path("/tmp/pallas-jax-suite"))
    ap.add_argument("--out", type=Path, default=HERE.parent / "docs" / "jax-suite.md")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per file and copy")
    ap.add_argument("--only", choices=("jax", "ours"), help="run one side only")
    ap.add_argument("--reuse-jax", action="store_true",
                    help="read JAX's side from the reports an earlier run left in --work "
                         "(its results do not depend on our code)")
    ap.add_argument("--reuse-ours", nargs="*", default=[], metavar="FILE",
                    help="files whose side of ours is read from an earlier run's report in --work")
    args = ap.parse_args(argv)

    import jax
    import jaxlib
    skewed = [m for m in SKEW_SHIMS if not _module_exists(m)]
    from jax._src import config
    dropped_flags = [] if hasattr(config, "jax_pallas_use_mosaic_gpu") else [
        "config.jax_pallas_use_mosaic_gpu (conftest.py)"]
    jax_res, our_res = {}, {}
    for side in ("jax", "ours"):
        directory = args.work / side
        if side == "jax" and args.reuse_jax:
            for name in args.files:
                jax_res[name] = parse_junit(directory / (name + ".xml"), name)
            continue
        if directory.exists() and not args.reuse_ours:
            shutil.rmtree(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for shim in SHIMS.glob("*.py"):
            shutil.copy(shim, directory / shim.name)
        for name in args.files:
            (directory / name).write_text(make_copy(read_tests(args.jax_src, args.rev, name),
                                                    side == "ours", skewed))
        if args.only and args.only != side:
            continue
        for name in args.files:
            if side == "ours" and name in args.reuse_ours:
                our_res[name] = parse_junit(directory / (name + ".xml"), name)
                continue
            print(f"[{side}] {name} ...", flush=True)
            res = run_copy(directory, name, args.timeout, side)
            (jax_res if side == "jax" else our_res)[name] = res
            print(f"[{side}] {name}: passed/failed/skipped = {tally(res)}", flush=True)
    if args.only:
        return 0
    meta = dict(
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        jax_rev=jax_revision(args.jax_src, args.rev), jax=jax.__version__,
        jaxlib=jaxlib.__version__, ours_rev=our_revision(), python=platform.python_version(),
        machine=f"{platform.machine()}, {os.cpu_count()} cores, CPU only",
        skewed=skewed + dropped_flags)
    unexplained = write_page(args.out, args.files, jax_res, our_res, meta)
    print(f"wrote {args.out}; unexplained losses: {unexplained}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
