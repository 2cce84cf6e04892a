"""tools/tpu_cpu_plugin.py and tools/tpu_cpu_suite.py: the CPU rehearsal of a
chip run of JAX's TPU test files."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[1] / "tools"
sys.path.insert(0, str(TOOLS))
import jax_suite  # noqa: E402
import tpu_cpu_plugin  # noqa: E402
import tpu_cpu_suite  # noqa: E402

# the device kind each chip reports (what JAX's own rule reads)
KINDS = {"v4": "TPU v4", "v5e": "TPU v5 lite", "v5p": "TPU v5", "v6e": "TPU v6 lite",
         "7x": "TPU7x"}


@pytest.mark.parametrize("chip", sorted(KINDS))
def test_device_checks_answer_as_jax_would_on_that_chip(chip, monkeypatch):
    pytest.importorskip("absl.testing", reason="JAX's test utilities need absl-py")
    from jax._src import test_util as jtu

    class Device:
        device_kind = KINDS[chip]
    # JAX's own functions, fed a fake chip: the reference
    originals = {n: getattr(jtu, n) for n in ("is_device_tpu", "is_device_tpu_at_least",
                                              "get_tpu_version", "device_under_test")}
    for name, fn in originals.items():
        monkeypatch.setattr(jtu, name, fn)
    monkeypatch.setattr(jtu.xla_bridge, "devices", lambda *a: [Device()])
    monkeypatch.setattr(jtu, "device_under_test", lambda: "tpu")
    cases = [(v, var) for v in (None, 3, 4, 5, 6, 7) for var in ("", "e", "p", "x")]
    want = [originals["is_device_tpu"](v, var) for v, var in cases]
    want_at_least = [originals["is_device_tpu_at_least"](v) for v in range(2, 9)]
    want_version = originals["get_tpu_version"]()
    monkeypatch.setattr(jtu.xla_bridge, "devices", lambda *a: [])   # no chip to read now
    monkeypatch.setattr(jtu, "device_under_test", originals["device_under_test"])
    tpu_cpu_plugin.answer_as_chip(chip)
    assert [jtu.is_device_tpu(v, var) for v, var in cases] == want
    # by keyword, as JAX's tests also call them
    assert [jtu.is_device_tpu(version=v, variant=var) for v, var in cases] == want
    assert [jtu.is_device_tpu_at_least(version=v) for v in range(2, 9)] == want_at_least
    assert [jtu.is_device_tpu_at_least(v) for v in range(2, 9)] == want_at_least
    assert jtu.get_tpu_version() == want_version
    assert jtu.test_device_matches(["tpu"]) and not jtu.test_device_matches(["cpu"])


@pytest.mark.parametrize("chip", ["v5e", "v5p", "v6e"])
def test_jax_tpu_info_answers_for_the_chip(chip, monkeypatch):
    """JAX's pipelines read tpu_info (tilings, VMEM size), which fails on a CPU
    device; under the plugin it is the chip's own table (get_tpu_info_for_chip)."""
    pytest.importorskip("absl.testing", reason="JAX's test utilities need absl-py")
    from jax._src.pallas.mosaic import core as tpu_core
    from jax._src.pallas.mosaic import tpu_info
    from jax.experimental.pallas import tpu as jax_pltpu
    for mod, name in ((tpu_info, "get_device_kind"), (tpu_info, "get_num_device_cores"),
                      (tpu_core, "create_tensorcore_mesh"),
                      (jax_pltpu, "create_tensorcore_mesh")):
        monkeypatch.setattr(mod, name, getattr(mod, name))
    tpu_cpu_plugin.answer_tpu_info(chip)     # it clears get_tpu_info's cache
    kind, cores = tpu_cpu_plugin.DEVICES[chip]
    want = tpu_info.get_tpu_info_for_chip(tpu_info.chip_version_from_device_kind(kind), cores)
    assert tpu_info.get_tpu_info() == want
    assert len(jax_pltpu.create_tensorcore_mesh("core").devices) == cores


TEST_FILE = '''
import numpy as np
import jax
from jax._src import test_util as jtu
{pallas}


def _double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


class ChipTest(jtu.JaxTestCase):
    def test_kernel_without_interpret(self):
        self.assertTrue(jtu.test_device_matches(["tpu"]))
        self.assertTrue(jtu.is_device_tpu(5, "e"))
        x = np.random.default_rng().standard_normal((8, 128)).astype(np.float32)
        y = pl.pallas_call(_double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
        np.testing.assert_array_equal(np.asarray(y), x.astype(np.float64) * 2)

    def test_left_out(self):
        raise AssertionError("not selected: must not run")
'''


