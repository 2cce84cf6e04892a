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
- which tests run and the per-test log: ``suite_log_plugin`` (loaded beside
  this one);
- ``PALLAS_TPU_CPU_MEMORY_GB`` (default 6) caps the process's data memory: a
  test whose arrays are sized for a chip's HBM fails with an out-of-memory
  error instead of drawing the machine into the kernel's OOM killer.

``answer_as_chip`` is shared with tools/sc_cpu_plugin.py (SparseCore).
"""

from __future__ import annotations

import os
import resource

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
