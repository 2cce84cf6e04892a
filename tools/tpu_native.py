"""Run the project natively on a TPU host whose JAX is in the project's window
(the lent v5e: Python 3.11, JAX 0.10.2, libtpu 0.0.42.1, no package index).

    python tools/tpu_native.py pack --jax-src PATH --rev jax-v0.10.2   # here, any machine
    python3 tools/tpu_native.py run --parts project,jax-suite          # there, from the copy
    python tools/tpu_native.py report --results DIR [--write]          # here: the tables

``pack`` writes ``.tpu-native/`` (``--out``): wheels of the four distributions
and of the pure-Python packages they need that such a host may lack (pluggy,
importlib-metadata, zipp), and JAX's TPU test files of ``--rev`` (a JAX checkout
or bare clone at ``--jax-src``), two copies each as ``tools/jax_suite.py`` makes
them: JAX's file as it stands ("jax") and with only the Pallas imports naming
ours ("ours"). Files that test JAX's shipped kernels (paged and ragged paged
attention, megablox, splash attention) import them from
``jax.experimental.pallas.ops``, which imports JAX's Pallas: ours' copies
import them instead from ``pf_jax_ops``, the installed JAX's ops tree with its
Pallas imports swapped (``tools/jax_ops_copy.py``), packed beside them, so
those tests run the kernels through ours. Run it under the JAX the host has (a
Python 3.11 venv of jax 0.10.2): which private imports have public homes, and
the ops tree, are read from that JAX.

``run`` installs the wheels into ``--site`` (no index, no dependencies: the
host's JAX stays the one used), then runs, each with pytest in a process of its
own that holds the chip alone, and writes ``native.json`` into ``--out``, a new
folder (after each file, from per-test logs: a file cut at ``--timeout`` keeps
every outcome it reached; a SIGTERM, as ``timeout`` sends, cuts the file under
way the same way and ends the run):
- ``project``: the conformance suite against pallas_tpu and the plugin's tests,
  compiled for the chip (``plugins/pallas_tpu/tests/test_on_chip.py`` compares
  ours with NumPy float64 and with JAX's Pallas on the same device arrays);
- ``bench``: ``benchmarks/tpu_native_bench.py`` (BENCHMARKS.md's TPU table, with
  ``pl.autotune`` live), within ``--timeout``; render it here with
  ``benchmarks/tpu_check.py --results OUT/bench/bench.json --write``;
- ``jax-suite``: each packed JAX test file, under ours and under JAX
  (``--side``), one file at a time, each within ``--timeout`` seconds;
  ``--select IDS`` (a file of ``name.py::Class::test`` lines, as ``failed``
  writes them) runs only those tests: the chip's time goes to re-running what
  failed, not whole files again; ``--per-test N`` runs the first N cases of
  each parameterized test (a sample of a file too long for the session);
  ``--test-limit S`` fails a test still running after S seconds and goes on
  with the file's next test (a test that does not end on the chip would
  otherwise spend the file's whole ``--timeout``).
``report`` reads one or more such folders and writes the "TPU v5e" table of
``docs/jax-suite.md``; a later folder's selected tests replace those tests'
earlier outcomes, a later whole-file run replaces the file's.
``failed --results DIR...`` prints the ids of the tests ours failed there;
``pending --results DIR... --files NAME... [--side jax]`` those of the files'
tests that no run of ours (of JAX's) has reached (collected here, under the
host's JAX, from the pack's copy), for ``run --new`` (which runs them as
``--select`` does, and marks them new, so that the report adds their outcomes
to the file's counts).
Python 3.11 syntax throughout.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import jax_ops_copy  # noqa: E402
import jax_suite  # noqa: E402

PACK = ROOT / ".tpu-native"
# JAX's test files that run on one chip (tests/pallas at the JAX tag).
TPU_FILES = ("tpu_pallas_test.py", "tpu_ops_test.py", "tpu_pallas_random_test.py",
             "tpu_pallas_async_test.py", "tpu_pallas_pipeline_test.py",
             "tpu_paged_attention_kernel_test.py", "tpu_gmm_test.py",
             "tpu_ragged_paged_attention_test.py", "tpu_pallas_state_test.py",
             "tpu_pallas_memory_space_test.py", "tpu_side_effects_test.py",
             "tpu_splash_attention_kernel_test.py", "tpu_splash_attention_mask_test.py",
             "tpu_fusible_matmul_test.py", "tpu_fusible_matmul_with_stateful_fusions_test.py",
             "tpu_info_test.py", "tpu_trace_value_test.py", "tpu_pallas_call_print_test.py")
# The tag's other TPU files skip every test on one v5e: tpu_all_gather_test,
# tpu_pallas_distributed_test (2+ chips), tpu_splash_attention_kernel_sharded_test
# (4+), tpu_pallas_mpmd_test and tpu_sparsecore_* (SparseCore: v5p and later);
# tpu_pallas_interpret*_test run JAX's interpreter on CPU (docs/jax-suite.md).
# Pure-Python requirements of the distributions that a bare TPU host may lack.
SUPPORT = ("pluggy", "importlib-metadata", "zipp", "absl-py")
DISTRIBUTIONS = {"pallas-frontend": ROOT, "pallas-triton": ROOT / "plugins" / "pallas_triton",
                 "pallas-tpu": ROOT / "plugins" / "pallas_tpu",
                 "pallas-mgpu": ROOT / "plugins" / "pallas_mgpu"}
# Files that test JAX's shipped kernels (imported from jax.experimental.pallas.ops):
# their "ours" copies run ours only from packs that swap those imports (pf_jax_ops)
SHIPPED_KERNEL_FILES = ("tpu_paged_attention_kernel_test.py", "tpu_ragged_paged_attention_test.py",
                        "tpu_gmm_test.py", "tpu_splash_attention_kernel_test.py")
DOC = ROOT / "docs" / "jax-suite.md"
START, END = "<!-- tpu_native:start -->", "<!-- tpu_native:end -->"


# --- pack (here) -----------------------------------------------------------------

def pack(jax_src: Path, rev: str, out: Path, files) -> None:
    import jax
    wheels = out / "wheels"
    if out.exists():
        shutil.rmtree(out)
    wheels.mkdir(parents=True)
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run(pip + ["wheel", "--no-deps", "-w", str(wheels),
                          *map(str, DISTRIBUTIONS.values())], check=True)
    subprocess.run(pip + ["download", "--no-deps", "--only-binary=:all:", "-d", str(wheels),
                          *SUPPORT], check=True)
    skewed = [m for m in jax_suite.SKEW_SHIMS if not jax_suite._module_exists(m)]
    for side in ("jax", "ours"):
        folder = out / "suite" / side
        folder.mkdir(parents=True)
        for shim in jax_suite.SHIMS.glob("*.py"):
            shutil.copy(shim, folder / shim.name)
    names = []
    for name in files:
        try:
            source = jax_suite.read_tests(jax_src, rev, name)
        except subprocess.CalledProcessError:
            print(f"  {name}: not in {rev}, left out")
            continue
        for side in ("jax", "ours"):
            copy = jax_suite.make_copy(source, side == "ours", skewed)
            if side == "ours":      # a test of a shipped kernel runs it through ours
                copy = jax_ops_copy.use_copy(copy)
            (out / "suite" / side / name).write_text(copy)
        names.append(name)
    # JAX's shipped kernels (paged and ragged paged attention, megablox, splash),
    # Pallas imports swapped, beside ours' copies: the installed JAX's, the host's
    jax_ops_copy.write_copy(out / "suite" / "ours")
    manifest = {"jax_revision": jax_suite.jax_revision(jax_src, rev), "rev": rev,
                "packed_with_jax": jax.__version__, "ours": jax_suite.our_revision(),
                "ops": f"{jax_ops_copy.PACKAGE}: jax {jax.__version__}'s pallas/ops, "
                       "Pallas imports swapped to ours",
                "files": names, "wheels": sorted(p.name for p in wheels.iterdir()),
                # how many tests each file has here, so the report can tell a file
                # whose every test some run reached from one still partly unrun
                "tests": {name: len(collected_tests(out / "suite" / "ours", name))
                          for name in names}}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    print(f"packed {len(names)} JAX test files and {len(manifest['wheels'])} wheels into {out}")


# --- run (on the TPU host) ----------------------------------------------------------

def install(pack_dir: Path, site: Path) -> None:
    """The pack's wheels into ``site``, from the pack alone (no index, no deps)."""
    wheels = sorted(str(p) for p in (pack_dir / "wheels").glob("*.whl"))
    env = dict(os.environ, PIP_CONFIG_FILE=os.devnull)
    subprocess.run([sys.executable, "-m", "pip", "install", "--isolated", "-q", "--no-index",
                    "--no-deps", "--no-compile", "--no-cache-dir", "--upgrade", "--target",
                    str(site), *wheels], check=True, env=env)


