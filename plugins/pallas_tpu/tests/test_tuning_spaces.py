"""pallas_tpu.tuning's chip facts and the spaces of JAX's TPU kernels: the VMEM
estimate that prunes a candidate agrees with what Mosaic for v5e refuses."""

from __future__ import annotations

import functools
import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pallas_tpu import tuning, tuning_spaces


def test_chip_facts_of_v5e():
    info = tuning.chip("v5e")
    assert info.vmem_capacity_bytes == 128 << 20
    assert tuning.scoped_vmem_bytes("v5e") == 16 << 20
    with pytest.raises(ValueError, match="not one of"):
        tuning.chip("v99")


@pytest.mark.parametrize("shape,dtype,padded", [
    ((3, 100), np.float32, (8, 128)), ((16, 256), jnp.bfloat16, (16, 256)),
    ((17, 129), jnp.bfloat16, (32, 256)), ((2, 5, 40), np.int8, (2 * 32, 128))])
def test_block_bytes_pads_to_whole_tiles(shape, dtype, padded):
    assert tuning.block_bytes(shape, dtype) == np.prod(padded) * np.dtype(dtype).itemsize


def test_matmul_space_prunes_by_double_buffered_vmem():
    m = n = k = 4096
    space = tuning_spaces.matmul(m, n, k, jnp.bfloat16, limit=None)
    for p in space.params:
        need = 2 * 2 * (p["bm"] * p["bk"] + p["bk"] * p["bn"] + p["bm"] * p["bn"]) \
            + 4 * p["bm"] * p["bn"]
        assert need < 16 << 20 and m % p["bm"] == 0 and k % p["bk"] == 0
    over = [x for x in space.pruned if x.reason.startswith("VMEM")]
    assert {"bm": 1024, "bn": 1024, "bk": 1024} in [x.params for x in over]   # exactly 16 MiB
    assert {"bm": 1024, "bn": 1024, "bk": 512} in list(space.params)           # 12 MiB


def test_flash_space_keeps_the_kernels_rules():
    from jax.experimental.pallas.ops.tpu.flash_attention import BlockSizes
    space = tuning_spaces.flash_attention(2, 8, 2048, 2048, 128, jnp.bfloat16,
                                          block_sizes_type=BlockSizes, limit=12)
    assert len(space) == 12
    for config, p in zip(space, space.params):
        assert p["block_k_major"] % p["block_k"] == 0
        assert config["block_sizes"].block_q == p["block_q"]
    fwd = dict(space.params[0])
    bwd = tuning_spaces.flash_attention(2, 8, 2048, 2048, 128, jnp.bfloat16,
                                        block_sizes_type=BlockSizes, backward=True, fwd=fwd)
    assert all({k: p[k] for k in fwd} == fwd for p in bwd.params)
    assert all(p["bwd_k_major"] % p["bwd_k"] == 0 for p in bwd.params)


def test_paged_and_gmm_spaces():
    paged = tuning_spaces.paged_attention(128, 16, 128, jnp.bfloat16)
    assert all(128 % p["pages_per_compute_block"] == 0 and
               128 <= 16 * p["pages_per_compute_block"] <= 4096 for p in paged.params)
    gmm = tuning_spaces.gmm(8192, 2048, 2048, jnp.bfloat16)
    assert {"tm": 512, "tk": 2048, "tn": 512} in list(gmm.params)
    # (1024, 512, 1024) with an f32 output: 16 MiB, refused by v5e (measured)
    assert any(x.params == {"tm": 1024, "tk": 512, "tn": 1024} and "VMEM" in x.reason
               for x in tuning_spaces.gmm(8192, 2048, 2048, jnp.bfloat16, limit=None).pruned)


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="needs libtpu")
def test_the_estimate_agrees_with_mosaic_for_v5e():
    """One candidate the space keeps compiles for v5e device-less; one it prunes
    for VMEM is refused by Mosaic for VMEM."""
    from jax.experimental.pallas.ops.tpu.matmul import matmul
    from pallas_tpu.aot import compile_for_tpu
    n = 2048
    x = jax.ShapeDtypeStruct((n, n), jnp.bfloat16)
    space = tuning_spaces.matmul(n, n, n, jnp.bfloat16, limit=None)
    kept = {"bm": 1024, "bn": 1024, "bk": 512}
    assert kept in list(space.params)
    compile_for_tpu(functools.partial(matmul, block_shape=(1024, 1024), block_k=512), x, x)
    assert any(p.params == {"bm": 1024, "bn": 1024, "bk": 1024} for p in space.pruned)
    with pytest.raises(Exception, match="(?i)vmem"):
        compile_for_tpu(functools.partial(matmul, block_shape=(1024, 1024), block_k=1024), x, x)


