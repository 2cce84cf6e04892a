"""JAX's SparseCore tests run on CPU under pallas-tpu's SparseCore CPU model.

    python tools/sc_cpu_suite.py --jax-src PATH [--rev REV] [--work DIR]
                                 [-k EXPR] [--timeout S] [--json OUT]

``tests/pallas/tpu_sparsecore_pallas_test.py`` is copied twice, as
tools/jax_suite.py copies it: JAX's as it stands, and ours with the Pallas
imports swapped. On top of jax_suite's swaps, an attribute of a private
module that JAX also exports publicly is read from ours' public module
(``sc_core.VectorSubcoreMesh`` -> ``plsc.VectorSubcoreMesh``), as a user
porting the file would write it; the rest of the private module stays JAX's.

Three runs, each pytest in a process of its own with a JUnit report:

1. JAX's copy as it stands: the tests JAX runs on this host (not skipped).
2. Ours' copy as it stands, those tests only: each must pass.
3. Ours' copy with the pytest plugin ``sc_cpu_plugin`` (the host answers as a
   chip with SparseCores, every kernel in TPU interpret mode, i.e. ours' CPU
   model), every other test.

Printed: for run 2, passed of the tests JAX runs; for run 3, how many of the
tests JAX skips here ours runs and how many pass, fail or skip, with the first
line of each failure (or its explanation from ``tools/sc_cpu_reasons.json``,
``Class::test`` or a prefix ending in ``*``) and each skip's reason.
Needs absl-py importable (as jax_suite does). Nothing here is run by CI.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import jax_suite  # noqa: E402

FILE = "tpu_sparsecore_pallas_test.py"
REASONS = HERE / "sc_cpu_reasons.json"
# ours' public module for each of JAX's, by the alias the file imports it under
_ALIASES = {"jax.experimental.pallas.tpu_sc": "plsc", "jax.experimental.pallas.tpu": "pltpu",
            "jax.experimental.pallas": "pl"}
_PRIVATE_MODULE = re.compile(r"^from (jax\._src\.pallas[\w.]*) import (\w+)(?: as (\w+))?\s*$",
                             re.M)


def rewrite_public_attributes(source: str) -> tuple[str, list[str]]:
    """``alias.name`` of a private module kept JAX's -> ``plsc.name`` (or
    ``pltpu`` / ``pl``) where JAX exports that very object publicly."""
    changed = []
    for m in _PRIVATE_MODULE.finditer(source):
        try:
            module = importlib.import_module(f"{m.group(1)}.{m.group(2)}")
        except ImportError:
            continue
        alias = m.group(3) or m.group(2)
        for attr in sorted(set(re.findall(rf"(?<![\w.]){alias}\.(\w+)", source))):
            homes = jax_suite._public_homes(attr, getattr(module, attr, None))
            homes = [h for h in homes if h in _ALIASES]
            if homes:
                source = re.sub(rf"(?<![\w.]){alias}\.{attr}\b", f"{_ALIASES[homes[0]]}.{attr}",
                                source)
                changed.append(f"{alias}.{attr} -> {_ALIASES[homes[0]]}.{attr}")
    return source, changed


def write_copies(jax_src: Path, rev: str, work: Path) -> dict[str, Path]:
    return jax_suite.write_side_copies(jax_src, rev, FILE, work,
                                       lambda text: rewrite_public_attributes(text)[0])


def run(directory: Path, side: str, tag: str, timeout: float, args: list[str], plugin: bool):
    """One pytest run; {``Class::test``: (outcome, first line)} and seconds."""
    report = directory / f"{tag}.xml"
    report.unlink(missing_ok=True)
    env = jax_suite.file_env(FILE, side, directory)
    if plugin:
        env["PYTHONPATH"] = os.pathsep.join([str(HERE), env["PYTHONPATH"]])
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
           f"--junitxml={report}", "-o", "junit_family=xunit1", *(["-p", "sc_cpu_plugin"] if plugin
                                                                   else []), FILE, *args]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=directory, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    if not jax_suite.wait_or_interrupt(proc, timeout):
        print(f"{tag}: cut at the {timeout:.0f} s limit", file=sys.stderr)
    seconds = time.monotonic() - start
    if not report.exists():
        return {}, seconds
    results = jax_suite.parse_junit(report, FILE)
    return {t.split("::", 1)[1]: r for t, r in results.items()}, seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jax-src", type=Path, required=True)
    ap.add_argument("--rev", default="HEAD")
    ap.add_argument("--work", type=Path, default=Path("/tmp/pallas-sc-cpu-suite"))
    ap.add_argument("-k", dest="select", help="pytest -k for run 3 (the CPU model)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    ap.add_argument("--json", type=Path, help="write the counts and rows here")
    args = ap.parse_args(argv)
    dirs = write_copies(args.jax_src, args.rev, args.work)

    reasons = json.loads(REASONS.read_text()) if REASONS.exists() else {}
    jax_res, jax_s = run(dirs["jax"], "jax", "jax", args.timeout, [], plugin=False)
    runs_here = sorted(t for t, (o, _) in jax_res.items() if o != "skipped")
    ours_res, ours_s = run(dirs["ours"], "ours", "ours-plain", args.timeout,
                           ["-k", " or ".join(t.split("::")[-1] for t in runs_here)]
                           if runs_here else ["--co"], plugin=False)
    ours_res = {t: r for t, r in ours_res.items() if t in runs_here}
    deselect = [f"--deselect={FILE}::{t}" for t in runs_here]
    model_res, model_s = run(dirs["ours"], "ours", "ours-model", args.timeout,
                             deselect + (["-k", args.select] if args.select else []), plugin=True)

    counts = collections.Counter(o for o, _ in model_res.values())
    jax_pass = sum(jax_res[t][0] == "passed" for t in runs_here)
    ours_pass = sum(ours_res.get(t, ("missing",))[0] == "passed" for t in runs_here)
    print(f"JAX's copy ({jax_s:.0f} s): {len(jax_res)} tests, {len(runs_here)} not skipped here "
          f"({jax_pass} passed).")
    print(f"ours, as it stands ({ours_s:.0f} s): {ours_pass} of those {len(runs_here)} passed.")
    for t in runs_here:
        o, why = ours_res.get(t, ("missing", "not run"))
        if o != "passed":
            print(f"  {t}: {o}: {jax_suite.reason_for(t, reasons) or why}")
    print(f"ours, CPU model ({model_s:.0f} s): of the {len(model_res)} others (JAX skips all "
          f"here), passed {counts['passed']}, failed {counts['failed']}, skipped "
          f"{counts['skipped']}.")
    rows = []
    for t, (o, why) in sorted(model_res.items()):
        if o == "passed":
            continue
        explained = jax_suite.reason_for(t, reasons)
        rows.append(dict(test=t, outcome=o, first_line=why, reason=explained))
    failed = [r for r in rows if r["outcome"] == "failed"]
    print(f"\nfailed ({sum(bool(r['reason']) for r in failed)} of {len(failed)} explained):")
    for r in failed:
        print(f"  {r['test']}\n      {r['reason'] or r['first_line']}")
    print("\nskipped, by the test's own reason:")
    skips = collections.Counter(r["first_line"] for r in rows if r["outcome"] == "skipped")
    for why, n in skips.most_common():
        print(f"  {n:4d}  {why}")
    if args.json:
        args.json.write_text(json.dumps(dict(
            jax_runs_here=runs_here, jax_passed=jax_pass, ours_passed=ours_pass,
            model=dict(counts), rows=rows, seconds=[jax_s, ours_s, model_s]), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
