"""pytest plugin (``-p tpu_cpu_plugin``): JAX's TPU test files run on this CPU
host as if it were a TPU chip, every kernel in TPU interpret mode: the CPU
rehearsal of a chip run (tools/tpu_cpu_suite.py).

What changes is only how the file runs, never a kernel or an expected value:

- JAX's test utilities answer for the chip ``PALLAS_TPU_CPU_CHIP`` names (v5e
  by default): ``jtu.test_device_matches(["tpu"])`` (and the device under test
  is "tpu", so the TPU-only tests and their tolerances apply),
  ``jtu.is_device_tpu(v, variant)``, ``jtu.is_device_tpu_at_least(v)``,
  ``jtu.get_tpu_version()``; JAX's ``tpu_info`` (device kind, cores) and
  ``create_tensorcore_mesh`` answer for that chip too;
- every kernel runs in TPU interpret mode, with the interpreter of the side
  ``PALLAS_JAX_SUITE_TARGET`` names: JAX's ``pltpu.InterpretParams()`` for JAX's
  copy of a file, pallas-tpu's ``InterpretParams()`` for ours (which also
  compiles each kernel device-less for the chip unless
  ``PALLAS_TPU_CHIP_CHECKS=0``);
- ``PALLAS_TPU_CPU_ONLY`` / ``PALLAS_TPU_CPU_SKIP`` (files of ``Class::test``
  ids, one a line) keep only those tests / leave those out;
  ``PALLAS_TPU_CPU_PER_TEST=N`` keeps the first N cases of each parameterized
  test (a sample of a file too long to run whole);
- ``PALLAS_TPU_CPU_LOG`` gets one JSON line as each test starts and one with
  its outcome, written at once: a process the time limit or a crash ends
  leaves what it ran;
- ``PALLAS_TPU_CPU_MEMORY_GB`` (default 6) caps the process's data memory: a
  test whose arrays are sized for a chip's HBM fails with an out-of-memory
  error instead of drawing the machine into the kernel's OOM killer.

``answer_as_chip`` is shared with tools/sc_cpu_plugin.py (SparseCore).
"""

from __future__ import annotations

import collections
import json
import os
import resource
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
    # the parameter names are jtu's: tests pass them by keyword
    chip_version = version
    jtu.is_device_tpu_at_least = lambda version: chip_version >= version
    jtu.is_device_tpu = lambda version=None, variant="": version is None or (
        version == chip_version and variant in variants)
    if device_tags:
        # module globals: test_device_matches and supported_dtypes read them
        jtu.device_under_test = lambda: "tpu"


# what the chip's JAX device says: its kind, and TensorCores per device
DEVICES = {"v4": ("TPU v4", 2), "v5e": ("TPU v5 lite", 1), "v5p": ("TPU v5", 2),
           "v6e": ("TPU v6 lite", 1), "7x": ("TPU7x", 2)}


def answer_tpu_info(chip: str) -> None:
    """JAX's TPU hardware queries (``tpu_info``: tilings, VMEM size, which
    JAX's pipelines read; ``create_tensorcore_mesh``'s core count, read from a
    device a CPU lacks) answer for ``chip`` instead of failing on a CPU device."""
    from jax._src.pallas.mosaic import core as tpu_core
    from jax._src.pallas.mosaic import tpu_info
    from jax.experimental.pallas import tpu as jax_pltpu
    kind, cores = DEVICES[chip]
    tpu_info.get_device_kind = lambda: kind
    tpu_info.get_num_device_cores = lambda: cores
    tpu_info.get_tpu_info.cache_clear()      # an answer for another device may be cached
    real = tpu_core.create_tensorcore_mesh

    def create_tensorcore_mesh(axis_name, devices=None, num_cores=None):
        if devices is None and num_cores is None:
            num_cores = cores
        return real(axis_name, devices, num_cores)
    tpu_core.create_tensorcore_mesh = jax_pltpu.create_tensorcore_mesh = create_tensorcore_mesh


def interpret_everything(side: str) -> None:
    """Every kernel of the process in TPU interpret mode, ``side``'s interpreter."""
    if side == "ours":
        from pallas_tpu import InterpretParams, set_tpu_interpret_mode
        set_tpu_interpret_mode(InterpretParams())
    else:
        from jax.experimental.pallas import tpu as pltpu
        pltpu.set_tpu_interpret_mode(pltpu.InterpretParams())


def pytest_configure(config):
    cap = int(float(os.environ.get("PALLAS_TPU_CPU_MEMORY_GB", "6")) * (1 << 30))
    resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
    chip = os.environ.get("PALLAS_TPU_CPU_CHIP", "v5e")
    answer_as_chip(chip)
    answer_tpu_info(chip)
    interpret_everything(os.environ.get("PALLAS_JAX_SUITE_TARGET", "jax"))


def _ids(var: str) -> set[str] | None:
    path = os.environ.get(var)
    return set(Path(path).read_text().split("\n")) if path else None


def pytest_collection_modifyitems(config, items):
    only, skip = _ids("PALLAS_TPU_CPU_ONLY"), _ids("PALLAS_TPU_CPU_SKIP") or set()
    chosen = [i for i in items if (only is None or test_id(i.nodeid) in only)
              and test_id(i.nodeid) not in skip]
    if per_test := int(os.environ.get("PALLAS_TPU_CPU_PER_TEST", "0")):
        seen = collections.Counter()
        for i in list(chosen):
            # absl's parameterized cases wrap the test method they were made from
            fn = getattr(i, "function", None)
            key = (getattr(i.cls, "__name__", ""), getattr(getattr(fn, "__wrapped__", fn),
                                                           "__name__", i.name))
            seen[key] += 1
            if seen[key] > per_test:
                chosen.remove(i)
    if len(chosen) < len(items):
        kept = set(map(id, chosen))
        config.hook.pytest_deselected(items=[i for i in items if id(i) not in kept])
        items[:] = chosen


def test_id(nodeid: str) -> str:
    """``Class::test`` (as tools/jax_suite.parse_junit names it, less the file)."""
    return nodeid.split("::", 1)[1] if "::" in nodeid else nodeid


def _log(record: dict) -> None:
    if path := os.environ.get("PALLAS_TPU_CPU_LOG"):
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")


def pytest_runtest_logstart(nodeid, location):
    _log(dict(test=test_id(nodeid), outcome="started"))


def pytest_runtest_logreport(report):
    # the call's outcome; setup's when it did not pass (a skip, a failed fixture);
    # teardown's when it failed
    if not (report.when == "call" or report.outcome != "passed"):
        return
    if report.outcome == "skipped":
        why = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _log(dict(test=test_id(report.nodeid), outcome="skipped",
                  message=why.removeprefix("Skipped: "), text=""))
        return
    crash = getattr(report.longrepr, "reprcrash", None)
    _log(dict(test=test_id(report.nodeid), outcome=report.outcome,
              message=getattr(crash, "message", "") or "",
              text=report.longreprtext[-20000:] if report.outcome == "failed" else ""))
