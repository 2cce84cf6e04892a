"""``PrefetchScalarGridSpec``: a GridSpec whose first operands go to SMEM."""

from __future__ import annotations

from typing import Any

import pallas_frontend as pf


class PrefetchScalarGridSpec(pf.GridSpec):
    """The first ``num_scalar_prefetch`` call arguments are copied to SMEM
    before the grid runs; the kernel receives them first, and every index_map
    receives them after the grid indices (for data-dependent block indices)."""

    def __init__(self, num_scalar_prefetch: int, grid: Any = (), in_specs: Any = pf.no_block_spec,
                 out_specs: Any = pf.no_block_spec, scratch_shapes: Any = ()):
        super().__init__(grid, in_specs, out_specs, scratch_shapes)
        if isinstance(num_scalar_prefetch, bool) or not isinstance(num_scalar_prefetch, int) \
                or num_scalar_prefetch < 0:
            raise ValueError(f"num_scalar_prefetch must be a non-negative int, got "
                             f"{num_scalar_prefetch!r}")
        self.num_scalar_prefetch = num_scalar_prefetch
