"""JAX's TPU test files rehearsed on CPU: what would fail under ours on the chip.

    python tools/tpu_cpu_suite.py [--suite .tpu-native/suite] [--files a_test.py ...]
                                  [--limit S] [--limits a_test.py=S ...] [--chip v5e]
                                  [--json OUT] [--before OLD.json] [--write]

The two copies of each file are the ones ``tools/tpu_native.py pack`` made for
the chip run (``--suite``: ``jax/`` as JAX wrote it, ``ours/`` with only the
Pallas imports swapped). Each runs under pytest with the plugin
``tpu_cpu_plugin``: JAX's test utilities answer as a TPU ``--chip`` (so the
tests that on CPU skip with "Test requires TPUs" run, and the interpret-mode
variants JAX runs on CPU anyway skip), and every kernel runs in TPU interpret
mode, JAX's interpreter for JAX's copy, ours' for ours' (which also compiles
each kernel device-less for the chip: a kernel Mosaic refuses under ours fails
here as on the chip; ``--no-chip-checks`` turns that off).

JAX's copy runs first within its limit; ours runs the tests JAX's run reached.
A test JAX's forced run passes and ours' does not is "lost": printed with the
first line of its failure, grouped by that line. Tests that check what only a
compile shows (lowered text, Mosaic's errors) may fail on both sides here; they
are not lost. ``--write`` puts the counts into docs/jax-suite.md between
``<!-- tpu_cpu_suite:start/end -->`` (``--before`` names an earlier run's JSON
whose lost counts go beside). Run it under the chip host's JAX (a venv of jax
0.10.2, the pack's); nothing here is run by CI.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import platform
import re
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import jax_suite  # noqa: E402

ROOT = HERE.parent
DOC = ROOT / "docs" / "jax-suite.md"
HEADING = "## TPU files rehearsed on CPU"
START, END = "<!-- tpu_cpu_suite:start -->", "<!-- tpu_cpu_suite:end -->"
# how ours' TPU interpret mode words a kernel Mosaic refuses (pallas_tpu/chip_compile.py)
CHIP_REFUSAL = "would not compile for a"
FILES = ("tpu_pallas_test.py", "tpu_ops_test.py", "tpu_pallas_pipeline_test.py",
         "tpu_pallas_memory_space_test.py", "tpu_side_effects_test.py",
         "tpu_fusible_matmul_test.py", "tpu_pallas_call_print_test.py",
         "tpu_splash_attention_kernel_test.py")


def copy_suite(suite: Path, work: Path, files) -> dict[str, Path]:
    """The packed copies, their shims and the packages beside them (ours':
    ``pf_jax_ops``, the shipped kernels the kernel files import) into ``work``:
    reports go there."""
    dirs = {}
    for side in ("jax", "ours"):
        d = work / side
        d.mkdir(parents=True, exist_ok=True)
        for f in (suite / side).glob("*.py"):
            if f.name in files or not f.name.endswith("_test.py"):
                shutil.copyfile(f, d / f.name)
        for package in (suite / side).glob("*/__init__.py"):
            shutil.copytree(package.parent, d / package.parent.name, dirs_exist_ok=True)
        dirs[side] = d
    return dirs


def forced_run(directory: Path, name: str, side: str, limit: float, chip: str,
               chip_checks: bool, only: list[str] | None, per_test: int = 0, tag: str = ""):
    """({``Class::test``: (outcome, first line)}, note, seconds): the file under
    ``tpu_cpu_plugin``, through ``jax_suite.run_logged`` (a process that dies in a
    test fails that test; the rest run in a new one)."""
    env = {**jax_suite.file_env(name, side, directory),
           "PYTHONPATH": os.pathsep.join(p for p in (str(HERE), str(directory),
                                                    os.environ.get("PYTHONPATH")) if p),
           "PALLAS_TPU_CPU_CHIP": chip, "PALLAS_TPU_CHIP_CHECKS": "1" if chip_checks else "0"}
    return jax_suite.run_logged(["-p", "tpu_cpu_plugin", name], directory, env, directory / (name + tag), limit,
                                only=only, per_test=per_test)


def error_group(line: str) -> str:
    """A failure's first line with the particulars (numbers, shapes, names in
    quotes) blanked, so that one cause is one group."""
    line = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", line)
    line = re.sub(r"\d+", "N", line)
    return line[:140]


def rehearse(dirs, name: str, limit: float, chip: str, chip_checks: bool,
             per_test: int, reuse: dict | None = None) -> dict:
    if reuse:         # JAX's side does not depend on ours: an earlier run's
        jax_res = {t: tuple(r) for t, r in reuse["jax_results"].items()}
        jax_note, jax_s = reuse["notes"][0], reuse["seconds"][0]
        print(f"{name}: JAX's copy from the earlier run", flush=True)
    else:
        print(f"{name}: JAX's copy (limit {limit:.0f} s) ...", flush=True)
        jax_res, jax_note, jax_s = forced_run(dirs["jax"], name, "jax", limit, chip, False,
                                              None, per_test)
    reached = sorted(t for t in jax_res if not t.endswith("<file>"))
    print(f"{name}: ours on the {len(reached)} tests JAX's run reached ...", flush=True)
    ours_res, ours_note, ours_s = forced_run(dirs["ours"], name, "ours", limit, chip,
                                             chip_checks, reached)
    lost, not_reached = [], []
    for t in reached:
        if jax_res[t][0] != "passed":
            continue
        if t not in ours_res:
            not_reached.append(t)
        elif ours_res[t][0] != "passed":
            lost.append(dict(test=t, outcome=ours_res[t][0], first_line=ours_res[t][1]))
    # JAX's interpreter compiles nothing: a test ours' chip check fails may fail
    # under JAX on the chip too. Those run once more with the check off.
    refused = [x["test"] for x in lost if CHIP_REFUSAL in x["first_line"]]
    if refused:
        again, _, _ = forced_run(dirs["ours"], name, "ours", limit, chip, False, refused,
                                 tag=".checks-off")
        for x in lost:
            if again.get(x["test"], ("",))[0] == "passed":
                x["chip_check_only"] = True
    row = dict(file=name, per_test=per_test, jax=jax_suite.tally(jax_res),
               ours=jax_suite.tally(ours_res),
               lost=lost, not_reached=not_reached, notes=[jax_note, ours_note],
               seconds=[round(jax_s), round(ours_s)], jax_results=jax_res, ours_results=ours_res)
    print(f"{name}: JAX p/f/s {row['jax']} ({jax_s:.0f} s{', ' + jax_note if jax_note else ''}),"
          f" ours {row['ours']} ({ours_s:.0f} s{', ' + ours_note if ours_note else ''}),"
          f" lost {len(lost)}, not reached {len(not_reached)}", flush=True)
    return row


def report(rows) -> None:
    groups = collections.defaultdict(list)
    for row in rows:
        for lost in row["lost"]:
            key = error_group(lost["first_line"])
            if lost.get("chip_check_only"):
                key = "[passes with ours' chip check off: compare JAX's compile] " + key
            groups[key].append(f"{row['file']}::{lost['test']}")
    print(f"\nlost: {sum(len(v) for v in groups.values())}, in {len(groups)} groups")
    for key, tests in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        print(f"\n{len(tests):4d}  {key}")
        for t in tests[:6]:
            print(f"        {t}")
        if len(tests) > 6:
            print(f"        ... and {len(tests) - 6} more")


def render(record: dict, before: dict | None) -> str:
    """The marked block of docs/jax-suite.md (its heading stays outside)."""
    lost_before = {r["file"]: len(r["lost"]) for r in (before or {}).get("rows", [])}
    m = record["meta"]
    lines = [START, "",
             f"Generated by `tools/tpu_cpu_suite.py` ({m['date']} UTC; jax {m['jax']}, Python "
             f"{m['python']}, CPU only; ours at {m['rev']}). JAX's TPU test files as packed for "
             f"the chip run, each test forced to run as on a TPU {m['chip']} (the device checks "
             "answer for that chip) with every kernel in TPU interpret mode: JAX's "
             "interpreter for JAX's copy, ours' for ours' "
             + ("(with ours' device-less compile for the chip on)" if m["chip_checks"] else
                "(ours' chip checks off)")
             + ". Ours runs the tests JAX's run reached within the file's limit. Lost: passed "
             "under JAX's forced run, not under ours'.", "",
             "| file | JAX passed | JAX failed | JAX skipped | ours passed | ours failed "
             "| ours skipped | " + ("lost before | lost now" if before else "lost")
             + " | s JAX / ours |", "|---|---|---|---|---|---|---|---|---|"
             + ("---|" if before else "")]
    for r in record["rows"]:
        cut = " (cut)" if any(r["notes"]) else ""
        cut += f" (first {r['per_test']} cases of each test)" if r.get("per_test") else ""
        # without an earlier run there is nothing to set beside this one's count
        was = f"{lost_before.get(r['file'], '–')} | " if before else ""
        lines.append(f"| `{r['file']}`{cut} | " + " | ".join(map(str, [*r["jax"], *r["ours"]]))
                     + f" | {was}{len(r['lost'])} | {r['seconds'][0]} / {r['seconds'][1]} |")
    lost = [(r["file"], x) for r in record["rows"] for x in r["lost"]]
    if lost:
        lines += ["", "Still lost, with the first line of each failure:", "", "```text"]
        lines += [f"{f}::{x['test']} ({x['outcome']}"
                  + ("; passes with ours' chip check off" if x.get("chip_check_only") else "")
                  + f")\n    {x['first_line']}" for f, x in lost]
        lines += ["```"]
    lines += ["", f"Command: `{m['command']}`", "", END]
    return "\n".join(lines) + "\n"


def write(block: str, path: Path = DOC) -> None:
    """Replaces the marked block, or appends the section at the end of the page
    (after the sections tools/jax_suite.py keeps: see its KEPT_SECTIONS)."""
    text = path.read_text() if path.exists() else ""
    if START in text and END in text:
        head, rest = text.split(START, 1)
        text = head + block.rstrip("\n") + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + f"\n\n{HEADING}\n\n" + block
    path.write_text(text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", type=Path, default=ROOT / ".tpu-native" / "suite")
    ap.add_argument("--work", type=Path, default=Path("/tmp/pallas-tpu-cpu-suite"))
    ap.add_argument("--files", nargs="*", default=list(FILES))
    ap.add_argument("--limit", type=float, default=120.0, help="seconds per file and side")
    ap.add_argument("--limits", nargs="*", default=[], metavar="FILE=S")
    ap.add_argument("--per-test", nargs="*", default=[], metavar="FILE=N",
                    help="only the first N cases of each parameterized test of FILE")
    ap.add_argument("--chip", default="v5e")
    ap.add_argument("--no-chip-checks", dest="chip_checks", action="store_false")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--before", type=Path, help="an earlier --json: its lost counts beside")
    ap.add_argument("--reuse-jax", type=Path, metavar="OLD.json",
                    help="JAX's side of each file from an earlier run (same chip and sample)")
    ap.add_argument("--render", type=Path, help="no run: the doc block from this --json")
    ap.add_argument("--write", action="store_true", help="write docs/jax-suite.md's block")
    args = ap.parse_args(argv)
    before = json.loads(args.before.read_text()) if args.before else None
    if args.render:
        record = json.loads(args.render.read_text())
    else:
        import jax
        limits = {k: float(v) for k, v in (x.split("=") for x in args.limits)}
        dirs = copy_suite(args.suite, args.work, args.files)
        per_test = {k: int(v) for k, v in (x.split("=") for x in args.per_test)}
        old = {r["file"]: r for r in json.loads(args.reuse_jax.read_text())["rows"]} \
            if args.reuse_jax else {}
        rows = [rehearse(dirs, n, limits.get(n, args.limit), args.chip, args.chip_checks,
                         per_test.get(n, 0), old.get(n)) for n in args.files]
        record = dict(rows=rows, meta=dict(
            date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
            jax=jax.__version__, python=platform.python_version(), chip=args.chip,
            chip_checks=args.chip_checks, rev=jax_suite.our_revision(),
            command="python tools/tpu_cpu_suite.py " + " ".join(argv or sys.argv[1:])))
        if args.json:
            args.json.write_text(json.dumps(record, indent=1))
    report(record["rows"])
    if args.write:
        write(render(record, before))
        print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