def chip_env(site: Path, extra_path: Path | None = None,
             side: str | None = None) -> dict[str, str]:
    """The host's environment (its TPU_ variables, its JAX first on PYTHONPATH), with
    the installed pack after it and no CPU pinning: programs run on the chip.
    ``side``: the JAX test files' side ("ours" or "jax"), whose ``pallas_call``
    the shared test helper (``_suite_pallas_test_util``) calls, as
    ``tools/jax_suite.py`` tells it."""
    parts = [os.environ.get("PYTHONPATH", ""), str(site)]
    if extra_path is not None:
        parts.insert(0, str(extra_path))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in parts if p),
               PALLAS_TPU_NATIVE="1")     # the plugin's tests: leave the chip's settings be
    for name in ("JAX_PLATFORMS", "PALLAS_FRONTEND_BACKENDS", "PALLAS_JAX_SUITE_TARGET"):
        env.pop(name, None)
    if side is not None:
        env["PALLAS_JAX_SUITE_TARGET"] = side
    return env


def pytest_run(args, stem: Path, env, cwd: Path, timeout: float, per_test: int = 0) -> dict:
    """One pytest process at a time (it holds the chip alone), through
    ``jax_suite.run_logged``: each test's outcome is logged as it ends, so a
    file cut at ``timeout`` (SIGKILL: a compile in native code ignores SIGINT)
    or a crash keeps what it ran; ``stem``.jsonl is that log."""
    results, note, seconds = jax_suite.run_logged(args, cwd, env, stem, timeout,
                                                  per_test=per_test)
    outcomes = {t: outcome for t, (outcome, _) in results.items()}
    results = {f"{stem.name}::{t}": r for t, r in results.items()}
    passed, failed, skipped = jax_suite.tally(results)
    seconds = round(seconds, 1)
    print(f"  {stem.name}: {passed} passed, {failed} failed, {skipped} skipped "
          f"in {seconds} s {note}", flush=True)
    return {"passed": passed, "failed": failed, "skipped": skipped, "seconds": seconds,
            "note": note, "per_test": per_test or None, "outcomes": outcomes,
            "not_passed": {t: why for t, (o, why) in results.items() if o == "failed"}}


