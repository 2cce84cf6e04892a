"""Index helpers of Mosaic GPU kernels (pure integer arithmetic)."""

from __future__ import annotations

import enum

import jax.numpy as jnp
from jax import lax


def find_swizzle(minor_dim_bits: int, what: str = "") -> int:
    """The widest TMA/WGMMA swizzle (bytes) that a minor dim of ``minor_dim_bits`` bits allows."""
    for swizzle_bytes in (128, 64, 32, 16):
        if minor_dim_bits % (swizzle_bytes * 8) == 0:
            return swizzle_bytes
    raise ValueError(f"{what or 'minor dim'}: {minor_dim_bits} bits is not a multiple of 128 "
                     "bits, the smallest swizzle.")


def planar_snake(lin_idx, shape: tuple[int, int], minor_dim: int, tile_width: int):
    """Maps a linear tile index onto a 2-D grid of ``shape`` in a snake order
    that keeps consecutive tiles close (for L2 reuse): the grid is cut along
    ``minor_dim`` into bands ``tile_width`` wide; bands are walked in order,
    and every other band backwards along the major dim. Returns (i0, i1)."""
    minor_dim = int(minor_dim.value if isinstance(minor_dim, enum.Enum) else minor_dim)
    if minor_dim not in (0, 1):
        raise ValueError(f"planar_snake: minor_dim must be 0 or 1, got {minor_dim}")
    major_dim = 1 - minor_dim
    major_size, minor_size = shape[major_dim], shape[minor_dim]
    lin_idx = jnp.asarray(lin_idx, jnp.int32)
    band_cells = tile_width * major_size
    band = lax.div(lin_idx, jnp.int32(band_cells))
    in_band = lax.rem(lin_idx, jnp.int32(band_cells))
    band_start = band * tile_width
    # the last band may be narrower than tile_width
    width = jnp.minimum(jnp.int32(tile_width), jnp.int32(minor_size) - band_start)
    major = lax.div(in_band, width)
    minor = band_start + lax.rem(in_band, width)
    major = jnp.where(lax.rem(band, jnp.int32(2)) == 1, jnp.int32(major_size - 1) - major, major)
    return (major, minor) if major_dim == 0 else (minor, major)
