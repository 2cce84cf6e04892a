"""What a TPU chip offers (VMEM size, MXU shape, tiling, SparseCores):
host-side queries, the same objects as JAX's, since the kernels this backend
rebuilds are compiled by JAX's Mosaic for exactly those chips.

``get_tpu_info()`` describes the local TPU, or the chip of the context mesh's
abstract device (as in AOT compilation for a named topology); on a host
without either it raises, as JAX's does.
"""

from __future__ import annotations

from jax.experimental.pallas.tpu import (
    ChipVersion, Tiling, TpuInfo, get_tpu_info, get_tpu_info_for_chip, is_tpu_device)

__all__ = ["ChipVersion", "Tiling", "TpuInfo", "get_tpu_info", "get_tpu_info_for_chip",
           "is_tpu_device"]
