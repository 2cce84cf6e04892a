"""``PrefetchScalarGridSpec`` for Triton users: the TPU name, with no TPU import.

The frontend's ``GridSpec`` has no prefetch count of its own; JAX spells the
feature ``pltpu.PrefetchScalarGridSpec``. This is the same spelling, so a kernel
written for JAX's TPU backend runs here with only the import changed. On this
backend the prefetched operands are ordinary kernel arguments in global memory
(GPUs have no scalar memory to stage them in); the index maps read them inside
the kernel.
"""

from __future__ import annotations

from typing import Any

import pallas_frontend as pl


class PrefetchScalarGridSpec(pl.GridSpec):
    """A GridSpec whose first ``num_scalar_prefetch`` call arguments are passed
    to the kernel first and to every index_map after the grid indices, so
    block indices may depend on data (block-sparse kernels, gathers)."""

    def __init__(self, num_scalar_prefetch: int, grid: Any = (), in_specs: Any = pl.no_block_spec,
                 out_specs: Any = pl.no_block_spec, scratch_shapes: Any = ()):
        super().__init__(grid, in_specs, out_specs, scratch_shapes)
        if isinstance(num_scalar_prefetch, bool) or not isinstance(num_scalar_prefetch, int) \
                or num_scalar_prefetch < 0:
            raise ValueError(f"PrefetchScalarGridSpec: num_scalar_prefetch must be a "
                             f"non-negative int (how many leading call arguments are "
                             f"prefetched), got {num_scalar_prefetch!r}")
        self.num_scalar_prefetch = num_scalar_prefetch