def run(pack_dir: Path, out: Path, site: Path, parts, sides, files, timeout: float,
        select: dict[str, list[str]] | None = None, bench_only=None, per_test: int = 0,
        new: dict[str, list[str]] | None = None) -> dict:
    if out.exists() and any(out.iterdir()):
        # a reused folder would lend this run an earlier run's record and logs
        raise SystemExit(f"--out {out} is not empty: give a new folder for each run")
    out.mkdir(parents=True, exist_ok=True)
    install(pack_dir, site)
    env = chip_env(site)
    probe = subprocess.run([sys.executable, "-c", "import jax; d = jax.devices()[0]; "
                            "print(d.device_kind); print(d.platform)"],
                           env=env, capture_output=True, text=True, timeout=300)
    kind, device_platform = (probe.stdout.strip().splitlines() + ["unknown", "unknown"])[:2]
    record = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
              "device": kind, "platform": device_platform,
              "python": platform.python_version(), "jax": _version("jax"),
              "jaxlib": _version("jaxlib"), "libtpu": _version("libtpu"),
              "manifest": json.loads((pack_dir / "manifest.json").read_text()), "runs": {}}
    save(record, out)
    if "project" in parts:
        suites = {"conformance": ["--pyargs", "pallas_frontend.testing", "--pallas-backend",
                                  "tpu"],
                  "pallas_tpu on chip": [str(ROOT / "plugins" / "pallas_tpu" / "tests" /
                                             "test_on_chip.py")]}
        for name, args in suites.items():
            if jax_suite.stop_requested():
                return record
            record["runs"][f"project/{name}"] = pytest_run(
                args, out / f"project-{name.split()[0]}", env, ROOT, timeout)
            save(record, out)
    if "bench" in parts and not jax_suite.stop_requested():
        record["bench"] = bench_run(out / "bench", env, timeout, bench_only)
        save(record, out)
    if "jax-suite" in parts:
        for name in (list(select) if select else files or record["manifest"]["files"]):
            ids = select[name] if select else [name]
            for side in sides:
                if jax_suite.stop_requested():
                    return record
                folder = pack_dir / "suite" / side
                result = pytest_run(ids, out / f"{side}-{name.removesuffix('.py')}",
                                    chip_env(site, folder, side), folder, timeout, per_test)
                if select:
                    result["selected"] = ids
                if new and new.get(name):
                    result["new_tests"] = new[name]
                record["runs"][f"{side}/{name}"] = result
                save(record, out)
    return record


