"""Device-less compile for H100 (jax-cuda12-plugin/pjrt, JAX_PLATFORMS=cpu):
the seed-API kernels and the Hopper matmul example compile; the PTX of the
f16 matmuls holds WGMMA; the ptxas reports are read (no spills). Compiles run
in a subprocess (``aot_probe.py``): a missing libdevice aborts it.

The interpreter: this one when it has the CUDA plugin (tox env
``mgpu-cuda-aot``), else ``$PALLAS_MGPU_CUDA_PYTHON``; skipped without either."""

import json
import os
import subprocess

import pytest

# one worker holds the module (its probe fixture runs once): xdist --dist loadfile
pytestmark = pytest.mark.cuda_aot
EXAMPLES = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "mgpu"))

CASES = ("add", "ragged_add", "matmul_f16", "softmax", "hopper_matmul", "flash_attention",
         "add_block_1024", "add_8_no_grid", "softmax_rows_8", "layer_norm_rows_8",
         "layer_norm_rows_64", "matmul_rows_32_f16", "matmul_rows_32_f32",
         "matmul_rows_32_rhs_nk_f16", "flash_attention_portable_f16",
         "flash_attention_portable_f32", "matmul_rows_128_f16", "matmul_rows_128_f32")


@pytest.fixture(scope="module")
def probe(tmp_path_factory, cuda_python):
    dump = tmp_path_factory.mktemp("mosaic_dump")
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    # two probes at once, half the cases each: a compile is one busy core
    procs = [subprocess.Popen(
        [cuda_python, os.path.join(os.path.dirname(__file__), "aot_probe.py"), *CASES[half::2],
         "--dump", str(dump), "--examples", EXAMPLES],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for half in (0, 1)]
    results, errors = {}, []
    for proc in procs:
        try:
            stdout, stderr = proc.communicate(timeout=900)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        errors.append(f"rc {proc.returncode}:\n{stderr[-3000:]}")
        for line in stdout.splitlines():
            if line.startswith("{"):
                r = json.loads(line)
                results[r["case"]] = r
    missing = [c for c in CASES if c not in results]
    if missing:
        pytest.fail(f"aot_probe reported nothing for {missing}:\n" + "\n".join(errors))
    return results


@pytest.mark.parametrize("case", CASES)
def test_compiles_device_less_for_h100(probe, case):
    r = probe[case]
    assert r["compiled"], r.get("error")
    assert r["ptx_files"] and r["sm90a"]
    assert r["ptxas"]["registers"] and max(r["ptxas"]["registers"]) <= 255
    assert sum(r["ptxas"]["spill_bytes"]) == 0, r["ptxas"]


@pytest.mark.parametrize("case", ["matmul_f16", "hopper_matmul", "flash_attention"])
def test_f16_matmul_ptx_has_wgmma(probe, case):
    assert probe[case]["wgmma_in_ptx"]


@pytest.mark.parametrize("case", ["matmul_rows_32_f16", "matmul_rows_32_f32",
                                  "matmul_rows_32_rhs_nk_f16"])
def test_32_row_matmul_ptx_has_mma_sync(probe, case):
    # WGMMA tiles are 64 rows: 32-row blocks take the warp-level mma.sync
    assert probe[case]["mma_sync_in_ptx"]
