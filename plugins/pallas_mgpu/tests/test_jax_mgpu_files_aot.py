"""JAX's own Mosaic GPU kernel files (hopper_matmul_mgpu, attention_mgpu
forward, causal and gradient, ragged_dot_mgpu), only their Pallas imports
swapped, compiled device-less for H100 as JAX's unmodified files are
(``jax_files_probe.py`` in a subprocess: a compile without libdevice aborts
its process). Without the CUDA plugin, JAX's Hopper matmul is lowered for
cuda instead, with ours and with JAX's, and the Mosaic GPU modules compared.

The compile needs jax-cuda12-plugin/pjrt in this interpreter (tox env
``mgpu-cuda-aot``) or ``$PALLAS_MGPU_CUDA_PYTHON``."""

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import jax
import pytest

from pallas_mgpu import _jax_private, aot

HERE = Path(__file__).resolve().parent
TOOLS = HERE.parents[2] / "tools"
if not (TOOLS / "jax_ops_copy.py").exists():
    pytest.skip("needs the checkout's tools/ (the import rewriting)", allow_module_level=True)
CASES = ("hopper_matmul", "attention", "attention_causal", "attention_grad", "ragged_dot")


@pytest.mark.cuda_aot
def test_jax_mosaic_gpu_files_compile_for_h100_as_jax(cuda_python):
    proc = subprocess.run([cuda_python, str(HERE / "jax_files_probe.py"), *CASES],
                          capture_output=True, text=True, timeout=1500,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})
    rows = {(r["case"], r["side"]): r for r in map(json.loads, (
        line for line in proc.stdout.splitlines() if line.startswith("{")))}
    for case in CASES:
        theirs, ours = rows.get((case, "jax")), rows.get((case, "ours"))
        assert theirs and ours, f"{case}: the probe reported nothing\n{proc.stderr[-3000:]}"
        assert theirs["compiled"], f"{case}: JAX's own file fails here: {theirs.get('error')}"
        assert ours["compiled"], f"{case}: {ours.get('error')}"
        assert ours["kernels"] == theirs["kernels"] > 0


def _mosaic_ops(module: str) -> Counter:
    """How many times each Mosaic GPU / NVVM operation occurs in a module."""
    import re
    return Counter(re.findall(r'"stable_mosaic_gpu\.(nvvm\.[a-z_.0-9]+|gpu\.[a-z_.0-9]+)"\(',
                              module))


def test_jax_hopper_matmul_file_lowers_for_cuda_as_jax():
    """Without a compiler: the whole Mosaic GPU lowering of JAX's Hopper matmul
    (TMA, mbarriers, the warp-specialized pipeline), ours against JAX's: the
    same NVVM and GPU operations, as often."""
    sys.path.insert(0, str(TOOLS))
    sys.path.insert(0, str(HERE))
    import jax_files_probe
    import jax_ops_copy

    def mod_of(side, name):
        return jax_ops_copy.ours_ops().load(name) if side == "ours" else \
            jax_ops_copy.jax_ops(name)
    device = jax.sharding.AbstractDevice(device_kind="NVIDIA H100 80GB HBM3", platform="gpu",
                                         num_cores=132)
    ops = {}
    for side in ("jax", "ours"):
        fn, shapes = jax_files_probe._cases(mod_of)["hopper_matmul"](side)
        with jax.sharding.use_abstract_mesh(
                jax.sharding.AbstractMesh((), (), abstract_device=device)):
            lowered = aot.lower_for_cuda(fn, *[jax.ShapeDtypeStruct(s, d) for s, d in shapes])
        (module,) = _jax_private.mosaic_gpu_modules(lowered)
        ops[side] = _mosaic_ops(module)
    assert ops["ours"]["nvvm.cp.async.bulk.tensor.global.shared.cta"] > 0
    assert ops["ours"] == ops["jax"]