@pytest.mark.parametrize("side", ["jax", "ours"])
def test_plugin_runs_a_tpu_only_kernel_in_interpret_mode(side, tmp_path):
    """On CPU a pallas_call without interpret= fails under JAX ("Only interpret
    mode is supported on CPU backend"); under the plugin it runs in TPU
    interpret mode, and (suite_log_plugin) only the tests of PALLAS_SUITE_ONLY run."""
    pytest.importorskip("absl.testing", reason="JAX's test utilities need absl-py")
    pallas = ("import pallas_frontend as pl" if side == "ours"
              else "from jax.experimental import pallas as pl")
    (tmp_path / "chip_test.py").write_text(textwrap.dedent(TEST_FILE.format(pallas=pallas)))
    (tmp_path / "only").write_text("ChipTest::test_kernel_without_interpret\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TOOLS), os.environ.get(
        "PYTHONPATH", "")]), PALLAS_JAX_SUITE_TARGET=side, PALLAS_SUITE_ONLY=str(
        tmp_path / "only"), PALLAS_TPU_CHIP_CHECKS="0", JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "tpu_cpu_plugin", "-p", "suite_log_plugin", "chip_test.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert "1 passed, 1 deselected" in proc.stdout, proc.stdout[-3000:]


def test_doc_block_is_replaced_in_place_and_kept_by_jax_suite(tmp_path):
    page = tmp_path / "jax-suite.md"
    page.write_text("# JAX's suite\n\nCPU tables\n\n## TPU v5e, natively\n\nchip\n")
    tpu_cpu_suite.write(f"{tpu_cpu_suite.START}\nfirst\n{tpu_cpu_suite.END}\n", page)
    tpu_cpu_suite.write(f"{tpu_cpu_suite.START}\nsecond\n{tpu_cpu_suite.END}\n", page)
    text = page.read_text()
    assert text.count(tpu_cpu_suite.HEADING) == 1 and "second" in text and "first" not in text
    assert text.index("## TPU v5e, natively") < text.index(tpu_cpu_suite.HEADING)
    kept = jax_suite._kept_native_section(page)
    assert kept.startswith("\n## TPU v5e, natively") and kept.endswith(
        f"second\n{tpu_cpu_suite.END}\n")
    # alone after the CPU tables, too
    page.write_text("# JAX's suite\n\nCPU tables\n")
    tpu_cpu_suite.write(f"{tpu_cpu_suite.START}\nonly\n{tpu_cpu_suite.END}\n", page)
    assert jax_suite._kept_native_section(page).startswith("\n" + tpu_cpu_suite.HEADING)


def test_error_groups_blank_particulars():
    a = tpu_cpu_suite.error_group("ValueError: block (8, 128) of 'x' at line 12")
    b = tpu_cpu_suite.error_group("ValueError: block (16, 256) of 'y' at line 40")
    c = tpu_cpu_suite.error_group("TypeError: block (8, 128) of 'x' at line 12")
    assert a == b != c


CRASH_FILE = '''
import os
from absl.testing import parameterized
from jax._src import test_util as jtu


class Crash(jtu.JaxTestCase):
    def test_a(self):
        pass

    def test_b(self):
        os.abort()          # a process that dies in a test (as an OOM kill would)

    def test_c(self):
        self.assertEqual(1, 2)


class Cases(jtu.JaxTestCase):
    @parameterized.parameters(1, 2, 3)
    def test_p(self, n):
        pass
'''


def test_a_dying_process_fails_its_test_and_the_rest_still_run(tmp_path):
    pytest.importorskip("absl.testing", reason="JAX's test utilities need absl-py")
    (tmp_path / "crash_test.py").write_text(CRASH_FILE)
    results, note, _ = tpu_cpu_suite.forced_run(tmp_path, "crash_test.py", "jax", 600.0, "v5e",
                                                False, None, per_test=1)
    assert note == ""
    assert {t: o for t, (o, _) in results.items()} == {
        "Crash::test_a": "passed", "Crash::test_b": "failed", "Crash::test_c": "failed",
        "Cases::test_p0": "passed"}
    assert "died" in results["Crash::test_b"][1]
    assert results["Crash::test_c"][1].startswith("AssertionError: 1 != 2")


def test_a_test_past_its_limit_fails_and_the_file_goes_on(tmp_path):
    """PALLAS_SUITE_TEST_LIMIT (tools/tpu_native.py run --test-limit): a test that
    does not end is logged as failed at the limit, and run_logged runs the tests
    after it in a fresh process instead of spending the file's whole time."""
    (tmp_path / "limit_test.py").write_text(textwrap.dedent("""
        import time
        def test_first(): pass
        def test_never_ends(): time.sleep(120)
        def test_after(): pass
        def test_fails_after(): assert 1 + 1 == 3
    """))
    env = dict(os.environ, PALLAS_SUITE_TEST_LIMIT="2")
    results, note, seconds = jax_suite.run_logged(["limit_test.py"], tmp_path, env,
                                                  tmp_path / "log", 100)
    assert results["test_first"][0] == "passed" and results["test_after"][0] == "passed"
    assert results["test_never_ends"] == (
        "failed", "did not end within the per-test limit of 2 s (PALLAS_SUITE_TEST_LIMIT); "
                  "the process was ended")
    assert results["test_fails_after"][0] == "failed" and note == "" and seconds < 60


