"""A SparseCore kernel compiled device-less under JAX's Pallas and under ours,
and their Mosaic modules compared (shared by the tests that compare them)."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import pytest
from jax.experimental import pallas as jpl
from jax.experimental.pallas import tpu as jpltpu
from jax.experimental.pallas import tpu_sc as jplsc

import pallas_frontend as pl
import pallas_tpu as pltpu
from pallas_tpu import aot
from pallas_tpu import tpu_sc as plsc

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))
import sc_mosaic_text  # noqa: E402

TOPOLOGY = "v6e:2x2"       # 2 SparseCores of 16 vector subcores, 8 lanes
JAX_API, OUR_API = (jpl, jpltpu, jplsc), (pl, pltpu, plsc)


def mosaic_modules(fn, specs) -> list[str]:
    """The Mosaic modules of ``fn`` compiled for ``TOPOLOGY`` (no device needed)."""
    lowered = aot.lower_for_tpu(fn, *specs, topology=TOPOLOGY)
    with jax.set_mesh(aot.topology_mesh(TOPOLOGY)):
        lowered.compile()
    return sc_mosaic_text.mosaic_modules(lowered.as_text())


def assert_same_mosaic(compile_with):
    """``compile_with(api)``: the modules of one kernel written against ``api``.
    Skips where JAX's own kernel does not compile (an older libtpu)."""
    try:
        theirs = compile_with(JAX_API)
    except Exception as e:  # noqa: BLE001  (an older libtpu: JAX's own kernel fails alike)
        pytest.skip(f"JAX {jax.__version__}'s own kernel does not compile here: "
                    f"{str(e).splitlines()[0][:200]}")
    ours = compile_with(OUR_API)
    assert len(theirs) == 1 and "DEVICE_TYPE_SPARSECORE" in theirs[0]
    assert len(ours) == 1, ours
    assert ours == theirs, sc_mosaic_text.first_difference(theirs[0], ours[0])
