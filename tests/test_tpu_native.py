"""tools/tpu_native.py without a TPU: the table it writes from a chip's run
(which tests pass under JAX and not under ours), the page section that
tools/jax_suite.py keeps, and the environment its children get on a chip."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import jax_suite  # noqa: E402
import tpu_native  # noqa: E402


def _run(passed, failed, skipped, not_passed=()):
    return {"passed": passed, "failed": failed, "skipped": skipped, "seconds": 1.0, "note": "",
            "exit": 0, "not_passed": {t: "AssertionError: x" for t in not_passed}}


RECORD = {"date": "2026-12-06 03:18", "device": "TPU v5 lite", "platform": "tpu",
          "python": "3.11.7", "jax": "0.10.2", "jaxlib": "0.10.2", "libtpu": "0.0.42.1",
          "manifest": {"rev": "jax-v0.10.2", "jax_revision": "abc", "ours": "def"},
          "runs": {"project/conformance": _run(60, 1, 4, ["project-conformance::t::a"]),
                   "jax/a_test.py": _run(5, 1, 0, ["jax-a_test::C::both_fail"]),
                   "ours/a_test.py": _run(3, 3, 0, ["ours-a_test::C::both_fail",
                                                    "ours-a_test::C::lost_one",
                                                    "ours-a_test::C::lost_two"]),
                   "ours/b_test.py": _run(2, 0, 0)}}


def test_lost_tests_are_those_jax_did_not_fail():
    lost = tpu_native._lost(RECORD["runs"]["jax/a_test.py"], RECORD["runs"]["ours/a_test.py"])
    assert sorted(lost) == ["ours-a_test::C::lost_one", "ours-a_test::C::lost_two"]
    assert tpu_native._lost(None, RECORD["runs"]["ours/b_test.py"]) is None


def test_a_failure_counts_as_lost_only_where_jax_passed_or_may_have_passed_the_test():
    # 2026-12-07: a chip run of ours timed out on a gmm test JAX had never reached,
    # and the table called it "passing under JAX, not under ours"
    ours = _run(0, 4, 0, ["ours-f::C::jax_passed", "ours-f::C::jax_skipped",
                          "ours-f::C::jax_failed", "ours-f::C::never_run_by_jax"])
    listed = dict(_run(1, 1, 1, ["jax-f::C::jax_failed"]),
                  outcomes={"C::jax_passed": "passed", "C::jax_skipped": "skipped",
                            "C::jax_failed": "failed"})
    # a merged run whose counts all belong to the tests it names
    known = dict(_run(1, 1, 1, ["jax-f::C::jax_failed"]), known=listed["outcomes"])
    for theirs in (listed, known):
        assert list(tpu_native._lost(theirs, ours)) == ["ours-f::C::jax_passed"]
        assert list(tpu_native._unmatched(theirs, ours)) == ["ours-f::C::jax_skipped",
                                                              "ours-f::C::never_run_by_jax"]
    # counts beyond the named tests: any test it did not fail may have passed there
    partly_known = dict(known, passed=5)
    assert sorted(tpu_native._lost(partly_known, ours)) == [
        "ours-f::C::jax_passed", "ours-f::C::never_run_by_jax"]
    record = dict(RECORD, runs={"jax/f.py": listed, "ours/f.py": ours})
    text = tpu_native.render(record)
    assert "| f.py | 1/1/1 | 0/4/0 | 1 |" in text
    assert text.index("`ours-f::C::jax_passed`") < text.index("JAX's runs skipped or have not")
    assert text.index("JAX's runs skipped") < text.index("`ours-f::C::never_run_by_jax`")


def test_the_table_states_versions_counts_and_losses():
    text = tpu_native.render(RECORD)
    assert "TPU v5 lite" in text and "jax 0.10.2" in text and "libtpu 0.0.42.1" in text
    assert "| conformance | 60 | 1 | 4 |" in text
    assert "| a_test.py | 5/1/0 | 3/3/0 | 2 |" in text
    assert "| b_test.py | – | 2/0/0 | – |" in text      # JAX's side not run: no claim
    assert "`ours-a_test::C::lost_one`" in text and "both_fail`" not in text


def test_failure_messages_on_the_page_name_no_host_path():
    # the chip host's checkout path reached docs/jax-suite.md inside error messages
    ours = _run(0, 1, 0)
    ours["not_passed"] = {"ours-f::C::t": "BlockIndexError: Kernel k at /srv/ci/repo/"
                          ".tpu-native/suite/ours/f.py:12: out of range (index_map at "
                          "/srv/ci/repo"}
    jax = dict(_run(1, 0, 0), outcomes={"C::t": "passed"})
    text = tpu_native.render(dict(RECORD, runs={"jax/f.py": jax, "ours/f.py": ours}))
    assert "/srv/ci" not in text
    assert "Kernel k at .tpu-native/suite/ours/f.py:12: out of range" in text


def test_the_native_section_survives_a_rewrite_of_the_cpu_tables(tmp_path):
    page = tmp_path / "jax-suite.md"
    page.write_text("# JAX's suite\n\nold CPU tables\n")
    tpu_native.write("the chip's table", page)
    assert page.read_text().endswith("## TPU v5e, natively\n\n<!-- tpu_native:start -->\n"
                                     "the chip's table\n<!-- tpu_native:end -->\n")
    kept = jax_suite._kept_native_section(page)
    page.write_text("# JAX's suite\n\nnew CPU tables\n" + kept)
    tpu_native.write("a newer chip table", page)
    text = page.read_text()
    assert "new CPU tables" in text and "a newer chip table" in text
    assert text.count("## TPU v5e, natively") == 1 and "the chip's table" not in text


def test_children_on_a_chip_keep_its_settings(monkeypatch, tmp_path):
    monkeypatch.setenv("PYTHONPATH", "/host/jax")
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "host-set")
    env = tpu_native.chip_env(tmp_path / "site", tmp_path / "suite")
    assert env["PYTHONPATH"].split(":") == [str(tmp_path / "suite"), "/host/jax",
                                             str(tmp_path / "site")]   # the host's JAX first
    assert "JAX_PLATFORMS" not in env and env["TPU_WORKER_HOSTNAMES"] == "host-set"
    assert env["PALLAS_TPU_NATIVE"] == "1"


def test_each_side_of_the_jax_files_calls_its_own_pallas_call(monkeypatch, tmp_path):
    # the suite's shared helper picks pallas_call by PALLAS_JAX_SUITE_TARGET; without it
    # the "ours" copy called JAX's pallas_call with ours' BlockSpecs (174 false failures
    # of tpu_pallas_test.py on the chip, 2026-12-06)
    monkeypatch.setenv("PALLAS_JAX_SUITE_TARGET", "stale")
    for side in ("ours", "jax"):
        env = tpu_native.chip_env(tmp_path / "site", tmp_path / "suite" / side, side)
        assert env["PALLAS_JAX_SUITE_TARGET"] == side
    assert "PALLAS_JAX_SUITE_TARGET" not in tpu_native.chip_env(tmp_path / "site")
    helper = (Path(tpu_native.jax_suite.SHIMS) / "_suite_pallas_test_util.py").read_text()
    assert 'os.environ.get("PALLAS_JAX_SUITE_TARGET") == "ours"' in helper


def test_the_bench_part_runs_the_native_benchmark_within_the_timeout(monkeypatch, tmp_path):
    script = tmp_path / "benchmarks" / "tpu_native_bench.py"
    script.parent.mkdir()
    script.write_text("import json, sys\nfrom pathlib import Path\n"
                      "out = Path(sys.argv[sys.argv.index('--out') + 1])\n"
                      "out.mkdir(parents=True)\n"
                      "(out / 'argv.json').write_text(json.dumps(sys.argv[1:]))\n")
    monkeypatch.setattr(tpu_native, "ROOT", tmp_path)
    record = tpu_native.bench_run(tmp_path / "out" / "bench", dict(__import__("os").environ),
                                 timeout=200.0)
    argv = __import__("json").loads((tmp_path / "out" / "bench" / "argv.json").read_text())
    assert record["exit"] == 0 and record["results"].endswith("bench.json")
    assert argv[argv.index("--budget") + 1] == "170.0"     # stops 30 s before the cut


def test_a_rerun_of_selected_tests_replaces_only_their_outcomes(tmp_path):
    import json
    first = dict(RECORD, runs={"ours/a_test.py": _run(3, 3, 0, ["ours-a_test::C::both_fail",
                                                                "ours-a_test::C::lost_one",
                                                                "ours-a_test::C::lost_two"])})
    rerun = dict(RECORD, date="2026-12-07 01:00",
                 runs={"ours/a_test.py": dict(_run(1, 1, 0, ["ours-a_test::C::lost_two"]),
                                              selected=["a_test.py::C::lost_one",
                                                        "a_test.py::C::lost_two"])})
    for name, record in (("one", first), ("two", rerun)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "native.json").write_text(json.dumps(record))
    merged = tpu_native.merge([tmp_path / "one", tmp_path / "two"])["runs"]["ours/a_test.py"]
    assert (merged["passed"], merged["failed"]) == (4, 2)
    assert sorted(merged["not_passed"]) == ["ours-a_test::C::both_fail",
                                            "ours-a_test::C::lost_two"]
    assert "2 re-run later: 1 no longer fail (0 of them skip), 0 newly fail" in merged["note"]
    assert tpu_native.failed_ids([tmp_path / "one", tmp_path / "two"]) == {
        "a_test.py": ["a_test.py::C::both_fail", "a_test.py::C::lost_two"]}
    ids = tmp_path / "ids.txt"
    ids.write_text("a_test.py::C::x\nb_test.py::D::y\na_test.py::C::z\n")
    assert tpu_native._read_select(ids) == {"a_test.py": ["a_test.py::C::x", "a_test.py::C::z"],
                                           "b_test.py": ["b_test.py::D::y"]}


def test_runs_with_per_test_outcomes_merge_test_by_test(tmp_path):
    import json

    def run_(outcomes, note=""):
        failed = [f"ours-a_test::{t}" for t, o in outcomes.items() if o == "failed"]
        counts = [list(outcomes.values()).count(o) for o in ("passed", "failed", "skipped")]
        return dict(_run(*counts, failed), outcomes=outcomes, note=note)
    # a class re-run alone, then the whole file cut before reaching that class
    first = run_({"M::a": "passed", "M::b": "failed"})
    later = run_({"P::x": "passed", "P::y": "failed", "P::z": "skipped"},
                 note="cut at the 165 s limit")
    for name, run in (("one", first), ("two", later)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "native.json").write_text(json.dumps(
            dict(RECORD, runs={"ours/a_test.py": run})))
    merged = tpu_native.merge([tmp_path / "one", tmp_path / "two"])["runs"]["ours/a_test.py"]
    assert (merged["passed"], merged["failed"], merged["skipped"]) == (2, 2, 1)
    assert sorted(merged["not_passed"]) == ["ours-a_test::M::b", "ours-a_test::P::y"]
    assert tpu_native._scope(merged) == " (cut)"
    # the class's failure fixed in a third run: only its outcome changes
    (tmp_path / "three").mkdir()
    (tmp_path / "three" / "native.json").write_text(json.dumps(
        dict(RECORD, runs={"ours/a_test.py": run_({"M::b": "passed"})})))
    merged = tpu_native.merge([tmp_path / n for n in ("one", "two", "three")])
    assert tpu_native.failed_ids([tmp_path / n for n in ("one", "two", "three")]) == {
        "a_test.py": ["a_test.py::P::y"]}
    assert merged["runs"]["ours/a_test.py"]["passed"] == 3


CUT_FILE = '''
import time


def test_a():
    pass


def test_b():
    assert 1 == 2


def test_c():
    time.sleep(120)     # past the limit: the run is killed here


def test_d():
    pass
'''


def test_a_file_cut_at_its_limit_keeps_the_outcomes_it_reached(tmp_path):
    # JUnit is written only when pytest ends: on the chip (2026-12-06) a file whose
    # compile ignored SIGINT was killed and all its outcomes were lost
    (tmp_path / "cut_test.py").write_text(CUT_FILE)
    result = tpu_native.pytest_run(["cut_test.py"], tmp_path / "ours-cut_test",
                                   dict(__import__("os").environ), tmp_path, timeout=10.0)
    assert (result["passed"], result["failed"], result["skipped"]) == (1, 1, 0)
    assert result["note"] == "cut at the 10 s limit" and result["seconds"] < 60
    assert list(result["not_passed"]) == ["ours-cut_test::test_b"]
    assert result["not_passed"]["ours-cut_test::test_b"].startswith("assert 1 == 2")
    run_ = dict(result, per_test=2)
    assert tpu_native._scope(run_) == " (cut; first 2 case(s) of each test)"


PENDING_FILE = '''
import unittest


class T(unittest.TestCase):     # as JAX's test classes, collected by their base
    def test_a(self): pass
    def test_b(self): pass
    def test_c(self): pass
    def test_d(self): pass
'''


def test_pending_tests_are_those_no_run_reached(tmp_path):
    import json
    copy = tmp_path / "pack" / "suite" / "ours"
    copy.mkdir(parents=True)
    for name in ("listed_test.py", "counted_test.py", "unrun_test.py"):
        (copy / name).write_text(PENDING_FILE)
    # a run listing outcomes (a cut file: test_a and test_c reached), an older cut
    # run with counts only (its first two in pytest's order), and a file never run
    runs = {"ours/listed_test.py": dict(_run(1, 1, 0), outcomes={"T::test_a": "passed",
                                                                 "T::test_c": "failed"}),
            "ours/counted_test.py": _run(1, 0, 1)}
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "native.json").write_text(json.dumps(dict(RECORD, runs=runs)))
    ids = tpu_native.pending_ids([tmp_path / "one"], tmp_path / "pack",
                                 ["listed_test.py", "counted_test.py", "unrun_test.py"])
    assert ids == ["listed_test.py::T::test_b", "listed_test.py::T::test_d",
                   "counted_test.py::T::test_c", "counted_test.py::T::test_d",
                   "unrun_test.py::T::test_a", "unrun_test.py::T::test_b",
                   "unrun_test.py::T::test_c", "unrun_test.py::T::test_d"]
    # JAX's side counts its own runs (``--side jax``), from its own copy
    jax_copy = tmp_path / "pack" / "suite" / "jax"
    jax_copy.mkdir()
    (jax_copy / "listed_test.py").write_text(PENDING_FILE)
    runs["jax/listed_test.py"] = dict(_run(1, 0, 0), outcomes={"T::test_d": "passed"})
    (tmp_path / "one" / "native.json").write_text(json.dumps(dict(RECORD, runs=runs)))
    assert tpu_native.pending_ids([tmp_path / "one"], tmp_path / "pack", ["listed_test.py"],
                                  "jax") == ["listed_test.py::T::test_a",
                                             "listed_test.py::T::test_b",
                                             "listed_test.py::T::test_c"]


def test_tests_no_earlier_run_reached_add_to_the_counts(tmp_path):
    import json
    # an older cut run (counts and failures only), then a run of its one failure
    # (a re-run) and of two tests it never reached (run --new)
    first = dict(_run(3, 1, 2, ["ours-a_test::C::f"]), note="cut at the 90 s limit")
    later = dict(_run(2, 1, 0, ["ours-a_test::C::new_bad"]),
                 outcomes={"C::f": "passed", "C::new_ok": "passed", "C::new_bad": "failed"},
                 selected=["a_test.py::C::f", "a_test.py::C::new_ok", "a_test.py::C::new_bad"],
                 new_tests=["a_test.py::C::new_ok", "a_test.py::C::new_bad"])
    for name, run in (("one", first), ("two", later)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "native.json").write_text(json.dumps(
            dict(RECORD, runs={"ours/a_test.py": run})))
    merged = tpu_native.merge([tmp_path / "one", tmp_path / "two"])["runs"]["ours/a_test.py"]
    assert (merged["passed"], merged["failed"], merged["skipped"]) == (5, 1, 2)
    assert list(merged["not_passed"]) == ["ours-a_test::C::new_bad"]
    assert tpu_native._scope(merged) == ""        # every test reached: not "cut"


def test_a_test_two_later_runs_list_is_counted_once(tmp_path):
    # paged attention under JAX's kernels (2026-12-06): the first run had counts
    # only, and later "new" runs reached tests an earlier one had listed; each was
    # added again, and the table claimed 872 of 872 reached where 745 had been
    import json
    copy = tmp_path / "pack" / "suite" / "ours"
    copy.mkdir(parents=True)
    (copy / "a_test.py").write_text(PENDING_FILE)
    first = dict(_run(1, 0, 0), note="cut at the 90 s limit")       # reached T::test_a
    second = dict(_run(1, 0, 1), outcomes={"T::test_b": "passed", "T::test_c": "skipped"},
                  selected=["a_test.py::T::test_b", "a_test.py::T::test_c"],
                  new_tests=["a_test.py::T::test_b", "a_test.py::T::test_c"])
    # test_c again (now passing) beside one it had not reached
    third = dict(_run(1, 1, 0, ["ours-a_test::T::test_d"]),
                 outcomes={"T::test_c": "passed", "T::test_d": "failed"},
                 selected=["a_test.py::T::test_c", "a_test.py::T::test_d"],
                 new_tests=["a_test.py::T::test_c", "a_test.py::T::test_d"])
    folders = []
    for name, run in (("one", first), ("two", second), ("three", third)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "native.json").write_text(json.dumps(
            dict(RECORD, manifest=dict(RECORD["manifest"], tests={"a_test.py": 4}),
                 runs={"ours/a_test.py": run})))
        folders.append(tmp_path / name)
    two = tpu_native.merge(folders[:2])["runs"]["ours/a_test.py"]
    assert (two["passed"], two["failed"], two["skipped"]) == (2, 0, 1)
    assert tpu_native.pending_ids(folders[:2], tmp_path / "pack", ["a_test.py"]) == [
        "a_test.py::T::test_d"]
    merged = tpu_native.merge(folders)["runs"]["ours/a_test.py"]
    assert (merged["passed"], merged["failed"], merged["skipped"]) == (3, 1, 0)
    assert list(merged["not_passed"]) == ["ours-a_test::T::test_d"]
    assert tpu_native._scope(merged, 4) == ""
    assert tpu_native.pending_ids(folders, tmp_path / "pack", ["a_test.py"]) == []


def test_a_counts_only_rerun_after_listed_outcomes_replaces_them(tmp_path):
    # a record without outcomes (a re-run of one failure) after one that lists them
    import json
    first = dict(_run(1, 1, 0, ["ours-a_test::C::b"]),
                 outcomes={"C::a": "passed", "C::b": "failed"})
    rerun = dict(_run(1, 0, 0), selected=["a_test.py::C::b"])
    folders = []
    for name, run in (("one", first), ("two", rerun)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "native.json").write_text(json.dumps(
            dict(RECORD, runs={"ours/a_test.py": run})))
        folders.append(tmp_path / name)
    merged = tpu_native.merge(folders)["runs"]["ours/a_test.py"]
    assert (merged["passed"], merged["failed"], merged["skipped"]) == (2, 0, 0)
    assert merged["not_passed"] == {} and "outcomes" not in merged
    assert merged["known"] == {"C::a": "passed"}     # b's listed outcome is stale now


def test_shipped_kernel_runs_before_pf_jax_ops_count_as_jaxs(tmp_path):
    # a shipped-kernel file's copy ran JAX's kernels through JAX's Pallas until the
    # pack swapped their imports (pf_jax_ops): those outcomes belong to JAX's column,
    # and only runs through ours fill ours'
    import json
    name = "tpu_gmm_test.py"

    def record(folder, through_ours, outcomes, file=name):
        run = dict(_run(list(outcomes.values()).count("passed"), 0, 0), outcomes=outcomes,
                   not_passed={f"ours-{file[:-3]}::{t}": "boom" for t, o in outcomes.items()
                               if o == "failed"})
        # a pack made with pf_jax_ops says so in its manifest
        manifest = dict(RECORD["manifest"], **({"ops": "pf_jax_ops"} if through_ours else {}))
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "native.json").write_text(json.dumps(
            dict(RECORD, manifest=manifest, runs={f"ours/{file}": run})))
        return tmp_path / folder
    old = record("old", False, {"G::a": "passed", "G::b": "passed"})
    new = record("new", True, {"G::a": "passed", "G::b": "failed"})
    other = record("other", False, {"G::a": "passed"}, file="b_test.py")
    runs = tpu_native.merge([old, new, other])["runs"]
    assert runs[f"jax/{name}"]["outcomes"] == {"G::a": "passed", "G::b": "passed"}
    assert runs[f"ours/{name}"]["outcomes"] == {"G::a": "passed", "G::b": "failed"}
    assert "ours/b_test.py" in runs and "jax/b_test.py" not in runs   # not a shipped-kernel file
    table = tpu_native.render(tpu_native.merge([old, new]))
    row = next(line for line in table.splitlines() if line.startswith(f"| {name}"))
    assert "| 2/0/0 (some from ours' copy packed before pf_jax_ops) |" in row
    assert row.endswith("| 1 |")          # G::b passes under JAX, fails under ours


def test_a_file_is_marked_partly_run_until_every_test_it_has_was_reached(tmp_path):
    # the pack counts each file's tests; split runs that together reach them all
    # leave no mark, whatever their notes say of cuts
    import json

    def record(folder, outcomes, tests):
        run = dict(_run(len(outcomes), 0, 0), outcomes=outcomes, note="cut at the 500 s limit",
                   selected=[f"c_test.py::{t}" for t in outcomes])
        manifest = dict(RECORD["manifest"], tests={"c_test.py": tests})
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "native.json").write_text(json.dumps(
            dict(RECORD, manifest=manifest, runs={"ours/c_test.py": run})))
        return tmp_path / folder
    first = record("first", {"C::a": "passed", "C::b": "passed"}, 3)
    rest = record("rest", {"C::c": "passed"}, 3)

    def ours_cell(folders):
        table = tpu_native.render(tpu_native.merge(folders))
        return next(line for line in table.splitlines() if line.startswith("| c_test.py"))
    assert "| 2/0/0 (2 of 3 tests reached) |" in ours_cell([first])
    assert "| 3/0/0 |" in ours_cell([first, rest])


# run_logged on stop_test.py with the file limit argv[3]; with argv[4] == "late", a
# SIGTERM lands after the wait on pytest has ended, while the tool reads its log
STOP_DRIVER = """
import json, os, signal, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
import jax_suite
jax_suite.stop_on_sigterm()
if sys.argv[4] == "late":
    read = jax_suite.read_outcome_log

    def read_after_a_sigterm(log, results):
        os.kill(os.getpid(), signal.SIGTERM)
        return read(log, results)
    jax_suite.read_outcome_log = read_after_a_sigterm
