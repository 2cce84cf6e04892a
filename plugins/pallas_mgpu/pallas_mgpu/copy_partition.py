"""``plgpu.CopyPartition``: how a collective TMA copy of a CTA pair is
tracked (``copy_gmem_to_smem(..., leader_tracked=...)``): ``PARTITIONED(axis)``
splits the data along ``axis`` between the CTAs, ``REPLICATED`` copies it
whole to each. Plain values here (no Mosaic GPU import); the backend hands
JAX's own objects to JAX's ``copy_gmem_to_smem``.
"""

from __future__ import annotations

import dataclasses


class CopyPartition:
    """The base of ``CopyPartition.PARTITIONED(axis)`` and ``CopyPartition.REPLICATED``."""
    PARTITIONED: type
    REPLICATED: "CopyPartition"

    def to_jax(self):
        """JAX's ``CopyPartition`` value of the same kind (each kind gives its own)."""
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class _Partitioned(CopyPartition):
    axis: int

    def __post_init__(self):
        if not isinstance(self.axis, int) or self.axis < 0:
            raise ValueError(
                f"CopyPartition.PARTITIONED: axis must be an int >= 0, got {self.axis!r}.")

    def to_jax(self):
        from jax.experimental.mosaic.gpu.launch_context import CopyPartition as Jax
        return Jax.PARTITIONED(self.axis)


@dataclasses.dataclass(frozen=True)
class _Replicated(CopyPartition):
    def to_jax(self):
        from jax.experimental.mosaic.gpu.launch_context import CopyPartition as Jax
        return Jax.REPLICATED


CopyPartition.PARTITIONED = _Partitioned
CopyPartition.REPLICATED = _Replicated()
