"""The kernels of JAX's ``jax/experimental/pallas/ops/``, each called the way
JAX's own tests call it on CPU, on fresh random inputs.

A ``Case`` names the module (relative to the ops package), builds inputs for
a size ("small" for CI, "large" for the full table) and calls the entry point
of a loaded module (ours or JAX's). ``grad`` cases differentiate the sum of
the output with respect to the float inputs (files that define a VJP).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import numpy as np

SIZES = ("small", "large")


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    module: str
    inputs: Callable[[np.random.Generator, str], tuple]   # (rng, size) -> args
    # (module, args, target) -> outputs; target None: on CPU in interpret mode, else a
    # compile-only target of tools/jax_ops_aot.py (the kernel called for the device)
    call: Callable[..., Any]
    grad: bool = False                                       # also jax.grad of sum(out)
    # "gpu" (Triton-style), "tpu", "mgpu" (Mosaic GPU), "mgpu_multi" (its multi-GPU
    # collectives) or "blackwell" (Mosaic GPU, tcgen05)
    kind: str = "gpu"
    force: bool = True     # tpu: run under force_tpu_interpret_mode (else interpret=True)
    isolate: bool = False  # ours in its own process (its copy registers global state on import)
    rtol: float = 1e-3
    sharded: bool = False  # compile-only: the first operand split over every device ("x")
    interpret_params: tuple = ()   # tpu: (name, value) pairs of the forced InterpretParams
    # args -> the exact outputs (NumPy), where they are known: both sides are checked
    expect: Callable[[tuple], list] | None = None
    note: str = ""         # said on the page's row


def _normal(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# --- GPU (Triton-style) kernels, interpret=True as in JAX's gpu_ops_test -----------

def _mha_inputs(rng, size):
    b, s, h, d = (1, 64, 2, 32) if size == "small" else (2, 256, 2, 64)
    return tuple(_normal(rng, b, s, h, d) for _ in range(3))


def _mha(mod, args, target=None, *, causal=False):
    q, k, v = args
    bs = mod.BlockSizes(block_q=32, block_k=32, block_q_dkv=32, block_kv_dkv=32,
                        block_q_dq=32, block_kv_dq=32)
    return mod.mha(q, k, v, None, causal=causal, block_sizes=bs, interpret=target is None)


def _norm_inputs(rng, size):
    b, s, n = (2, 16, 128) if size == "small" else (4, 64, 512)   # gpu_ops_test's layout
    return _normal(rng, b, s, n), _normal(rng, n), _normal(rng, n)


def _layer_norm(mod, args, target=None):
    return mod.layer_norm(*args, interpret=target is None)


def _rms_norm(mod, args, target=None):
    return mod.rms_norm(*args, interpret=target is None)


def _softmax_inputs(rng, size):
    return (_normal(rng, *((16, 128) if size == "small" else (128, 1024))),)


def _softmax(mod, args, target=None):
    return mod.softmax(args[0], axis=-1, interpret=target is None)


def _decode_inputs(rng, size):
    b, h, s, d = (2, 16, 256, 32) if size == "small" else (4, 16, 1024, 64)
    q, k, v = _normal(rng, b, h, d), _normal(rng, b, s, d), _normal(rng, b, s, d)
    start = rng.integers(0, s // 2, size=(b,)).astype(np.int32)
    return q, k, v, start


def _mqa(mod, args, target=None, *, with_start=False):
    q, k, v, start = args
    return mod.mqa(q, k, v, start_idx=start if with_start else None, block_k=64, k_splits=4,
                   interpret=target is None)


def _gqa_inputs(rng, size):
    b, hq, hkv, s, d = (2, 8, 2, 256, 32) if size == "small" else (4, 16, 4, 1024, 64)
    return (_normal(rng, b, hq, d), _normal(rng, b, s, hkv, d), _normal(rng, b, s, hkv, d))


def _gqa(mod, args, target=None):
    q, k, v = args
    return mod.gqa(q, k, v, block_k=64, k_splits=4, interpret=target is None)


def _paged_inputs(rng, size):
    b, page, max_len, hkv, ratio, d = ((2, 16, 128, 1, 16, 32) if size == "small"
                                       else (4, 16, 512, 2, 16, 64))
    pages_per_seq = max_len // page
    total = b * pages_per_seq
    k_pages = _normal(rng, hkv, total, page, d)
    v_pages = _normal(rng, hkv, total, page, d)
    tables = rng.permutation(total).astype(np.int32).reshape(b, pages_per_seq)
    q = _normal(rng, b, hkv * ratio, d)
    lengths = rng.integers(1, max_len + 1, size=(b,)).astype(np.int32)
    return q, k_pages, v_pages, tables, lengths


def _paged(mod, args, target=None):
    q, kp, vp, tables, lengths = args
    return mod.paged_attention(q, kp, vp, tables, lengths, block_h=16,
                               pages_per_compute_block=4, k_splits=2,
                               interpret=target is None)


GPU_CASES = (
    Case("gpu.attention.mha", "gpu.attention", _mha_inputs, _mha, grad=True),
    Case("gpu.attention.mha(causal)", "gpu.attention", _mha_inputs,
         functools.partial(_mha, causal=True), grad=True),
    Case("gpu.layer_norm", "gpu.layer_norm", _norm_inputs, _layer_norm, grad=True),
    Case("gpu.rms_norm", "gpu.rms_norm", _norm_inputs, _rms_norm, grad=True),
    Case("gpu.softmax", "gpu.softmax", _softmax_inputs, _softmax),
    Case("gpu.decode_attention.mqa", "gpu.decode_attention", _decode_inputs, _mqa),
    Case("gpu.decode_attention.mqa(start_idx)", "gpu.decode_attention", _decode_inputs,
         functools.partial(_mqa, with_start=True)),
    Case("gpu.decode_attention.gqa", "gpu.decode_attention", _gqa_inputs, _gqa),
    Case("gpu.paged_attention", "gpu.paged_attention", _paged_inputs, _paged),
)



# --- TPU kernels: under force_tpu_interpret_mode (mode="force"), or with their own
# interpret=True argument, as JAX's TPU tests run them on CPU ----------------------

def _matmul_inputs(rng, size):
    n = 256 if size == "small" else 512
    return _normal(rng, n, n), _normal(rng, n, n)


def _matmul(mod, args, target=None):
    return mod.matmul(*args, block_shape=(128, 128), block_k=128)


def _double_inputs(rng, size):
    return (_normal(rng, *((8, 128) if size == "small" else (256, 512))),)


def _flash_inputs(rng, size):
    b, h, s, d = (1, 2, 128, 64) if size == "small" else (2, 2, 512, 128)
    return tuple(_normal(rng, b, h, s, d) for _ in range(3))


def _flash(mod, args, target=None, *, causal=False):
    bs = mod.BlockSizes(block_q=128, block_k_major=128, block_k=128, block_b=1,
                        block_q_major_dkv=128, block_k_major_dkv=128, block_k_dkv=128,
                        block_q_dkv=128, block_k_major_dq=128, block_k_dq=128, block_q_dq=128)
    return mod.flash_attention(*args, causal=causal, sm_scale=0.5, block_sizes=bs)


def _tpu_paged_inputs(rng, size):
    b, hq, hkv, d, page, pages_per_seq = ((2, 8, 2, 128, 16, 8) if size == "small"
                                          else (4, 16, 4, 128, 16, 32))
    total = b * pages_per_seq
    q = _normal(rng, b, hq, d)
    kp, vp = _normal(rng, hkv, total, page, d), _normal(rng, hkv, total, page, d)
    lengths = rng.integers(1, page * pages_per_seq + 1, size=(b,)).astype(np.int32)
    indices = rng.permutation(total).astype(np.int32).reshape(b, pages_per_seq)
    return q, kp, vp, lengths, indices


def _tpu_paged(mod, args, target=None, *, inline=True):
    return mod.paged_attention(*args, pages_per_compute_block=4, inline_seq_dim=inline)


def _group_sizes(rng, m, g):
    """``g`` random int32 group sizes (some may be 0) that add up to ``m`` rows."""
    cuts = np.sort(rng.integers(0, m + 1, size=g - 1))
    return np.diff(np.concatenate([[0], cuts, [m]])).astype(np.int32)


def _gmm_inputs(rng, size):
    m, k, n, g = (256, 128, 128, 4) if size == "small" else (512, 256, 256, 8)
    return _normal(rng, m, k), _normal(rng, g, k, n), _group_sizes(rng, m, g)


def _gmm(mod, args, target=None):
    return mod.gmm(*args, tiling=(128, 128, 128), interpret=target is None)


def _tgmm_inputs(rng, size):
    lhs, rhs, group_sizes = _gmm_inputs(rng, size)
    m = lhs.shape[0]
    return lhs.T.copy(), _normal(rng, m, rhs.shape[2]), group_sizes


def _tgmm(mod, args, target=None):
    return mod.tgmm(*args, tiling=(128, 128, 128), interpret=target is None)


def _splash_inputs(rng, size):
    h, s, d = (2, 256, 128) if size == "small" else (4, 512, 128)
    return tuple(_normal(rng, h, s, d) for _ in range(3))


def _splash(mod, args, target=None):
    h, s, _ = args[0].shape
    mask_lib = mod.mask_lib
    mask = mask_lib.MultiHeadMask(tuple(mask_lib.CausalMask((s, s)) for _ in range(h)))
    bs = mod.BlockSizes(block_q=128, block_kv=128, block_kv_compute=128, block_q_dkv=128,
                        block_kv_dkv=128, block_kv_dkv_compute=128, block_q_dq=128,
                        block_kv_dq=128)
    attn = mod.make_splash_mha_single_device(mask, block_sizes=bs,
                                             interpret=target is None)
    return attn(*args)


def _ragged_inputs(rng, size):
    seqs = [(1, 64), (16, 48), (5, 100)] if size == "small" else [(1, 300), (64, 256), (9, 90)]
    hq, hkv, d, page, pages_per_seq = 4, 2, 128, 16, 32
    num_pages = 64
    cu, kv_lens = [0], []
    for ql, kl in seqs:
        cu.append(cu[-1] + ql)
        kv_lens.append(kl)
    max_seqs = 4
    q = _normal(rng, 128, hq, d)
    kv_pages = _normal(rng, num_pages, page, 2 * hkv, d)
    page_indices = rng.permutation(num_pages)[:max_seqs * pages_per_seq // 4]
    page_indices = np.resize(page_indices, (max_seqs, pages_per_seq)).astype(np.int32)
    kv_lens = np.array(kv_lens + [0] * (max_seqs - len(seqs)), np.int32)
    cu_q_lens = np.array(cu + [cu[-1]] * (max_seqs + 1 - len(cu)), np.int32)
    return q, kv_pages, kv_lens, page_indices, cu_q_lens, np.array([len(seqs)], np.int32)


def _ragged(mod, args, target=None):
    return mod.ragged_paged_attention(*args, sm_scale=0.1, num_kv_pages_per_block=4,
                                      num_queries_per_block=16)


def _all_gather_inputs(rng, size):
    import jax       # one block of rows per CPU device
    n = jax.device_count()
    return (_normal(rng, *((n * 8, 128) if size == "small" else (n * 64, 256))),)


def _all_gather(mod, args, target=None):
    import jax
    if target is not None:     # compile-only: the operand is already sharded on the chips
        return mod.all_gather(args[0], mesh=target.all_devices, axis_name="x")
    mesh = jax.make_mesh((jax.device_count(),), ("x",))
    x = jax.device_put(args[0], jax.sharding.NamedSharding(mesh, jax.P("x")))
    return mod.all_gather(x, mesh=mesh, axis_name="x")


def _bits_shape(args):
    return (16, 256) if args[1].size == 1 else (64, 1024)


def _bits_inputs(rng, size):     # a key, and a marker of the size
    return (rng.integers(0, 2**31, size=(2,)).astype(np.uint32),
            np.zeros(1 if size == "small" else 2, np.int32))


def _threefry(mod, args, target=None):
    shape = _bits_shape(args)
    return mod.threefry_2x32_count(args[0], shape, shape, (8, 128))


def _philox(mod, args, target=None):
    return mod.philox_4x32_count(args[0], _bits_shape(args))


TPU_CASES = (
    Case("tpu.all_gather", "tpu.all_gather", _all_gather_inputs, _all_gather,
         kind="tpu", rtol=0.0, sharded=True, interpret_params=(("dma_execution_mode", "eager"),),
         expect=lambda args: [args[0]], note="DMAs eager, checked against the input (see Notes)"),
    Case("tpu.matmul", "tpu.matmul", _matmul_inputs, _matmul, kind="tpu"),
    Case("tpu.example_kernel.double", "tpu.example_kernel", _double_inputs,
         lambda mod, args, target=None: mod.double(args[0]), kind="tpu"),
    Case("tpu.flash_attention", "tpu.flash_attention", _flash_inputs, _flash, grad=True,
         kind="tpu"),
    Case("tpu.flash_attention(causal)", "tpu.flash_attention", _flash_inputs,
         functools.partial(_flash, causal=True), grad=True, kind="tpu"),
    Case("tpu.paged_attention", "tpu.paged_attention.paged_attention_kernel",
         _tpu_paged_inputs, _tpu_paged, kind="tpu"),
    Case("tpu.paged_attention(inline_seq_dim=False)",
         "tpu.paged_attention.paged_attention_kernel", _tpu_paged_inputs,
         functools.partial(_tpu_paged, inline=False), kind="tpu"),
    Case("tpu.megablox.gmm", "tpu.megablox.gmm", _gmm_inputs, _gmm, kind="tpu", force=False),
    Case("tpu.megablox.tgmm", "tpu.megablox.gmm", _tgmm_inputs, _tgmm, kind="tpu", force=False),
    Case("tpu.megablox.ops.gmm", "tpu.megablox.ops", _gmm_inputs,
         lambda mod, args, target=None: mod.gmm(*args, tiling=(128, 128, 128),
                                                interpret=target is None),
         grad=True, kind="tpu", force=False),
    Case("tpu.splash_attention(causal)", "tpu.splash_attention.splash_attention_kernel",
         _splash_inputs, _splash, grad=True, kind="tpu", force=False),
    Case("tpu.ragged_paged_attention", "tpu.ragged_paged_attention.kernel", _ragged_inputs,
         _ragged, kind="tpu"),
    Case("tpu.random.threefry_2x32_count", "tpu.random.threefry", _bits_inputs, _threefry,
         kind="tpu", rtol=0.0, isolate=True),
    Case("tpu.random.philox_4x32_count", "tpu.random.philox", _bits_inputs, _philox,
         kind="tpu", rtol=0.0, isolate=True),
)



# --- Mosaic GPU kernels: under force_gpu_interpret_mode, JAX's CPU path for them ------

def _bf16(rng, *shape):
    import jax.numpy as jnp
    return np.asarray(_normal(rng, *shape), jnp.bfloat16)


def _hopper_inputs(rng, size):
    n = 256 if size == "small" else 512
    return _bf16(rng, n, n), _bf16(rng, n, n)


def _hopper(mod, args, target=None):
    cfg = mod.TuningConfig(tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2)
    return mod.matmul(args[0], args[1], None, cfg)


def _mgpu_attention_inputs(rng, size):     # float16, as JAX's mgpu_attention_test
    b, s, h, d = (1, 128, 1, 64) if size == "small" else (2, 256, 2, 64)
    return tuple(_normal(rng, b, s, h, d, dtype=np.float16) for _ in range(3))


def _mgpu_attention(mod, args, target=None):
    return mod.attention(*args, mod.TuningConfig(
        block_q=64, block_kv=64, max_concurrent_steps=2, block_q_dkv=64, block_kv_dkv=64,
        block_q_dq=64, block_kv_dq=64))


def _ragged_dot_inputs(rng, size):
    m, k, n, g = (256, 128, 128, 2) if size == "small" else (512, 256, 256, 4)
    return _bf16(rng, m, k), _bf16(rng, g, k, n), _group_sizes(rng, m, g)


def _ragged_dot(mod, args, target=None):
    lhs, rhs, sizes = args
    return mod.ragged_dot(lhs, rhs, group_sizes=sizes, block_m=64, block_n=64, block_k=64,
                          max_concurrent_steps=2, grid_block_n=1)


def _mixed_inputs(rng, size):     # int8-valued lhs, as JAX's mgpu_matmul_test
    n = 256 if size == "small" else 512
    return rng.integers(-5, 5, size=(n, n)).astype(np.int8), _bf16(rng, n, n)


def _mixed(mod, args, target=None):
    import jax.numpy as jnp
    cfg = mod.TuningConfig(tile_m=64, tile_n=64, tile_k=64, max_concurrent_steps=2)
    return mod.mixed_matmul_kernel(*args, out_dtype=jnp.bfloat16, config=cfg)


def _transposed_inputs(rng, size):     # lhs (K, M), rhs (K, N), groups split K
    k, m, n, g = (256, 128, 128, 2) if size == "small" else (512, 256, 256, 4)
    f16 = np.float16
    return _normal(rng, k, m, dtype=f16), _normal(rng, k, n, dtype=f16), _group_sizes(rng, k, g)


def _transposed(mod, args, target=None):
    import jax
    lhs, rhs, sizes = args
    with jax.numpy_dtype_promotion("standard"):     # as JAX's mgpu_ragged_dot_test calls it
        return mod.transposed_ragged_dot(lhs, rhs, group_sizes=sizes, block_m=64, block_n=64,
                                         block_k=64, max_concurrent_steps=2, grid_block_n=1)


MGPU_CASES = (
    Case("gpu.hopper_matmul_mgpu", "gpu.hopper_matmul_mgpu", _hopper_inputs, _hopper,
         kind="mgpu", rtol=1e-2),
    Case("gpu.attention_mgpu", "gpu.attention_mgpu", _mgpu_attention_inputs, _mgpu_attention,
         grad=True, kind="mgpu", rtol=1e-2),
    Case("gpu.ragged_dot_mgpu", "gpu.ragged_dot_mgpu", _ragged_dot_inputs, _ragged_dot,
         kind="mgpu", rtol=1e-2),
    Case("gpu.hopper_mixed_type_matmul_mgpu", "gpu.hopper_mixed_type_matmul_mgpu",
         _mixed_inputs, _mixed, kind="mgpu", rtol=1e-2),
    Case("gpu.transposed_ragged_dot_mgpu", "gpu.transposed_ragged_dot_mgpu",
         _transposed_inputs, _transposed, kind="mgpu", rtol=1e-2),
)


# --- multi-GPU Mosaic GPU collectives: over every device (CPU: JAX's GPU interpret mode
# on the host devices; compile-only: a two-H100 topology) --------------------------------

def _devices_mesh(target):
    import jax
    return target.all_devices if target is not None else \
        jax.make_mesh((jax.device_count(),), ("x",))


def _collective_inputs(rng, size):
    import jax
    n = jax.device_count()
    return (_normal(rng, *((n * 128, 128) if size == "small" else (n * 256, 256))),)


def _over_devices(fn, target, args, in_specs, out_specs):
    import jax
    mesh = _devices_mesh(target)
    specs = in_specs if isinstance(in_specs, tuple) else (in_specs,)
    if target is None:      # on CPU the operands are placed here (compile-only: by the caller)
        args = [jax.device_put(a, jax.sharding.NamedSharding(mesh, s))
                for a, s in zip(args, specs)]
    return jax.shard_map(fn, mesh=mesh, in_specs=specs, out_specs=out_specs,
                         check_vma=False)(*args)


def _mgpu_all_gather(mod, args, target=None):
    import jax
    return _over_devices(lambda x: mod.all_gather(x, axis_name="x", num_blocks=4), target,
                         args, jax.P("x"), jax.P())


def _mgpu_reduce_scatter(mod, args, target=None):
    import jax
    return _over_devices(lambda x: mod.reduce_scatter(x, axis_name="x", num_blocks=4), target,
                         args, jax.P("x"), jax.P("x"))


def _collective_matmul_inputs(rng, size):
    import jax
    n, k = jax.device_count(), 128
    m = 128 if size == "small" else 256
    return _bf16(rng, n * m, k), _bf16(rng, k, n * m)


def _collective_matmul(mod, args, target=None):
    import jax
    import jax.numpy as jnp
    cfg = mod.hopper_matmul_mgpu.TuningConfig(tile_m=64, tile_n=64, tile_k=64,
                                              max_concurrent_steps=2)
    return _over_devices(
        lambda a, b: mod.all_gather_lhs_matmul(a, b, "x", config=cfg, dtype=jnp.bfloat16),
        target, args, (jax.P("x"), jax.P(None, "x")), jax.P(None, "x"))


MULTI_GPU_CASES = (
    Case("gpu.all_gather_mgpu", "gpu.all_gather_mgpu", _collective_inputs, _mgpu_all_gather,
         kind="mgpu_multi", sharded=True, rtol=0.0),
    Case("gpu.reduce_scatter_mgpu", "gpu.reduce_scatter_mgpu", _collective_inputs,
         _mgpu_reduce_scatter, kind="mgpu_multi", sharded=True),
    Case("gpu.collective_matmul_mgpu", "gpu.collective_matmul_mgpu", _collective_matmul_inputs,
         _collective_matmul, kind="mgpu_multi", sharded=True, rtol=1e-2),
)


# --- Blackwell (tcgen05) Mosaic GPU kernels: compiled for a B200 ----------------------

def _bw_matmul_inputs(rng, size):
    n = 256 if size == "small" else 512
    return _normal(rng, n, n, dtype=np.float16), _normal(rng, n, n, dtype=np.float16)


def _bw_matmul(mod, args, target=None):
    cfg = mod.TuningConfig(tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2,
                           collective=False)
    return mod.matmul_kernel(*args, cfg)


def _bw_ragged_inputs(rng, size):
    m, k, n, g = (256, 128, 128, 2) if size == "small" else (512, 256, 256, 4)
    f16 = np.float16
    return _normal(rng, m, k, dtype=f16), _normal(rng, g, k, n, dtype=f16), _group_sizes(rng, m, g)


def _bw_ragged(mod, args, target=None):
    cfg = mod.TuningConfig(tile_m=128, tile_n=128, tile_k=64, max_concurrent_steps=2,
                           collective=False, grid_tile_width=1,
                           grid_minor_dim=mod.blackwell_matmul_mgpu.MatmulDimension.N)
    return mod.ragged_dot_kernel(*args, cfg)


BLACKWELL_CASES = (
    Case("gpu.blackwell_matmul_mgpu", "gpu.blackwell_matmul_mgpu", _bw_matmul_inputs,
         _bw_matmul, kind="blackwell", rtol=1e-2),
    Case("gpu.blackwell_ragged_dot_mgpu", "gpu.blackwell_ragged_dot_mgpu", _bw_ragged_inputs,
         _bw_ragged, kind="blackwell", rtol=1e-2),
)

CASES = GPU_CASES + TPU_CASES + MGPU_CASES + MULTI_GPU_CASES + BLACKWELL_CASES

# What a row's short note refers to, said once under the table.
NOTES = {
    "tpu.all_gather": (
        "its CPU rows force `InterpretParams(dma_execution_mode=\"eager\")` on both sides "
        "and check both against the input (an all-gather returns its input). Under the "
        "default `on_wait` mode, JAX's TPU interpreter executes the DMAs pending on a "
        "semaphore last-in first-out (`Semaphore.wait` pops the newest task). This kernel "
        "forwards a block to the next device after one wait on a receive semaphore that its "
        "successive DMAs share, so a neighbour's later DMA can satisfy that wait while the "
        "block being forwarded is still unwritten. JAX's own run of the file then leaves "
        "NaN blocks, in places that vary from run to run, and so does ours (the same "
        "interpreter). Replayed with the pending DMAs taken first-in first-out, both runs "
        "are exact; eager mode is exact on both sides every time"),
}

# Entry points of the ops tree with no row yet, and why.
NOT_RUN = {
}
