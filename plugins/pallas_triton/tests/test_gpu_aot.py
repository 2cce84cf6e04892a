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


@pytest.fixture(scope="module")
def reports():
    """{gpu: report}; the GPUs' compile subprocesses run at once (a compile is one
    busy core), so the module needs one xdist worker (--dist loadfile)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    procs = {gpu: subprocess.Popen([sys.executable, str(HERE / "gpu_aot_cases.py"), gpu],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env=env)
             for gpu in sorted(CAPABILITY)}
    out, errors = {}, []
    for gpu, proc in procs.items():
        try:
            stdout, stderr = proc.communicate(timeout=1800)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        lines = [line for line in stdout.splitlines() if line.startswith("REPORT ")]
        if proc.returncode == 0 and lines:
            out[gpu] = json.loads(lines[-1][len("REPORT "):])
        else:
            errors.append(f"{gpu}: rc {proc.returncode}\n{stderr[-4000:]}")
    assert not errors, "\n".join(errors)
    return out


@pytest.fixture(params=sorted(CAPABILITY))
def report(request, reports):
    return reports[request.param]


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
