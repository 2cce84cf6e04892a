"""The hostile-input probes of tests/probes (issue 24) as tests: every case
ends correct (against JAX interpret, XLA or NumPy) or with a clear error
(naming the kernel, and the operand where one is at fault) -- never an
unhelpful error, a crash, a hang or a silent wrong result.

The in-process cases run by default (seconds); the cases that need their own
process (a possible hang, a plugin's environment, captured output) run with
PALLAS_PROBES_ALL=1, as ``python tests/probes/run.py`` runs everything."""

import os

import pytest

from probes import common

MODULES = ("probe_errors", "probe_wrong_results", "probe_hangs", "probe_crashes",
           "probe_round3_numerics", "probe_round3_structure", "probe_round3_control",
           "probe_round4_numerics", "probe_round4_structure", "probe_round4_control",
           "probe_round4_surface")
ALL = os.environ.get("PALLAS_PROBES_ALL") == "1"
PARAMS = [pytest.param(m, c, id=f"{m[len('probe_'):]}-{c.id}")
          for m in MODULES for c in common.cases_of(m)]


@pytest.mark.parametrize("module, case", PARAMS)
def test_probe(module, case):
    if (case.subprocess or case.env) and not ALL:
        pytest.skip("runs in its own process: PALLAS_PROBES_ALL=1 or tests/probes/run.py")
    if case.slow and not ALL:
        pytest.skip("slow (a plugin's interpreter, a dtype sweep): PALLAS_PROBES_ALL=1 or run.py")
    outcome, detail = common.run(module, case, seed=20261203)
    if outcome == "skipped":
        pytest.skip(detail)
    if case.xfail and outcome not in common.GOOD:
        pytest.xfail(f"{case.xfail} ({outcome}: {detail[:200]})")
    assert outcome in common.GOOD, f"{outcome}: {detail}"


def test_every_defect_of_the_issue_has_a_probe_or_a_test():
    probed = {c.defect for m in MODULES for c in common.cases_of(m) if c.defect}
    for n in range(1, 14):
        assert n in probed or n in DEFECT_TESTS, n
    for paths in DEFECT_TESTS.values():
        for path in paths:
            assert os.path.exists(os.path.join(os.path.dirname(__file__), "..", path)), path


# Issue 24's numbered defects -> the tests that hold each fix (the probes above
# re-run 1, 2, 3, 5, 7, 8, 9, 10 and 13 in compact form).
DEFECT_TESTS = {
    1: ["plugins/pallas_triton/tests/test_sixteen_bit.py"],
    2: ["tests/test_silent_wrong_input_writes.py"],
    3: ["tests/test_silent_wrong_masked_load.py"],
    4: ["tests/test_silent_wrong_wide_offsets.py",
        "plugins/pallas_triton/tests/test_large_offsets.py"],
    5: ["tests/test_silent_wrong_repeated_ref.py"],
    6: ["tests/test_silent_wrong_multiplatform_export.py"],
    7: ["plugins/pallas_triton/tests/test_xla_numerics.py"],
    8: ["tests/test_silent_wrong_debug_checks.py"],
    9: ["tests/test_silent_wrong_debug_print.py"],
    10: ["tests/test_plugin_import_timeout.py",
         "plugins/pallas_tpu/tests/test_semaphore_deadlock.py"],
    11: ["plugins/pallas_triton/tests/test_sixteen_bit.py"],
    12: ["tests/test_conformance_mutation.py"],
    13: ["tests/test_errors_kernel_named.py", "tests/test_env_config.py"],
}
