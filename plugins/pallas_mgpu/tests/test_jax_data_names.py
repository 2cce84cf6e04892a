"""JAX's Mosaic GPU data names that pallas_mgpu passes through unchanged:
``Replicated`` (in ``Layout.TILED``) and ``TMEMLayout`` (``TMEM(..., layout=)``)
are JAX's own objects, and the rebuilt kernel gets JAX's layout / scratch type."""

import jax.numpy as jnp
from jax.experimental.mosaic.gpu import fragmented_array as fa
from jax.experimental.pallas import mosaic_gpu as jax_plgpu

import pallas_mgpu as plgpu


def test_replicated_is_jaxs_and_reaches_jaxs_tiled_layout():
    assert plgpu.Replicated is fa.Replicated
    tiling = ((64, 8), (16, 8), (8, 8), (2,))
    ours = plgpu.Layout.TILED(plgpu.Tiling(tiling), warp_dims=(plgpu.Replicated(4),),
                              lane_dims=(-3, -2), vector_dim=-1)
    assert ours.to_jax() == jax_plgpu.Layout.TILED(
        jax_plgpu.Tiling(tiling), warp_dims=(fa.Replicated(4),), lane_dims=(-3, -2),
        vector_dim=-1)


def test_tmem_layout_is_jaxs_and_reaches_jaxs_tmem_scratch():
    assert plgpu.TMEMLayout is jax_plgpu.TMEMLayout
    # the layouts that take no further arguments (the M64 collective ones take columns)
    for layout, dtype in ((plgpu.TMEMLayout.SCALES_LAYOUT, jnp.float8_e8m0fnu),
                          (plgpu.TMEMLayout.SPARSE_METADATA_LAYOUT, jnp.uint8)):
        ours = plgpu.TMEM((128, 32), dtype, layout=layout)
        assert ours.to_jax() == jax_plgpu.TMEM((128, 32), dtype, layout=layout)
