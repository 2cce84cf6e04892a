"""Device-less XLA:GPU compiles for H100 and A100 (the ``triton-cuda-aot`` tox env).

Needs jax-cuda12-plugin + jax-cuda12-pjrt (the XLA:GPU compiler), no GPU. Each
GPU's compiles run in one subprocess (tests/gpu_aot_cases.py); this test reads
XLA's thunk sequence from its report: one custom kernel per pallas_call, named
as the TTIR's ``tt.func``, with the kernel's grid and 32 * num_warps threads.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pallas_triton import aot

pytestmark = [pytest.mark.cuda_aot,
              pytest.mark.skipif(not aot.cuda_compiler_installed(),
                                 reason="needs jax-cuda12-plugin/pjrt (tox -e triton-cuda-aot)")]

HERE = Path(__file__).parent
CAPABILITY = {"H100": 90, "A100": 80}


# each GPU's tests in one xdist group: its compile subprocess runs once, on one worker
@pytest.fixture(scope="module", params=[pytest.param(gpu, marks=pytest.mark.xdist_group(gpu))
                                        for gpu in sorted(CAPABILITY)])
def report(request):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, str(HERE / "gpu_aot_cases.py"), request.param],
                          capture_output=True, text=True, env=env, timeout=1800)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    return json.loads(lines[-1][len("REPORT "):])


def test_every_kernel_compiles_with_the_expected_launch(report):
    assert len(report["cases"]) >= 17
    failures = {k: v["error"] for k, v in report["cases"].items() if "error" in v}
    assert not failures, failures
    for name, case in report["cases"].items():
        # our kernel, plus any XLA fusions around it (e.g. decode attention's combine)
        ours = [t for t in case["thunks"] if not t["name"].startswith(("fusion", "loop_", "input_"))]
        assert len(ours) == 1, (name, case["thunks"])
        (thunk,) = ours
        assert case["ttir_funcs"] == [thunk["name"]], (name, case)
        assert thunk["grid"] == [case["programs"], 1, 1], (name, thunk)
        assert thunk["threads"] == [32 * case["num_warps"], 1, 1], (name, thunk)
        # the TTIR was made for the device kind of the compile-only topology
        assert case["targets"] == [["cuda", CAPABILITY[report["gpu"]]]], (name, case)


def test_corrupted_ttir_is_refused(report):
    assert report["corrupted"] != "compiled"
    assert "Failed to parse Triton module" in report["corrupted"], report["corrupted"]