here = Path(sys.argv[1])
results, note, seconds = jax_suite.run_logged(["stop_test.py"], here, dict(os.environ),
                                              here / "log", float(sys.argv[3]))
print(json.dumps({"results": results, "note": note, "stopped": jax_suite.stop_requested()}))
"""


def _stop_driver(tmp_path, limit: float, when: str) -> list[str]:
    (tmp_path / "stop_test.py").write_text(
        "import time\ndef test_first(): pass\ndef test_second(): time.sleep(120)\n")
    (tmp_path / "driver.py").write_text(STOP_DRIVER)
    return [sys.executable, str(tmp_path / "driver.py"), str(tmp_path), str(ROOT / "tools"),
            str(limit), when]


def test_a_sigterm_cuts_the_file_under_way_and_keeps_what_it_ran(tmp_path):
    # a device command's `timeout` ended the tool before it wrote its record
    # (2026-12-07): 667 outcomes of a chip run stood only in the per-test log
    import json
    import signal
    import subprocess
    import time
    driver = subprocess.Popen(_stop_driver(tmp_path, 300, "during"), stdout=subprocess.PIPE,
                              text=True)
    log, start = tmp_path / "log.jsonl", time.monotonic()
    while '"test_second", "outcome": "started"' not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() - start < 60 and driver.poll() is None
        time.sleep(0.2)
    driver.send_signal(signal.SIGTERM)
    out, _ = driver.communicate(timeout=60)
    got = json.loads(out)
    assert got["results"] == {"test_first": ["passed", ""]}
    assert got["note"] == "cut: the command running it was stopped" and got["stopped"]
    assert time.monotonic() - start < 60            # not the 120 s test's end


def test_a_sigterm_outside_the_wait_loses_nothing_the_run_logged(tmp_path):
    # 2026-12-07: `timeout` sent its SIGTERM while the tool handled the file's own
    # limit; Stopped, raised there, skipped the record of 124 chip outcomes
    import json
    import subprocess
    out = subprocess.run(_stop_driver(tmp_path, 3, "late"), capture_output=True, text=True,
                         timeout=90)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["results"]["test_first"] == ["passed", ""]
    assert got["note"] == "cut at the 3 s limit" and got["stopped"]


def test_a_run_refuses_an_out_folder_an_earlier_run_wrote(tmp_path):
    # the lent machine kept /tmp between sessions: a reused folder handed a new run
    # an earlier run's native.json
    import pytest
    out = tmp_path / "out"
    out.mkdir()
    (out / "native.json").write_text("{}")
    with pytest.raises(SystemExit, match="not empty"):
        tpu_native.run(tmp_path / "pack", out, tmp_path / "site", ["jax-suite"], ["ours"],
                       None, 10.0)
    assert (out / "native.json").read_text() == "{}"


def test_a_rerun_counting_never_reached_tests_as_rerun_is_refused(tmp_path):
    # three selected tests counted as re-runs of a file that had passed two: the
    # JAX column said 2/0/0 where 3 had passed (gmm, 2026-12-07)
    import json
    import pytest
    first = dict(_run(2, 0, 0), note="cut at the 90 s limit")
    later = dict(_run(3, 0, 0), outcomes={"G::a": "passed", "G::b": "passed", "G::c": "passed"},
                 selected=["g_test.py::G::a", "g_test.py::G::b", "g_test.py::G::c"])
    for name, run in (("one", first), ("two", later)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "native.json").write_text(json.dumps(
            dict(RECORD, runs={"jax/g_test.py": run})))
    with pytest.raises(ValueError, match="never been reached.*new_tests"):
        tpu_native.merge([tmp_path / "one", tmp_path / "two"])
    later["new_tests"] = ["g_test.py::G::c"]
    (tmp_path / "two" / "native.json").write_text(json.dumps(
        dict(RECORD, runs={"jax/g_test.py": later})))
    merged = tpu_native.merge([tmp_path / "one", tmp_path / "two"])["runs"]["jax/g_test.py"]
    assert (merged["passed"], merged["failed"]) == (3, 0)