def test_under_a_test_limit_the_backend_is_up_before_the_first_test(tmp_path):
    """The first test's clock does not also hold JAX's start-up (on the chip a test
    after a limit-ended one starts a new process, whose start-up took 20 s and more)."""
    (tmp_path / "warm_test.py").write_text(textwrap.dedent("""
        from jax._src import xla_bridge
        def test_first(): assert xla_bridge.backends_are_initialized()
    """))
    for limit, outcome in (("30", "passed"), ("0", "failed")):
        env = dict(os.environ, PALLAS_SUITE_TEST_LIMIT=limit, JAX_PLATFORMS="cpu")
        results, _, _ = jax_suite.run_logged(["warm_test.py"], tmp_path, env,
                                             tmp_path / f"log{limit}", 100)
        assert results["test_first"][0] == outcome


def test_a_copy_that_does_not_import_fails_as_a_file(tmp_path):
    """A copy whose import fails at collection is a failure of the file, with
    the import error, not a file that ran nothing (ours' copy of a shipped-kernel
    file once lacked its pf_jax_ops package and rehearsed as 0/0/0)."""
    (tmp_path / "broken_test.py").write_text("import not_a_module_here\ndef test_a(): pass\n")
    results, _, _ = jax_suite.run_logged(["broken_test.py"], tmp_path, dict(os.environ),
                                         tmp_path / "log", 100)
    assert list(results) == ["<file>"]
    outcome, why = results["<file>"]
    assert outcome == "failed" and "not_a_module_here" in why


def test_the_rehearsal_copies_the_packages_beside_the_tests(tmp_path):
    suite = tmp_path / "suite"
    for side in ("jax", "ours"):
        (suite / side).mkdir(parents=True)
        (suite / side / "a_test.py").write_text("def test_a(): pass\n")
    (suite / "ours" / "pf_jax_ops" / "tpu").mkdir(parents=True)
    (suite / "ours" / "pf_jax_ops" / "__init__.py").write_text("")
    (suite / "ours" / "pf_jax_ops" / "tpu" / "kernel.py").write_text("X = 1\n")
    dirs = tpu_cpu_suite.copy_suite(suite, tmp_path / "work", ["a_test.py"])
    assert (dirs["ours"] / "pf_jax_ops" / "tpu" / "kernel.py").read_text() == "X = 1\n"
    assert (dirs["jax"] / "a_test.py").exists()


def _rehearsal(lost_by_file):
    meta = {"date": "2026-12-07 09:08", "jax": "0.10.2", "python": "3.11.7", "rev": "abc",
            "chip": "v5e", "chip_checks": True, "command": "python tools/tpu_cpu_suite.py"}
    rows = [{"file": f, "per_test": 0, "jax": [2, 0, 0], "ours": [2 - n, n, 0],
             "lost": [{"test": f"T::t{i}", "outcome": "failed", "first_line": "boom"}
                      for i in range(n)], "not_reached": [], "notes": ["", ""],
             "seconds": [1, 1]} for f, n in lost_by_file.items()]
    return {"meta": meta, "rows": rows}


def test_the_table_sets_an_earlier_runs_losses_beside_only_when_given_one():
    # without --before, a "lost before" column had repeated this run's count
    now = _rehearsal({"a_test.py": 1, "b_test.py": 0})
    alone = tpu_cpu_suite.render(now, None)
    assert "| lost | s JAX / ours |" in alone and "lost before" not in alone
    assert "| `a_test.py` | 2 | 0 | 0 | 1 | 1 | 0 | 1 | 1 / 1 |" in alone
    beside = tpu_cpu_suite.render(now, _rehearsal({"a_test.py": 2}))
    assert "| lost before | lost now |" in beside
    assert "| `a_test.py` | 2 | 0 | 0 | 1 | 1 | 0 | 2 | 1 | 1 / 1 |" in beside
    assert "| `b_test.py` | 2 | 0 | 0 | 2 | 0 | 0 | – | 0 | 1 / 1 |" in beside
    for table in (alone, beside):   # header and separator have as many cells as the rows
        rows = [line for line in table.splitlines() if line.startswith("|")]
        assert len({line.count("|") for line in rows}) == 1
