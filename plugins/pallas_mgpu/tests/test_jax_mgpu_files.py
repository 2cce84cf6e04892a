"""JAX's own Mosaic GPU kernel files, only their Pallas imports swapped to ours
(``tools/jax_ops_copy.py``, the rewriting of ``tools/jax_suite.py``), run in
GPU interpret mode as JAX's own tests run them, against JAX running the same
file and against NumPy.

``hopper_matmul_mgpu.py`` (a persistent, warp-specialized WGMMA matmul: its
pipeline has a ``compute_context`` and caller-made ``get_allocations``; an
``nd_loop`` over the tiles; clusters) asks the context mesh for the number
of SMs, so it runs under an abstract H100 mesh as JAX's
``gpu_pallas_interpret_test.test_hopper_matmul`` does. Likewise
``transposed_ragged_dot_mgpu.py`` and ``blackwell_matmul_mgpu.py`` below."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

TOOLS = Path(__file__).resolve().parents[3] / "tools"
if not (TOOLS / "jax_ops_copy.py").exists():
    pytest.skip("needs the checkout's tools/ (the import rewriting)", allow_module_level=True)
sys.path.insert(0, str(TOOLS))
import jax_ops_copy  # noqa: E402


def _hopper(ours: bool, a, b, c, **config):
    if ours:
        mod = jax_ops_copy.ours_ops().load("gpu.hopper_matmul_mgpu")
        import pallas_mgpu as gpu
    else:
        mod = jax_ops_copy.jax_ops("gpu.hopper_matmul_mgpu")
        from jax.experimental.pallas import mosaic_gpu as gpu
    dims = {k: mod.MatmulDimension[v] for k, v in config.items() if isinstance(v, str)}
    cfg = mod.TuningConfig(**{**config, **dims})
    device = jax.sharding.AbstractDevice(device_kind="NVIDIA H100 80GB HBM3", platform="gpu",
                                         num_cores=4)
    with jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((), (), abstract_device=device)), \
            gpu.force_gpu_interpret_mode(gpu.InterpretGPUParams()):
        return np.asarray(mod.matmul(a, b, c, cfg), np.float64)


@pytest.mark.parametrize("config,with_c", [
    (dict(tile_m=128, tile_n=64, tile_k=64, max_concurrent_steps=2, wg_dimension="M"), True),
    (dict(tile_m=64, tile_n=64, tile_k=64, max_concurrent_steps=3, cluster_dimension="M",
          grid_minor_dim="M", grid_tile_width=2), False),
])
def test_jax_hopper_matmul_file(config, with_c, rng):
    m, n, k = 256, 256, 192
    a = jnp.asarray(rng.standard_normal((m, k)), jnp.float16)
    b = jnp.asarray(rng.standard_normal((k, n)), jnp.float16)
    c = jnp.asarray(rng.standard_normal((m, n)), jnp.float32) if with_c else None
    ours = _hopper(True, a, b, c, **config)
    want = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    if with_c:
        want += np.asarray(c, np.float64)
    # f32 accumulation; the output is f16 without c
    np.testing.assert_allclose(ours, want, rtol=2e-3, atol=2e-3 * np.abs(want).max())
    np.testing.assert_array_equal(ours, _hopper(False, a, b, c, **config))


def test_jax_transposed_ragged_dot_file(monkeypatch, rng):
    """``transposed_ragged_dot_mgpu.py`` (a per-group pipeline whose grid size
    is read from GMEM) asks ``jax.devices()[0]`` for its SM count, which a CPU
    device lacks: 4 SMs here, for JAX's run and ours alike."""
    import types
    monkeypatch.setattr(jax, "devices", lambda *a, **k: [types.SimpleNamespace(core_count=4)])
    k, m, n, groups = 256, 128, 128, 3
    lhs = jnp.asarray(rng.standard_normal((k, m)), jnp.float16)
    rhs = jnp.asarray(rng.standard_normal((k, n)), jnp.float16)
    cuts = np.sort(rng.integers(0, k, groups - 1))
    bounds = list(zip(np.r_[0, cuts], np.r_[cuts, k]))
    sizes = jnp.asarray([e - s for s, e in bounds], jnp.int32)
    outs = {}
    for ours in (True, False):
        if ours:
            mod = jax_ops_copy.ours_ops().load("gpu.transposed_ragged_dot_mgpu")
            import pallas_mgpu as gpu
        else:
            mod = jax_ops_copy.jax_ops("gpu.transposed_ragged_dot_mgpu")
            from jax.experimental.pallas import mosaic_gpu as gpu
        with gpu.force_gpu_interpret_mode(gpu.InterpretGPUParams()):
            outs[ours] = np.asarray(mod.transposed_ragged_dot(
                lhs, rhs, group_sizes=sizes, block_m=64, block_n=64, block_k=64,
                max_concurrent_steps=2, grid_block_n=1), np.float64)
    a, b = np.asarray(lhs, np.float64), np.asarray(rhs, np.float64)
    want = np.stack([a[s:e].T @ b[s:e] for s, e in bounds])
    np.testing.assert_allclose(outs[True], want, rtol=2e-3, atol=2e-3 * np.abs(want).max())
    np.testing.assert_array_equal(outs[True], outs[False])


def test_jax_blackwell_matmul_file(rng):
    """``blackwell_matmul_mgpu.py`` (tcgen05 MMAs into TMEM, a
    ``dynamic_scheduling_loop`` over the tiles): JAX's interpreter runs it
    with ``inline_mgpu='ignore'`` (the loop's PTX fences), under an abstract
    B200 mesh; ours the same way."""
    a = jnp.asarray(rng.standard_normal((256, 256)), jnp.float16)
    b = jnp.asarray(rng.standard_normal((256, 256)), jnp.float16)
    device = jax.sharding.AbstractDevice(device_kind="NVIDIA B200", platform="gpu", num_cores=4)
    outs = {}
    for ours in (True, False):
        if ours:
            mod = jax_ops_copy.ours_ops().load("gpu.blackwell_matmul_mgpu")
            import pallas_mgpu as gpu
        else:
            mod = jax_ops_copy.jax_ops("gpu.blackwell_matmul_mgpu")
            from jax.experimental.pallas import mosaic_gpu as gpu
        cfg = mod.TuningConfig(tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2,
                               collective=False)
        with jax.sharding.use_abstract_mesh(
                jax.sharding.AbstractMesh((), (), abstract_device=device)), \
                gpu.force_gpu_interpret_mode(gpu.InterpretGPUParams(inline_mgpu="ignore")):
            outs[ours] = np.asarray(mod.matmul_kernel(a, b, cfg), np.float64)
    want = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    np.testing.assert_allclose(outs[True], want, rtol=2e-3, atol=2e-3 * np.abs(want).max())
    np.testing.assert_array_equal(outs[True], outs[False])
