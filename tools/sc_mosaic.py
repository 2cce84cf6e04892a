"""JAX's SparseCore test kernels compiled device-less, ours' Mosaic against JAX's.

    python tools/sc_mosaic.py --jax-src PATH [--rev REV] [--topology v6e:2x2]
                              [--work DIR] [-k EXPR] [--timeout S] [--only jax|ours]
                              [--json OUT]

Two copies of ``tests/pallas/tpu_sparsecore_pallas_test.py`` (JAX's as it
stands and ours, imports swapped as tools/jax_suite.py swaps them) each run
under pytest with the plugin ``sc_mosaic_capture``: the file takes this host
for one chip of ``--topology``, and every kernel a test launches is lowered
and compiled for that chip by libtpu (no device), its Mosaic modules recorded.
Nothing runs, so the tests' value checks fail; what counts is the record.

A kernel is matched by (test, launch index), or, where the two launches
there differ in operand/result types (a hypothesis test's examples after its
first failure), by those types within the test (``paired``). Printed: how
many kernels JAX lowers and compiles here; of those, how many ours lowers,
compiles, and lowers to the same Mosaic modules (``sc_mosaic_text``); and, per test, the
first difference or error. ``--json`` keeps the counts and rows. Nothing here
is run by CI (it needs a JAX checkout);
plugins/pallas_tpu/tests/test_sparsecore_compile.py checks a set of
representative kernels the same way.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import jax_suite  # noqa: E402
import sc_cpu_suite  # noqa: E402
import sc_mosaic_text  # noqa: E402

FILE = "tpu_sparsecore_pallas_test.py"


def write_copies(jax_src: Path, rev: str, work: Path) -> dict[str, Path]:
    # ours' copy reads JAX's meshes from ours' tpu_sc, as the CPU-model run's does
    return jax_suite.write_side_copies(jax_src, rev, FILE, work,
                                       lambda text: sc_cpu_suite.rewrite_public_attributes(text)[0])


def run_side(side: str, directory: Path, topology: str, timeout: float, select: str | None):
    """Runs one copy; returns the records its capture plugin wrote and the seconds taken."""
    out = directory / "records.jsonl"
    out.unlink(missing_ok=True)
    env = jax_suite.file_env(FILE, side, directory)
    env.update(SC_MOSAIC_SIDE=side, SC_MOSAIC_OUT=str(out), SC_MOSAIC_TOPOLOGY=topology,
               PYTHONPATH=os.pathsep.join([str(directory), str(HERE), env.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
           "-p", "sc_mosaic_capture", FILE]
    if select:
        cmd += ["-k", select]
    start = time.monotonic()
    try:
        subprocess.run(cmd, cwd=directory, env=env, timeout=timeout,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        print(f"{side}: cut at the {timeout:.0f} s limit", file=sys.stderr)
    records = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return records, time.monotonic() - start


def kernels(records) -> dict[tuple[str, int], dict]:
    return {(r["test"], r["index"]): r for r in records if "index" in r}


def _signature(r):
    """A launch's operand and result types (None in records without them)."""
    if "operands" not in r:
        return None
    return tuple(r["operands"]), tuple(r.get("results") or ())


def paired(theirs: dict, ours: dict) -> dict:
    """Ours' launch for each of JAX's: the one at the same (test, index) where
    the two have the same operand and result types; else, within the test, the
    first one left with those types. A hypothesis test's later examples depend
    on how its earlier ones ran (shrinking after the first failure), so the two
    runs may launch the same kernels in another order (test_slicing's 6th and
    7th); a launch with no match is left unpaired (its example not drawn)."""
    by_test = collections.defaultdict(list)
    for key in sorted(ours):
        by_test[key[0]].append(key)
    taken, pairs = set(), {}
    for key in sorted(theirs):       # same index first
        if key in ours and _signature(theirs[key]) == _signature(ours[key]):
            pairs[key] = key
            taken.add(key)
    for key in sorted(theirs):
        if key in pairs:
            continue
        sig = _signature(theirs[key])
        match = None if sig is None else next(
            (k for k in by_test[key[0]] if k not in taken and _signature(ours[k]) == sig), None)
        if match is None and key in ours and key not in taken and sig is None:
            match = key              # records without types: by index, as before
        if match is not None:
            pairs[key] = match
            taken.add(match)
    return pairs


def compare(jax_records, our_records) -> dict:
    """Counts and per-kernel rows for the kernels JAX compiles here."""
    theirs, ours = kernels(jax_records), kernels(our_records)
    pairs = paired(theirs, ours)
    counts = collections.Counter()
    rows = []
    for key, j in sorted(theirs.items()):
        counts["jax lowered"] += j["status"] in ("compiled", "compile error")
        if j["status"] != "compiled":
            continue
        counts["jax compiled"] += 1
        o = ours.get(pairs.get(key))
        if o is None:
            rows.append((key, "ours launched no such kernel" if key not in ours else
                         "ours launched no kernel of these operand/result types "
                         f"{_signature(j)} (a hypothesis example ours' run did not draw?)"))
            continue
        if pairs[key] != key:
            counts["paired by types"] += 1
        if o["status"] in ("compiled", "compile error"):
            counts["ours lowered"] += 1
        if o["status"] != "compiled":
            rows.append((key, f"ours: {o['status']}: {o.get('error', '')}"))
            continue
        counts["ours compiled"] += 1
        if o["modules"] == j["modules"]:
            counts["mosaic equal"] += 1
            continue
        if len(o["modules"]) != len(j["modules"]):
            rows.append((key, f"JAX has {len(j['modules'])} kernels, ours {len(o['modules'])}"))
            continue
        diff = next(sc_mosaic_text.first_difference(a, b)
                    for a, b in zip(j["modules"], o["modules"]) if a != b)
        rows.append((key, "Mosaic differs: " + diff))
    tests = {r["test"] for r in jax_records if "index" in r}
    counts["tests with kernels (JAX)"] = len(tests)
    counts["kernels JAX refused to lower"] = sum(r["status"] == "lower error"
                                                for r in theirs.values())
    return {"counts": dict(counts), "rows": [[f"{t}#{i}", why] for (t, i), why in rows]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jax-src", type=Path, required=True)
    ap.add_argument("--rev", default="HEAD")
    ap.add_argument("--topology", default="v6e:2x2")
    ap.add_argument("--work", type=Path, default=Path("/tmp/pallas-sc-mosaic"))
    ap.add_argument("-k", dest="select", help="pytest -k expression (a subset of the tests)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per side")
    ap.add_argument("--only", choices=("jax", "ours"), help="run one side; the other's "
                    "records from an earlier run in --work")
    ap.add_argument("--json", type=Path, help="write the counts and rows here")
    args = ap.parse_args(argv)

    dirs = write_copies(args.jax_src, args.rev, args.work)
    records, seconds = {}, {}
    for side in ("jax", "ours"):
        saved = dirs[side] / "records.jsonl"
        if args.only and side != args.only:
            records[side] = ([json.loads(x) for x in saved.read_text().splitlines()]
                             if saved.exists() else [])
            continue
        records[side], seconds[side] = run_side(side, dirs[side], args.topology, args.timeout,
                                                args.select)
    result = compare(records["jax"], records["ours"])
    result.update(topology=args.topology, jax_rev=jax_suite.jax_revision(args.jax_src, args.rev),
                  ours_rev=jax_suite.our_revision(), seconds=seconds)
    for key, value in result["counts"].items():
        print(f"{key}: {value}")
    for kernel, why in result["rows"]:
        print(f"  {kernel}: {why}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