def test_flash_backward_space_keeps_the_chips_fastest_blocks():
    # Measured on a v5e (2026-12-06, BENCHMARKS.md): backward blocks 1024/512/512 were
    # the fastest of a wide grid (1.026 ms against the space's pick, 1.089 ms); the
    # estimate then counted a bias block the kernel does not have and pruned them.
    from jax.experimental.pallas.ops.tpu.flash_attention import BlockSizes
    fwd = dict(block_q=1024, block_k_major=2048, block_k=1024)
    space = tuning_spaces.flash_attention(2, 8, 2048, 2048, 128, jnp.bfloat16,
                                          block_sizes_type=BlockSizes, backward=True,
                                          fwd=fwd, limit=12, smallest=256)
    assert fwd | {"bwd_q": 1024, "bwd_k_major": 512, "bwd_k": 512} in list(space.params)


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="needs libtpu")
def test_the_flash_backward_blocks_kept_compile_for_v5e():
    from jax.experimental.pallas.ops.tpu import flash_attention as fa
    from pallas_tpu.aot import compile_for_tpu
    sizes = fa.BlockSizes(block_q=1024, block_k_major=2048, block_k=1024, block_b=1,
                          block_q_major_dkv=1024, block_k_major_dkv=512, block_k_dkv=512,
                          block_q_dkv=1024, block_k_major_dq=512, block_k_dq=512,
                          block_q_dq=1024)
    x = jax.ShapeDtypeStruct((2, 8, 2048, 128), jnp.bfloat16)

    def loss(q, k, v):
        return fa.flash_attention(q, k, v, block_sizes=sizes).astype(jnp.float32).sum()
    compile_for_tpu(jax.grad(loss, argnums=(0, 1, 2)), x, x, x)


def _ours_blocked_matmul(x, y, *, block_shape, block_k, vmem_limit_bytes=None):
    from test_matmul import matmul      # this folder's blocked matmul, with the limit
    return matmul(x, y, bm=block_shape[0], bn=block_shape[1], bk=block_k,
                  vmem_limit_bytes=vmem_limit_bytes)


def test_a_raised_vmem_limit_widens_the_matmul_space():
    raised = 96 << 20
    space = tuning_spaces.matmul(4096, 4096, 4096, jnp.bfloat16, limit=None,
                                 vmem_limit_bytes=raised)
    configs = list(space)
    # 1024x1024x2048 needs 24 MiB: past the 16 MiB default, within the raised limit
    assert {"block_shape": (1024, 1024), "block_k": 2048, "vmem_limit_bytes": raised} in configs
    assert all(c["vmem_limit_bytes"] == raised for c in configs)
    assert {"bm": 1024, "bn": 1024, "bk": 2048} in [
        p.params for p in tuning_spaces.matmul(4096, 4096, 4096, jnp.bfloat16,
                                               limit=None).pruned]
    rng = np.random.default_rng()
    x, y = (rng.standard_normal((256, 256)).astype(np.float32) for _ in range(2))
    config = list(tuning_spaces.matmul(256, 256, 256, jnp.float32, limit=None, smallest=128,
                                       vmem_limit_bytes=raised))[0]
    import pallas_tpu
    with pallas_tpu.force_tpu_interpret_mode():
        out = _ours_blocked_matmul(x, y, **config)
    np.testing.assert_allclose(np.asarray(out), x.astype(np.float64) @ y, rtol=1e-4, atol=1e-3)


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="needs libtpu")
def test_raised_vmem_blocks_compile_for_v5e_only_with_the_limit():
    from pallas_tpu.aot import compile_for_tpu
    x = jax.ShapeDtypeStruct((4096, 4096), jnp.bfloat16)
    blocks = dict(block_shape=(1024, 1024), block_k=2048)
    compile_for_tpu(functools.partial(_ours_blocked_matmul, **blocks,
                                      vmem_limit_bytes=96 << 20), x, x)
    with pytest.raises(Exception, match="(?i)vmem"):
        compile_for_tpu(functools.partial(_ours_blocked_matmul, **blocks), x, x)
