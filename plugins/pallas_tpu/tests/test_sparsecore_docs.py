"""docs/sparsecore.md's worked example (an embedding bag: a gather DMA and a
scatter-add DMA over 16 vector subcores), taken from the page as a user
would copy it: on CPU under the SparseCore model it equals NumPy (float64)
on fresh random data, and it compiles for v6e:2x2 without a device, to the
Mosaic module JAX builds from the same code with JAX's imports."""

import importlib.util
import re
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import pallas_tpu as pltpu
from pallas_tpu import aot

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tools"))
import sc_mosaic_text  # noqa: E402

OUR_IMPORTS = ("import pallas_frontend as pl\nimport pallas_tpu as pltpu\n"
               "from pallas_tpu import tpu_sc as plsc\n")
JAX_IMPORTS = ("from jax.experimental import pallas as pl\n"
               "from jax.experimental.pallas import tpu as pltpu\n"
               "from jax.experimental.pallas import tpu_sc as plsc\n")


def _example_source() -> str:
    """The page's python block that defines ``embedding_bag``, up to its own run."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "sparsecore.md").read_text(),
                        re.S)
    (block,) = [b for b in blocks if "def embedding_bag" in b]
    assert OUR_IMPORTS in block
    return block[:block.index("\nrng = ")]


def _load(source: str):
    namespace = {"__name__": "sparsecore_docs_example"}
    exec(compile(source, "docs/sparsecore.md", "exec"), namespace)
    return namespace


def test_example_runs_on_cpu_equal_to_numpy():
    ns = _load(_example_source())
    rng = np.random.default_rng()
    rows = int(rng.integers(16, 200))
    table = rng.standard_normal((rows, ns["DIM"])).astype(np.float32)
    ids = rng.integers(0, rows, (ns["SUBCORES"], ns["IDS"])).astype(np.int32)
    bags = rng.integers(0, ns["BAGS"], (ns["SUBCORES"], ns["IDS"])).astype(np.int32)
    out = ns["embedding_bag"](table, ids, bags, interpret=pltpu.InterpretParams())
    expected = np.zeros((ns["BAGS"], ns["DIM"]))
    np.add.at(expected, bags.ravel(), table.astype(np.float64)[ids.ravel()])
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                    reason="compiling for a TPU topology needs libtpu")
def test_example_compiles_for_v6e_to_jax_mosaic_module():
    source = _example_source()
    modules = {}
    for side, text in (("ours", source), ("jax", source.replace(OUR_IMPORTS, JAX_IMPORTS))):
        ns = _load(text)
        specs = [jax.ShapeDtypeStruct((64, ns["DIM"]), np.float32),
                 jax.ShapeDtypeStruct((ns["SUBCORES"], ns["IDS"]), np.int32),
                 jax.ShapeDtypeStruct((ns["SUBCORES"], ns["IDS"]), np.int32)]
        lowered = aot.lower_for_tpu(ns["embedding_bag"], *specs, topology="v6e:2x2")
        with jax.set_mesh(aot.topology_mesh("v6e:2x2")):
            lowered.compile()
        modules[side] = sc_mosaic_text.mosaic_modules(lowered.as_text())
    assert len(modules["jax"]) == 1 and "DEVICE_TYPE_SPARSECORE" in modules["jax"][0]
    assert modules["ours"] == modules["jax"], sc_mosaic_text.first_difference(
        modules["jax"][0], modules["ours"][0])