def bench_run(out: Path, env, timeout: float, only=None) -> dict:
    """``benchmarks/tpu_native_bench.py`` in a process of its own (it holds the chip),
    its wide grids told to stop 30 s before ``timeout``; results in ``out/bench.json``.
    ``only``: the cases whose name contains one of these words."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / "tpu_native_bench.py"), "--out", str(out),
           "--budget", str(max(60.0, timeout - 30))] + (["--only", *only] if only else [])
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True)
    try:
        with jax_suite.stoppable():
            proc.wait(timeout=timeout)
    except (subprocess.TimeoutExpired, jax_suite.Stopped):
        proc.send_signal(2)
        proc.wait()
    seconds = round(time.monotonic() - start, 1)
    print(f"  bench: exit {proc.returncode} in {seconds} s; {out / 'bench.json'}", flush=True)
    return {"exit": proc.returncode, "seconds": seconds, "results": str(out / "bench.json")}


def save(record: dict, out: Path) -> None:
    """Written at the start and after every pytest run: a run cut short keeps
    what it finished. Replaced whole (a stop while writing leaves the last one)."""
    partial = out / "native.json.partial"
    partial.write_text(json.dumps(record, indent=1))
    partial.replace(out / "native.json")


def _version(dist: str) -> str:
    from importlib import metadata
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


# --- report (here) ---------------------------------------------------------------------

def merge(folders) -> dict:
    """The runs of several ``run`` outputs, in order: a later whole-file run replaces
    the file's run, a later run of selected tests replaces those tests' outcomes."""
    merged = None
    for folder in folders:
        path = Path(folder)
        record = json.loads((path if path.suffix == ".json" else path / "native.json").read_text())
        through_ours = "ops" in record["manifest"]       # packed with pf_jax_ops
        runs = dict(_side_that_ran(key, run_, through_ours)
                    for key, run_ in record["runs"].items())
        if merged is None:
            merged = dict(record, runs=runs)
            merged["tests"] = record["manifest"].get("tests", {})
            continue
        merged["tests"] = record["manifest"].get("tests") or merged["tests"]
        for key, run_ in runs.items():
            merged["runs"][key] = _combine(merged["runs"].get(key), run_)
        merged.setdefault("later_runs", []).append(
            {k: record[k] for k in ("date", "jax", "libtpu")} | {"ours": record["manifest"]["ours"]})
    return merged


def _side_that_ran(key: str, run_: dict, through_ours: bool) -> tuple[str, dict]:
    """A shipped-kernel file's "ours" run from a pack made before ``pf_jax_ops``
    imported JAX's kernels, which run through JAX's Pallas (its copy swaps nothing
    else the tests call into but ``pl.cdiv``-like helpers): its outcomes are JAX's."""
    side, name = key.split("/", 1)
    if side == "ours" and name in SHIPPED_KERNEL_FILES and not through_ours:
        return f"jax/{name}", dict(run_, jax_kernels_from_ours_copy=True)
    return key, run_


