"""pytest plugin (``-p tpu_cpu_plugin``): JAX's TPU test files run on this CPU
host as if it were a TPU chip, every kernel in TPU interpret mode: the CPU
rehearsal of a chip run (tools/tpu_cpu_suite.py).

What changes is only how the file runs, never a kernel or an expected value:

- JAX's test utilities answer for the chip ``PALLAS_TPU_CPU_CHIP`` names (v5e
  by default): ``jtu.test_device_matches(["tpu"])`` (and the device under test
  is "tpu", so the TPU-only tests and their tolerances apply),
  ``jtu.is_device_tpu(v, variant)``, ``jtu.is_device_tpu_at_least(v)``,
  ``jtu.get_tpu_version()``;
- every kernel runs in TPU interpret mode, with the interpreter of the side
  ``PALLAS_JAX_SUITE_TARGET`` names: JAX's ``pltpu.InterpretParams()`` for JAX's
  copy of a file, pallas-tpu's ``InterpretParams()`` for ours (which also
  compiles each kernel device-less for the chip unless
  ``PALLAS_TPU_CHIP_CHECKS=0``);
- ``PALLAS_TPU_CPU_ONLY`` (a file of test ids, one a line) keeps only those
  tests: ours runs the tests JAX's copy passed.

``answer_as_chip`` is shared with tools/sc_cpu_plugin.py (SparseCore).
"""

from __future__ import annotations

import os
from pathlib import Path

for _k, _v in (("TPU_ACCELERATOR_TYPE", "v5litepod-4"), ("TPU_WORKER_HOSTNAMES", "localhost"),
               ("ALLOW_MULTIPLE_LIBTPU_LOAD", "1"), ("JAX_PLATFORMS", "cpu")):
    os.environ.setdefault(_k, _v)

# chip -> (version, the variants is_device_tpu(version, variant) holds for): as
# JAX's rule reads the device kind ("TPU v5 lite", "TPU v5", "TPU7x", ...)
CHIPS = {"v4": (4, ("",)), "v5e": (5, ("e", "")), "v5p": (5, ("p", "")),
         "v6e": (6, ("e", "")), "7x": (7, ("x",))}


def answer_as_chip(chip: str, *, device_tags: bool = True) -> None:
    """JAX's test utilities answer as a TPU ``chip`` would; with
    ``device_tags`` the device under test is "tpu" too (test_device_matches)."""
    from jax._src import test_util as jtu
    version, variants = CHIPS[chip]
    jtu.get_tpu_version = lambda: version
    jtu.is_device_tpu_at_least = lambda v: version >= v
    jtu.is_device_tpu = lambda v=None, var="": v is None or (v == version and var in variants)
    if device_tags:
        # module globals: test_device_matches and supported_dtypes read them
        jtu.device_under_test = lambda: "tpu"


def interpret_everything(side: str) -> None:
    """Every kernel of the process in TPU interpret mode, ``side``'s interpreter."""
    if side == "ours":
        from pallas_tpu import InterpretParams, set_tpu_interpret_mode
        set_tpu_interpret_mode(InterpretParams())
    else:
        from jax.experimental.pallas import tpu as pltpu
        pltpu.set_tpu_interpret_mode(pltpu.InterpretParams())


def pytest_configure(config):
    answer_as_chip(os.environ.get("PALLAS_TPU_CPU_CHIP", "v5e"))
    interpret_everything(os.environ.get("PALLAS_JAX_SUITE_TARGET", "jax"))


def pytest_collection_modifyitems(config, items):
    only = os.environ.get("PALLAS_TPU_CPU_ONLY")
    if not only:
        return
    keep = set(Path(only).read_text().split("\n"))
    chosen = [i for i in items if _test_id(i) in keep]
    config.hook.pytest_deselected(items=[i for i in items if _test_id(i) not in keep])
    items[:] = chosen


def _test_id(item) -> str:
    """``Class::test`` as tools/jax_suite.parse_junit names it."""
    cls = getattr(item, "cls", None)
    return f"{cls.__name__}::{item.name}" if cls is not None else item.name
