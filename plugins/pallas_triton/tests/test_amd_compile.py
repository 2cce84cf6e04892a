"""Every kernel of tests/gpu_aot_cases.py compiled to HSACO for gfx942 and gfx90a.

The ``triton-amd`` tox env sets ``PALLAS_TRITON_AOT_GPU=gfx942,gfx90a`` (no ROCm, no
GPU: Triton bundles the AMDGPU backend); elsewhere this module skips. The cases are
the conformance kernels, the seed-API kernels and the JAX-style GPU kernels (flash
attention fwd/bwd, layer norm, softmax, decode attention) that test_gpu_aot.py compiles
through XLA:GPU. The register/spill table is printed (``-s``) and, with
``PALLAS_TRITON_AMD_REPORT=path``, written there as JSON.
"""

import json
import os

import pytest

from pallas_triton import amd

import gpu_aot_cases  # noqa: E402  (this directory)

pytestmark = [pytest.mark.amd,
              pytest.mark.skipif(not amd.requested_archs(),
                                 reason="set PALLAS_TRITON_AOT_GPU=gfx942,gfx90a (tox -e triton-amd)")]


def _table(rows):
    cols = ["case", "kernel", "arch", "vgpr", "agpr", "sgpr", "vgpr_spills", "sgpr_spills",
            "scratch_bytes", "lds_bytes", "hsaco_bytes"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def test_every_case_compiles_to_hsaco():
    archs = amd.requested_archs()
    rows, failures = [], {}
    for name, (fn, structs, _warps, _programs) in gpu_aot_cases.cases().items():
        try:
            rows += [dict(case=name, **r) for r in amd.compile_for_amd(fn, *structs, archs=archs)]
        except Exception as e:  # noqa: BLE001  (every case is tried; all failures reported)
            failures[name] = f"{type(e).__name__}: {e}"[:600]
    print("\n" + _table(rows))
    report = os.environ.get("PALLAS_TRITON_AMD_REPORT")
    if report:
        with open(report, "w") as f:
            json.dump({"archs": archs, "rows": rows, "failures": failures}, f, indent=1)
    assert not failures, failures
    assert {r["arch"] for r in rows} == set(archs)
    assert all(r["hsaco_bytes"] > 0 and r["vgpr"] > 0 for r in rows)


TOOLS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "tools")


@pytest.mark.skipif(not os.path.exists(os.path.join(TOOLS, "jax_ops_cases.py")),
                    reason="needs the repository's tools/ (JAX's ops copied with our imports)")
def test_jax_gpu_ops_compile_to_hsaco():
    """JAX's own GPU kernel files (jax/experimental/pallas/ops/gpu, only the imports
    swapped: tools/jax_ops_copy.py), called as tools/jax_ops_cases.py calls them, forward
    and jax.grad where the case has one: every pallas_call to HSACO."""
    import sys

    import jax
    import jax.numpy as jnp
    import numpy as np
    sys.path.insert(0, os.path.abspath(TOOLS))
    import jax_ops_cases
    import jax_ops_copy

    cases = [c for c in jax_ops_cases.GPU_CASES if jax_ops_copy.shipped(c.module)]
    if not cases:        # JAX 0.12.1 dropped its Triton-style GPU ops from the wheel
        pytest.skip(f"JAX {jax.__version__} ships none of the GPU kernels this test compiles")
    archs = amd.requested_archs()
    ops = jax_ops_copy.ours_ops()
    rng = np.random.default_rng()
    rows, failures = [], {}
    for case in cases:
        mod = ops.load(case.module)
        args = case.inputs(rng, "small")
        fns = {"fwd": lambda *a, case=case, mod=mod: case.call(mod, a)}
        if case.grad:
            def loss(*a, case=case, mod=mod):
                return sum(jnp.sum(o) for o in jax.tree.leaves(case.call(mod, a)))
            fns["grad"] = jax.grad(loss, argnums=tuple(range(len(args))))
        for how, fn in fns.items():
            try:
                rows += [dict(case=f"{case.name} {how}", **r)
                         for r in amd.compile_for_amd(fn, *args, archs=archs)]
            except Exception as e:  # noqa: BLE001  (all failures reported together)
                failures[f"{case.name} {how}"] = f"{type(e).__name__}: {e}"[:600]
    print("\n" + _table(rows))
    assert not failures, failures
    assert len({r["case"] for r in rows}) == sum(1 + c.grad for c in cases)