def _listed(run_: dict) -> dict:
    """{``Class::test``: outcome} a merged run names: its own ``outcomes``, or,
    once a counts-only re-run merged in, the ``known`` ones (never both)."""
    return run_.get("outcomes") or run_.get("known") or {}


def _test_of(test_id: str) -> str:
    """``Class::test`` of an id that starts with a file's or a JUnit report's name."""
    return test_id.split("::", 1)[1]


def _combine(earlier: dict | None, later: dict) -> dict:
    """One file's outcomes from an earlier and a later run, marked if either holds
    outcomes of JAX's kernels run from ours' copy (``_side_that_ran``)."""
    if earlier is None:
        return later
    combined = _merge_outcomes(earlier, later)
    if earlier.get("jax_kernels_from_ours_copy") or later.get("jax_kernels_from_ours_copy"):
        combined["jax_kernels_from_ours_copy"] = True
    return combined


def _merge_outcomes(earlier: dict, later: dict) -> dict:
    """Runs that list each test's outcome merge test by test (a cut or selected
    later run replaces only the tests it reached); older records, with failures and
    counts only, merge as ``_rerun`` says (selected tests) or are replaced (a
    whole-file run)."""
    if "outcomes" in earlier and "outcomes" in later:
        outcomes = earlier["outcomes"] | later["outcomes"]
        not_passed = {t: why for t, why in earlier["not_passed"].items()
                      if _test_of(t) not in later["outcomes"]} | later["not_passed"]
        counts = {o: list(outcomes.values()).count(o) for o in ("passed", "failed", "skipped")}
        merged = dict(later, **counts, outcomes=outcomes, not_passed=not_passed,
                      note="; ".join(n for n in (earlier["note"], later["note"]) if n))
        if "selected" in earlier or "selected" in later:
            merged["selected"] = earlier.get("selected", []) + later.get("selected", [])
        return merged
    return _rerun(earlier, later) if "selected" in later else later


def _rerun(earlier: dict, rerun: dict) -> dict:
    """``earlier`` and a later selected run, where either keeps counts only (an
    older record; JUnit ids carry the report's name first). A test whose earlier outcome some
    merged run listed (``known``) has that outcome replaced; a test no earlier
    run reached (``new_tests``) is added to the counts; any other selected test
    is a re-run, taken to have passed or failed before, not skipped: a re-run
    picks failures."""
    known = _listed(earlier)
    # the tests the re-run reached (a selected class is its tests), where it lists them
    listed = rerun.get("outcomes", {})
    selected = set(listed) if listed else {_test_of(s) for s in rerun["selected"]}
    replaced = selected & set(known)
    # tests no earlier run reached (run --new): added to the counts, not re-runs
    new = {_test_of(t) for t in rerun.get("new_tests", ())} & selected - replaced
    selected -= new | replaced
    # _scope reads this phrase: a cut file whose unreached tests ran is no longer "cut"
    reached_later = f"; its {len(new)} unreached tests run later" if new else ""
    failed_before = {_test_of(t) for t in earlier["not_passed"]}
    failed_now = {_test_of(t) for t in rerun["not_passed"]}
    fixed = len((failed_before & selected) - failed_now)
    passed_before = len(selected - failed_before)
    if passed_before > earlier["passed"] - list(known.values()).count("passed"):
        # counted as re-runs, some never ran before: the counts would come out short
        raise ValueError(
            f"a run of {len(selected)} selected tests ({sorted(selected)[:3]}...) counts "
            f"{passed_before} as earlier passes, but the earlier runs passed "
            f"{earlier['passed']}: some had never been reached. Mark those in the "
            "record's new_tests (run --new, from `pending --side`)")
    not_passed = {t: why for t, why in earlier["not_passed"].items()
                  if _test_of(t) not in selected | replaced}
    not_passed.update(rerun["not_passed"])
    before = [known[t] for t in replaced]
    # the counts now cover tests no record lists: the merged run keeps them, not outcomes
    earlier = {k: v for k, v in earlier.items() if k != "outcomes"}
    return dict(earlier, passed=earlier["passed"] - passed_before - before.count("passed")
                + rerun["passed"], failed=len(not_passed),
                skipped=earlier["skipped"] - before.count("skipped") + rerun["skipped"],
                not_passed=not_passed,
                # a test re-run without a listed outcome is no longer known
                known={t: o for t, o in known.items() if t not in replaced} | listed,
                new_tests=earlier.get("new_tests", []) + rerun.get("new_tests", []),
                note=(earlier["note"] + reached_later + f"; {len(selected)} re-run later: "
                      f"{fixed} no longer fail ({rerun['skipped']} of them skip), "
                      f"{len(failed_now - failed_before)} newly fail"
                      + (f"; {len(replaced)} run again" if replaced else "")).lstrip("; "))


