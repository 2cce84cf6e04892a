"""JAX's Mosaic GPU data names that pallas_mgpu passes through unchanged:
``Replicated`` (in ``Layout.TILED``) and ``TMEMLayout`` (``TMEM(..., layout=)``)
are JAX's own objects, and the rebuilt kernel gets JAX's layout / scratch type;
``format_tcgen05_sparse_metadata`` is JAX's host-side array function."""

import jax.numpy as jnp
import numpy as np
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


def test_format_tcgen05_sparse_metadata_is_jaxs_and_tiles_as_documented():
    assert plgpu.format_tcgen05_sparse_metadata is jax_plgpu.format_tcgen05_sparse_metadata
    m, k = 256, 256
    meta = np.random.default_rng().integers(0, 4, (m, k // 4, 2)).astype(np.uint8)
    got = plgpu.format_tcgen05_sparse_metadata(jnp.asarray(meta).astype(jnp.uint2), jnp.float8_e4m3fn)
    # 8-bit operands: (M, K/2) metadata in 128 x 64 tiles, tile-major
    want = meta.reshape(m // 128, 128, k // 2 // 64, 64).transpose(0, 2, 1, 3)
    np.testing.assert_array_equal(np.asarray(got.astype(jnp.uint8)), want)
