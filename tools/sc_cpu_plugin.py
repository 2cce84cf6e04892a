"""pytest plugin (``-p sc_cpu_plugin``): JAX's SparseCore tests run on this
host as if it were a chip with SparseCores, every kernel in pallas-tpu's
SparseCore CPU model (TPU interpret mode).

What changes is only how the file runs, never a kernel or an expected value:

- ``jtu.is_device_tpu(v, variant)``, ``jtu.is_device_tpu_at_least(v)`` and
  ``jtu.get_tpu_version()`` answer for the chip the CPU model stands for
  (``pallas_tpu.sc_mesh.model_chip()``: v6e unless ``PALLAS_TPU_SC_CHIP`` says
  otherwise), so the test classes' "SparseCore only supported on TPU v5p+"
  skips do not fire and chip-dependent sizes follow that chip;
- JAX's own ``sc_core.get_sparse_core_info`` (``sc_core.supported_shapes``
  calls it; it raises on a host without a TPU) answers with the same chip;
- every kernel that selects pallas-tpu runs in TPU interpret mode
  (``pallas_tpu.set_tpu_interpret_mode(InterpretParams())``): the tests pass
  ``pltpu.CompilerParams`` and no ``interpret=``, as on a chip.
"""

from __future__ import annotations

# the device checks' answers, shared with the TPU files' rehearsal (it also sets
# the CPU host's environment for libtpu)
from tpu_cpu_plugin import answer_as_chip, interpret_everything  # noqa: E402


def _patch_sc_info() -> None:
    from jax._src.pallas.mosaic import sc_core

    from pallas_tpu import tpu_sc
    sc_core.get_sparse_core_info = tpu_sc.get_sparse_core_info


def pytest_configure(config):
    from pallas_tpu import sc_mesh
    answer_as_chip(sc_mesh.model_chip(), device_tags=False)
    _patch_sc_info()
    interpret_everything("ours")