def failed_ids(folders) -> dict[str, list[str]]:
    """{file: [``file::Class::test``]} that ours failed in the merged runs."""
    ids: dict[str, list[str]] = {}
    for key, run_ in merge(folders)["runs"].items():
        side, _, name = key.partition("/")
        if side == "ours":
            ids[name] = sorted(f"{name}::{_test_of(t)}" for t in run_["not_passed"])
    return {name: tests for name, tests in ids.items() if tests}


def collected_tests(folder: Path, name: str, side: str = "ours") -> list[str]:
    """``Class::test`` ids of the copy ``folder/name``, in pytest's order, collected
    under this machine's JAX."""
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
         name], cwd=folder, env=jax_suite.file_env(name, side, folder),
        capture_output=True, text=True, timeout=600).stdout
    # node ids are relative to pytest's rootdir, which may lie above the copy
    return [line.split(name + "::", 1)[1] for line in collected.splitlines()
            if name + "::" in line]


def pending_ids(folders, pack_dir: Path, files, side: str = "ours") -> list[str]:
    """``file::Class::test`` ids of ``files`` that ``side``'s runs have not
    reached, collected here from the pack's copy (pytest's order is the chip's).
    A run that lists each outcome names what it reached; an older cut run
    without them reached its first passed + failed + skipped tests, in that order,
    bar those later runs listed."""
    runs = merge(folders)["runs"]
    folder = pack_dir / "suite" / side
    ids = []
    for name in files:
        tests = collected_tests(folder, name, side)
        run_ = runs.get(f"{side}/{name}", {})
        reached = set(_listed(run_))
        if "outcomes" not in run_ and run_ and "selected" not in run_:
            # a cut whole-file run reached its first tests; later runs listed theirs
            unlisted = run_["passed"] + run_["failed"] + run_["skipped"] - len(reached)
            reached |= set([t for t in tests if t not in reached][:unlisted])
        ids += [f"{name}::{t}" for t in tests if t not in reached]
    return ids


def render(record: dict) -> str:
    runs = record["runs"]
    lines = [f"Run natively on one {record['device']} ({record['date']} UTC): Python "
             f"{record['python']}, jax {record['jax']}, jaxlib {record['jaxlib']}, libtpu "
             f"{record['libtpu']}; JAX's files at {record['manifest']['rev']} "
             f"({record['manifest']['jax_revision']}), ours at {record['manifest']['ours']}. "
             "Written by `tools/tpu_native.py report` from the runs' per-test logs."]
    later = record.get("later_runs", [])
    if later:
        same = all((r["jax"], r["libtpu"]) == (record["jax"], record["libtpu"]) for r in later)
        lines[0] += (f" Then {len(later)} further runs"
                     + (" under the same versions" if same else "") + ", each replacing the "
                     "earlier outcomes of the tests it reached: " + ", ".join(
                         f"{r['date']} UTC (ours at {r['ours'].split()[0]}"
                         + ("" if same else f"; jax {r['jax']}, libtpu {r['libtpu']}") + ")"
                         for r in later) + ".")
    lines.append("")
    project = {k.split("/", 1)[1]: v for k, v in runs.items() if k.startswith("project/")}
    if project:
        lines += ["| the project's tests on the chip | passed | failed | skipped |",
                  "|---|---|---|---|"]
        lines += [f"| {name} | {r['passed']} | {r['failed']} | {r['skipped']} |"
                  for name, r in project.items()]
        lines.append("")
    names = sorted({k.split("/", 1)[1] for k in runs if not k.startswith("project/")})
    if names:
        lines += ["| JAX's file | JAX on v5e (p/f/s) | ours on v5e (p/f/s) | "
                  "passing under JAX, not under ours |", "|---|---|---|---|"]
        lost_rows, unmatched_rows = [], []
        for name in names:
            theirs, ours = runs.get(f"jax/{name}"), runs.get(f"ours/{name}")
            total = record.get("tests", {}).get(name)
            cell = (lambda r: "–" if r is None else
                    f"{r['passed']}/{r['failed']}/{r['skipped']}" + _scope(r, total))
            lost = _lost(theirs, ours)
            theirs_cell = cell(theirs)
            if theirs and theirs.get("jax_kernels_from_ours_copy"):
                mark = "some from ours' copy packed before pf_jax_ops"
                theirs_cell = (theirs_cell[:-1] + f"; {mark})" if theirs_cell.endswith(")")
                               else f"{theirs_cell} ({mark})")
            lines.append(f"| {name} | {theirs_cell} | {cell(ours)} | "
                         f"{'–' if lost is None else len(lost)} |")
            lost_rows += [f"- `{t}`: {_without_checkout(why)}" for t, why in (lost or {}).items()]
            unmatched_rows += [f"- `{t}`: {_without_checkout(why)}"
                               for t, why in _unmatched(theirs, ours).items()]
        lines.append("")
        if lost_rows:
            lines += ["Tests that pass under JAX on the chip and not under ours:", ""] + lost_rows
        if unmatched_rows:
            lines += [""] * bool(lost_rows) + [
                "Tests that fail under ours and that JAX's runs skipped or have not reached:",
                ""] + unmatched_rows
    return "\n".join(lines)


