"""Register layouts for the 2-D tiles of portable kernels (compiled only).

Mosaic GPU's layout inference needs a hint for 2-D values that are reduced
or broadcast: a tile read from SMEM gets a layout here, and a 1-D vector
broadcast into such a tile gets the matching row or column layout.

- rows a multiple of 64: the WGMMA layout (a warpgroup of 4 warps, 16 rows each);
- rows a multiple of 8 below that: a layout of 8x8 sub-tiles (each warp's 32
  lanes hold 8 rows x 4 column pairs), with the 4 warps spread over the rows
  as far as they divide them and replicated beyond (an 8-row tile is held by
  every warp alike; the stores of the copies are identical).

Other shapes get no hint (``check.py`` refuses the reductions that need one).
"""

from __future__ import annotations

import numpy as np

SUB_ROWS = 8        # the rows of a warp's sub-tile
MIN_COLS = 8        # the columns of a warp's sub-tile


def tile_layout(shape):
    """The plgpu layout of a 2-D register tile of ``shape``, or None."""
    from jax.experimental.pallas import mosaic_gpu as plgpu
    if len(shape) != 2:
        return None
    rows, cols = shape
    if cols % MIN_COLS or rows % SUB_ROWS:
        return None
    if rows % 64 == 0:
        return plgpu.Layout.WGMMA
    return _row_tiles(rows)


def _row_tiles(rows: int):
    from jax.experimental.mosaic.gpu import fragmented_array as fa
    from jax.experimental.pallas import mosaic_gpu as plgpu
    warps = next(w for w in (4, 2, 1) if rows % (SUB_ROWS * w) == 0)
    if warps == 1:
        # tiled shape (..., 8 rows, 4 column pairs, 2): lanes over rows x pairs
        return plgpu.Layout.TILED(fa.Tiling(((SUB_ROWS, 8), (2,))), warp_dims=(fa.Replicated(4),),
                                  lane_dims=(-3, -2), vector_dim=-1)
    # tiled shape (..., warps, 1, 8 rows, 4 column pairs, 2)
    replicas = (fa.Replicated(4 // warps),) if warps < 4 else ()
    return plgpu.Layout.TILED(fa.Tiling(((SUB_ROWS * warps, 8), (SUB_ROWS, 8), (2,))),
                              warp_dims=(-5, *replicas), lane_dims=(-3, -2), vector_dim=-1)


def cast_tile(value):
    """``value`` with its tile's layout, if it is a 2-D tile that has one."""
    from jax.experimental.pallas import mosaic_gpu as plgpu
    layout = tile_layout(getattr(value, "shape", ()))
    return value if layout is None else plgpu.layout_cast(value, layout)


def vector_layout(n: int):
    """A layout for a 1-D value of ``n`` elements that a warpgroup's strided
    layout cannot take (``n`` not a multiple of 128): lanes over the elements
    in runs of up to 32, the rest of the lanes and the warps replicated."""
    from jax.experimental.mosaic.gpu import fragmented_array as fa
    from jax.experimental.pallas import mosaic_gpu as plgpu
    run = next(t for t in (32, 16, 8, 4, 2, 1) if n % t == 0)
    lanes = (-2, fa.Replicated(32 // run)) if run < 32 else (-2,)
    return plgpu.Layout.TILED(fa.Tiling(((run,), (1,))), warp_dims=(fa.Replicated(4),),
                              lane_dims=lanes, vector_dim=-1)


def cast_stored(value):
    """A value stored to a Ref, with a layout: a 1-D one if the default has
    none, a 2-D tile its tile's (else a constant stored whole, e.g. zeros,
    leaves Mosaic GPU's layout search to try every layout it knows: minutes)."""
    from jax.experimental.pallas import mosaic_gpu as plgpu
    shape = getattr(value, "shape", ())
    if len(shape) == 2:
        return cast_tile(value)
    if len(shape) != 1 or shape[0] % 128 == 0:
        return value
    return plgpu.layout_cast(value, vector_layout(shape[0]))


def cast_broadcast_operand(operand, out_shape, dims):
    """A 1-D ``operand`` broadcast into a 2-D tile, with the tile's layout
    reduced over the new dim (WGMMA: the column or row layout)."""
    from jax.experimental.pallas import mosaic_gpu as plgpu
    if len(out_shape) != 2 or np.ndim(operand) != 1 or len(dims) != 1:
        return operand
    layout = tile_layout(out_shape)
    if layout is None or not hasattr(operand, "shape"):
        return operand
    return plgpu.layout_cast(operand, layout.reduce(1 - dims[0]))
