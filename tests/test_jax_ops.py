"""The CI subset of docs/jax-ops.md: every kernel JAX ships in
``jax/experimental/pallas/ops/``, one small shape each, run from JAX's file
with only the Pallas imports swapped and compared with JAX running the same
file (forward, and the gradient where the file defines a VJP). A row where JAX
itself fails on this machine is skipped with JAX's error; a row where JAX
works must work in ours. Select with ``-m jax_ops``; the full table is
``python tools/jax_ops.py --out docs/jax-ops.md``."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

# JAX's GPU kernels import plgpu (ours: pallas_triton), its TPU kernels pltpu
pytest.importorskip("pallas_triton")
pytest.importorskip("pallas_tpu")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import jax_ops  # noqa: E402
import jax_ops_cases  # noqa: E402

pytestmark = pytest.mark.jax_ops

# Rows where JAX works and ours does not (yet), each with its cause and owner;
# (reason, strict): strict ones must be removed here the day they pass.
# (tpu.all_gather's NaN blocks were JAX's interpreter's, in JAX's run too: its case runs
# the DMAs eagerly and checks both sides against the input; see jax_ops_cases.NOTES.)
KNOWN: dict[str, tuple[str, bool]] = {}


def _rows():
    for case in jax_ops_cases.CASES:
        for grad in (False, True) if case.grad else (False,):
            marks = [pytest.mark.xfail(strict=KNOWN[case.name][1], reason=KNOWN[case.name][0])] \
                if case.name in KNOWN else []
            yield pytest.param(case, grad, id=case.name + (" grad" if grad else ""), marks=marks)


@pytest.mark.parametrize("case,grad", list(_rows()))
def test_jax_kernel_runs_as_under_jax(case, grad, rng):
    row = jax_ops.run_case(case, "small", grad, seed=int(rng.integers(2**31)), repeats=0)
    if row["jax"] != "ok":
        pytest.skip(f"JAX itself fails on this machine: {row['jax_error']}")
    assert row["ours"] == "ok", row["ours_error"]
    assert row["rel"] <= case.rtol
    assert np.isfinite(row["rel"])
