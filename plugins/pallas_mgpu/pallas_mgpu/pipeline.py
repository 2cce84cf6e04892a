"""``emit_pipeline`` inside ``pallas_mgpu.kernel`` bodies (not yet)."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class BlockSpec:
    block_shape: Any = None
    index_map: Any = None
    transforms: tuple = ()
    delay_release: int = 0
    collective_axes: tuple = ()
    memory_space: Any = None


def emit_pipeline(*a, **k):
    raise NotImplementedError("pallas_mgpu.emit_pipeline is not written yet")


def emit_pipeline_warp_specialized(*a, **k):
    raise NotImplementedError("pallas_mgpu.emit_pipeline_warp_specialized is not written yet")
