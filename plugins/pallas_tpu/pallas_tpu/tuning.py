"""Chip facts for autotune search spaces: the tile a block dimension comes in,
what a block takes in VMEM, the VMEM a kernel gets, and the chip's peaks.

``pallas_tpu.tuning_spaces`` builds the spaces of JAX's shipped TPU kernels
from these with ``pallas_frontend.search_space``.
"""

from __future__ import annotations

import math

import numpy as np

from pallas_tpu import chip_info

LANES = 128
SUBLANES = 8
MIB = 1 << 20
# The scoped VMEM a kernel gets when its CompilerParams set no vmem_limit_bytes.
# v5e: 16 MiB, measured (libtpu 0.0.42.1 refuses JAX's 8192^3 bf16 matmul at
# blocks 1024x1024x1024: "Scoped allocation with size 16.00M and limit 16.00M").
# v6e and later get twice that (Mosaic's default there).
_SCOPED_VMEM = {"v2": 16 * MIB, "v3": 16 * MIB, "v4": 16 * MIB, "v4i": 16 * MIB,
                "v5e": 16 * MIB, "v5p": 16 * MIB}
_SCOPED_VMEM_LATER = 32 * MIB
# What one grid step costs beyond its work (DMA issue, semaphore waits), the
# figure JAX's TPU pipelining guide gives: used only to rank candidates.
STEP_SECONDS = 0.35e-6


def chip(which=None) -> chip_info.TpuInfo:
    """The ``TpuInfo`` of ``which`` (a ``ChipVersion`` or its value, e.g. ``"v5e"``);
    None: the local TPU's, else v5e's (the chip this project is measured on)."""
    if isinstance(which, chip_info.TpuInfo):
        return which
    if which is None:
        import jax
        if jax.default_backend() == "tpu":
            return chip_info.get_tpu_info()
        which = "v5e"
    try:
        version = chip_info.ChipVersion(which)
    except ValueError:
        known = ", ".join(v.value for v in chip_info.ChipVersion)
        raise ValueError(f"pallas_tpu.tuning: chip {which!r} is not one of {known}") from None
    return chip_info.get_tpu_info_for_chip(version, 1)


def scoped_vmem_bytes(which=None) -> int:
    """The VMEM a kernel gets without ``CompilerParams(vmem_limit_bytes=...)``."""
    info = chip(which)
    return _SCOPED_VMEM.get(info.chip_version.value, _SCOPED_VMEM_LATER)


def sublane_tile(dtype) -> int:
    """Rows of one (rows, 128) tile of ``dtype``: 8 for 32-bit, 16 for bf16, 32 for int8."""
    bits = np.dtype(dtype).itemsize * 8
    return SUBLANES * max(1, 32 // bits)


def block_bytes(shape, dtype) -> int:
    """VMEM bytes of one buffer of a block: its last two dims padded to whole tiles."""
    shape = tuple(int(d) for d in shape)
    if not shape:
        return np.dtype(dtype).itemsize
    *lead, rows, cols = (1, *shape) if len(shape) == 1 else shape
    rows = math.ceil(rows / sublane_tile(dtype)) * sublane_tile(dtype)
    cols = math.ceil(cols / LANES) * LANES
    return math.prod(lead) * rows * cols * np.dtype(dtype).itemsize


def pipeline_vmem_bytes(blocks, scratch=(), buffers: int = 2) -> int:
    """VMEM of a pipelined kernel: ``buffers`` copies of each (shape, dtype) in
    ``blocks`` (inputs and outputs; two by default, the double buffering that
    overlaps a step's copies with the previous step's work) plus ``scratch``."""
    return (buffers * sum(block_bytes(s, d) for s, d in blocks)
            + sum(block_bytes(s, d) for s, d in scratch))


def roofline_seconds(flops: float, hbm_bytes: float, steps: int, which=None) -> float:
    """A candidate's modelled time, to rank it: the slower of its arithmetic at the
    chip's bf16 peak and its HBM traffic at the chip's bandwidth, plus its grid
    steps' overhead. A ranking aid, not a prediction."""
    info = chip(which)
    return (max(flops / info.bf16_ops_per_second, hbm_bytes / info.mem_bw_bytes_per_second)
            + steps * STEP_SECONDS)


def tile_sizes(dim: int, dtype=None, *, minor: bool = True, smallest: int | None = None,
               largest: int | None = None, powers_of_two: bool = True) -> list[int]:
    """Block sizes for a dimension: multiples of the lane width (``minor``, the
    last dim) or of ``dtype``'s sublane tile (second-to-last) that divide ``dim``."""
    from pallas_frontend import tile_sizes as sizes
    tile = LANES if minor else sublane_tile(dtype if dtype is not None else np.float32)
    return sizes(dim, tile, smallest=smallest, largest=largest, powers_of_two=powers_of_two)