def _without_checkout(why: str) -> str:
    """A failure's message without the chip host's checkout path (the page
    names no machine's paths): paths into the pack become relative to it."""
    found = re.search(r"(/[^\s:()'\"]+?)/\.tpu-native/", why)
    if not found:
        return why
    root = found.group(1)
    return why.replace(root + "/", "").replace(root, "<checkout>")


def _scope(run_: dict, total: int | None = None) -> str:
    """What part of the file a run covers, when not all of it: counted where the
    pack knew the file's tests, else as the runs' notes tell."""
    if total:
        reached = (len(run_["outcomes"]) if "outcomes" in run_
                   else run_["passed"] + run_["failed"] + run_["skipped"])
        return "" if reached >= total else f" ({reached} of {total} tests reached)"
    cut = "cut at" in run_["note"] and "unreached tests run later" not in run_["note"]
    marks = ["cut"] if cut else []
    if run_.get("selected"):
        marks.append("only selected tests")
    if run_.get("per_test"):
        marks.append(f"first {run_['per_test']} case(s) of each test")
    return f" ({'; '.join(marks)})" if marks else ""


def _lost(theirs, ours):
    """Tests failed under ours that JAX's runs passed (None: a side missing). A JAX
    run that counted its tests without listing them all is taken to have passed
    each test it did not fail: that errs toward reporting a loss."""
    if theirs is None or ours is None:
        return None
    return _ours_failed_where(theirs, ours, ("passed", "unlisted"))


def _unmatched(theirs, ours) -> dict:
    """Tests failed under ours that JAX's runs skipped or never reached: no claim
    either way until JAX's side runs them."""
    if theirs is None or ours is None:
        return {}
    return _ours_failed_where(theirs, ours, ("skipped", None))


def _ours_failed_where(theirs: dict, ours: dict, jax_outcomes: tuple) -> dict:
    """{id: why} of ours' failures whose outcome under JAX is one of ``jax_outcomes``."""
    return {t: why for t, why in ours["not_passed"].items()
            if _jax_outcome(theirs, _test_of(t)) in jax_outcomes}


def _jax_outcome(run_: dict, test: str) -> str | None:
    """``test``'s outcome in a merged JAX run: its listed outcome, "failed",
    "unlisted" (reached, passed or skipped, by counts alone) or None (not reached)."""
    listed = _listed(run_)
    if test in listed:
        return listed[test]
    if test in {_test_of(t) for t in run_["not_passed"]}:
        return "failed"
    reached = run_["passed"] + run_["failed"] + run_["skipped"]
    return None if "outcomes" in run_ or len(listed) >= reached else "unlisted"


def write(text: str, path: Path = DOC) -> None:
    import re
    doc = path.read_text()
    block = f"{START}\n{text}\n{END}"
    if START in doc:
        doc = re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: block, doc, flags=re.S)
    else:       # the last section: tools/jax_suite.py keeps it when it rewrites the page
        doc = doc.rstrip("\n") + "\n\n## TPU v5e, natively\n\n" + block + "\n"
    path.write_text(doc)


def _read_select(path: Path) -> dict[str, list[str]]:
    select: dict[str, list[str]] = {}
    for line in path.read_text().split():
        select.setdefault(line.split("::", 1)[0], []).append(line)
    return select


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="wheels and JAX's TPU test files, here")
    p.add_argument("--jax-src", required=True, type=Path)
    p.add_argument("--rev", default="jax-v0.10.2")
    p.add_argument("--out", type=Path, default=PACK)
    p.add_argument("--files", nargs="*", default=list(TPU_FILES))
    r = sub.add_parser("run", help="on the TPU host")
    r.add_argument("--pack", type=Path, default=PACK)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--site", type=Path, default=Path("/tmp/pallas-native-site"))
    r.add_argument("--parts", default="project,jax-suite")
    r.add_argument("--side", default="ours,jax", help="ours, jax or both (comma-separated)")
    r.add_argument("--files", nargs="*", help="JAX test files to run (default: the pack's)")
    r.add_argument("--timeout", type=float, default=420.0, help="seconds per pytest process")
    q = sub.add_parser("report", help="the docs table from run folders, here")
    q.add_argument("--results", nargs="+", required=True,
                   help="run folders, or their native.json copies, oldest first")
    q.add_argument("--write", action="store_true")
    f = sub.add_parser("failed", help="ids of the tests ours failed, for run --select")
    f.add_argument("--results", nargs="+", required=True)
    r.add_argument("--select", type=Path, help="a file of name.py::Class::test lines to run")
    r.add_argument("--new", type=Path, help="as --select, for tests no earlier run reached "
                   "(as ``pending`` writes them): the report adds them to the file's counts")
    r.add_argument("--bench-only", nargs="*",
                   help="bench: only the cases whose name contains one of these words")
    r.add_argument("--per-test", type=int, default=0,
                   help="jax-suite: only the first N cases of each parameterized test")
    r.add_argument("--test-limit", type=float, default=0.0,
                   help="seconds one test may run; one still running then fails and the "
                        "file goes on after it (0: no per-test limit)")
    g = sub.add_parser("pending", help="ids of the tests no run has reached, for run --select")
    g.add_argument("--results", nargs="+", required=True)
    g.add_argument("--pack", type=Path, default=PACK)
    g.add_argument("--files", nargs="+", required=True)
    g.add_argument("--side", choices=("ours", "jax"), default="ours")
    args = parser.parse_args(argv)
    if args.command == "pack":
        pack(args.jax_src, args.rev, args.out, args.files)
    elif args.command == "run":
        if args.test_limit:      # read by suite_log_plugin in every pytest process
            os.environ["PALLAS_SUITE_TEST_LIMIT"] = str(args.test_limit)
        # a device command's time limit (``timeout``) ends the run with its record written
        jax_suite.stop_on_sigterm()
        new = _read_select(args.new) if args.new else {}
        select = _read_select(args.select) if args.select else {}
        for name, ids in new.items():
            select[name] = select.get(name, []) + ids
        # Stopped is raised only inside the waits, which catch it: no run is lost here
        record = run(args.pack, args.out, args.site, args.parts.split(","),
                     args.side.split(","), args.files, args.timeout, select or None,
                     args.bench_only, args.per_test, new)
        if jax_suite.stop_requested():
            print(f"stopped (SIGTERM): {args.out / 'native.json'} holds what ran until then")
        if record["platform"] != "tpu":
            print(f"note: JAX's default device here is {record['platform']}, not a TPU")
    elif args.command == "pending":
        print("\n".join(pending_ids(args.results, args.pack, args.files, args.side)))
    elif args.command == "failed":
        for tests in failed_ids(args.results).values():
            print("\n".join(tests))
    else:
        text = render(merge(args.results))
        print(text)
        if args.write:
            write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
