"""The libraries ``tools/ecosystem.py`` checks and the kernels it runs from
them, each called the way the library's own tests call it, on small fresh
random inputs (NumPy arrays built from the run's seed; both sides get the
same ones).

A ``Case`` names the module inside the library, builds inputs from a NumPy
generator and calls the module's entry point; ``run`` (``ecosystem.Run``)
says the mode and the side. TPU kernels run under the TPU interpret mode
(JAX's ``force_tpu_interpret_mode`` or ours) when the mode is ``interpret``,
Mosaic GPU kernels under the GPU one, as ``tools/jax_ops.py`` runs JAX's.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    module: str                                  # dotted, inside the library's package
    inputs: Callable[[np.random.Generator], tuple]
    call: Callable[[Any, tuple, Any], Any]       # (module, args, run) -> outputs
    kind: str = "tpu"                            # "tpu", "mgpu" or "gpu" (Triton)
    modes: tuple[str, ...] = ("interpret", "v5e")
    force: bool = True                           # tpu: under force_tpu_interpret_mode
    interpret_params: tuple = ()                 # tpu: (name, value) pairs for that mode
    sharded: bool = False          # runs over four devices (run.mesh, axis "x")
    # NumPy float64 outputs (the first ones) from the inputs: both sides are held to it
    reference: Callable[[tuple], list] | None = None
    ref_rtol: float = 1e-3
    rtol: float = 1e-3
    # module functions replaced by a constant for the run, as the library's tests
    # mock them on a host without the chip (e.g. {"get_tpu_version": 5})
    returns: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Library:
    name: str
    repo: str
    env: str                       # the variable naming its source root
    package: str                   # the top-level package under that root
    requires: str                  # what its kernels import besides jax (for the page)
    cases: tuple[Case, ...] = ()
    bare_packages: tuple[str, ...] = ()   # imported without their __init__
    # names ours lacks that the library touches at import: a second run of ours puts
    # stand-ins for them, to show what else each kernel misses
    stand_ins: tuple[str, ...] = ()
    not_run: dict = dataclasses.field(default_factory=dict)   # family -> why
    # case name -> the piece ours misses, diagnosed by hand from the error (shown
    # only while that row fails where JAX works)
    gaps: dict = dataclasses.field(default_factory=dict)


def _normal(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def _cdiv(a, b):
    return -(-a // b)


# --- vllm-project/tpu-inference ----------------------------------------------------

RPA = "tpu_inference.kernels.ragged_paged_attention"
_SEQS = ((8, 40), (1, 20), (3, 3))       # (q_len, kv_len) per sequence
_PAGE, _PAGES, _HEADS, _DIM = 16, 16, (4, 2), 128


def _rpa_v3_inputs(rng):
    tokens, max_seqs = 128, 8
    nq, nkv = _HEADS
    per_seq = _cdiv(max(kv for _, kv in _SEQS), _PAGE)
    q = _normal(rng, tokens, nq, _DIM)
    k, v = _normal(rng, tokens, nkv, _DIM), _normal(rng, tokens, nkv, _DIM)
    cache = _normal(rng, _PAGES, _PAGE, nkv * 2, 1, _DIM)   # f32: packing 1
    pages = rng.permutation(_PAGES).astype(np.int32)
    indices = np.zeros((max_seqs, per_seq), np.int32)
    used = 0
    for i, (_, kv) in enumerate(_SEQS):
        n = _cdiv(kv, _PAGE)
        indices[i, :n] = pages[used:used + n]
        used += n
    cu = np.zeros(max_seqs + 1, np.int32)
    cu[1:len(_SEQS) + 1] = np.cumsum([ql for ql, _ in _SEQS])
    cu[len(_SEQS) + 1:] = cu[len(_SEQS)]
    lens = np.zeros(max_seqs, np.int32)
    lens[:len(_SEQS)] = [kv for _, kv in _SEQS]
    dist = np.array([0, 0, len(_SEQS)], np.int32)
    return q, k, v, cache, lens, indices.reshape(-1), cu, dist


def _rpa_v3(mod, args, run):
    out, cache = mod.ragged_paged_attention(*args, sm_scale=_DIM ** -0.5,
                                            m_block_sizes=(16, 32, 8, 16),
                                            vmem_limit_bytes=64 * 1024 * 1024)
    return out[:sum(ql for ql, _ in _SEQS)], cache


def _rpa_v2_inputs(rng):
    q, _, _, cache, lens, indices, cu, _ = _rpa_v3_inputs(rng)
    kv_pages = cache.reshape(_PAGES, _PAGE, _HEADS[1] * 2, _DIM)
    return (q, kv_pages, lens, indices.reshape(8, -1), cu,
            np.array([len(_SEQS)], np.int32))


def _rpa_v2(mod, args, run):
    out = mod.ragged_paged_attention(*args, sm_scale=_DIM ** -0.5, num_kv_pages_per_block=1,
                                     num_queries_per_block=8,
                                     vmem_limit_bytes=64 * 1024 * 1024)
    return out[:sum(ql for ql, _ in _SEQS)]


def _agmm_inputs(rng):
    m, k, n = 4 * 128, 256, 4 * 128          # 128 rows of x and columns of y per device
    return _normal(rng, m, k), _normal(rng, k, n)


def _agmm_reference(args):
    x, y = (np.asarray(a, np.float64) for a in args)
    return [x @ y]


def _agmm(mod, args, run):
    return mod.all_gather_matmul(*args, run.mesh, "x", bn=128, bk=128)


def _conv_inputs(rng):
    lengths, q_loc, dim, ksize = [200, 100], [0, 128, 192], 128, 4
    x = _normal(rng, q_loc[-1], dim)
    state = _normal(rng, len(lengths) + 1, ksize - 1, dim)
    weight, bias = _normal(rng, dim, 1, ksize), _normal(rng, dim)
    q_loc = np.array(q_loc, np.int32)
    has_init = np.array(lengths) > np.diff(q_loc)
    return (x, state, weight, bias, q_loc, np.arange(1, len(lengths) + 1, dtype=np.int32),
            np.array([0, 0, len(lengths)], np.int32), has_init)


def _conv(mod, args, run):
    return mod.ragged_causal_conv1d(*args, kernel_size=4)


def _gdn_inputs(rng):
    n, hqk, hv, dk, dv = 3, 2, 2, 128, 128
    qkv = _normal(rng, n, 2 * hqk * dk + hv * dv)
    b, a = _normal(rng, n, hv), _normal(rng, n, hv)
    state = _normal(rng, n, hv, dk, dv)
    cu = np.arange(n + 1, dtype=np.int32)
    return (qkv, b, a, state, _normal(rng, hv), _normal(rng, hv), cu,
            np.arange(n, dtype=np.int32), np.array([n, n, n], np.int32))


def _gdn(mod, args, run):
    return mod.ragged_gated_delta_rule_decode_only(*args, n_kq=2, n_v=2, d_k=128, d_v=128,
                                                   apply_silu=True)


TPU_INFERENCE = Library(
    name="tpu-inference", repo="vllm-project/tpu-inference", env="PALLAS_TPU_INFERENCE_SRC",
    package="tpu_inference",
    requires="none besides jax for the kernels run here (the package's `__init__` imports "
             "vllm: the check imports `tpu_inference` without it)",
    bare_packages=("tpu_inference",),
    not_run={
        "quantized_matmul, megablox gmm, flash_attention, fused_moe v1, ragged_paged_attention "
        "v3 hd64": "their modules import vllm (a logger, tuned block tables); they run where "
                   "vllm is installed once they get a row",
        "ragged_paged_attention v2 kv_cache_update": "its module imports torch",
        "sparse_core kernels, collectives/hierrs_sc":
            "TPU SparseCore (`tpu_sc`) kernels: a v5e has no SparseCore, and ours lacks the "
            "names listed below",
        "mla v1/v2, gdn v1/v3, structured_sparse_matmul, experimental (batched_rpa, "
        "stacked_rpa, rpa_v3_cp, deepseek_v4, fused_moe gmm)": "not given a row yet",
    },
    cases=(
        Case("ragged_paged_attention v3", f"{RPA}.v3.kernel", _rpa_v3_inputs, _rpa_v3,
             returns={"get_tpu_version": 5}),
        Case("ragged_paged_attention v2", f"{RPA}.v2.kernel", _rpa_v2_inputs, _rpa_v2),
        Case("all_gather_matmul (4 devices)",
             "tpu_inference.kernels.collectives.all_gather_matmul", _agmm_inputs, _agmm,
             sharded=True, interpret_params=(("dma_execution_mode", "eager"),),
             reference=_agmm_reference),
        Case("ragged_causal_conv1d", "tpu_inference.kernels.causal_conv1d.causal_conv1d",
             _conv_inputs, _conv),
        Case("gated delta rule decode (gdn v2)", "tpu_inference.kernels.gdn.v2.gdn_decode_kernel",
             _gdn_inputs, _gdn),
    ),
)


# --- openxla/tokamax ---------------------------------------------------------------

TK = "tokamax._src.ops"


def _groups(rng, m, g):
    """Random group sizes summing to ``m`` (some empty)."""
    cuts = np.sort(rng.integers(0, m + 1, size=g - 1))
    return np.diff(np.concatenate([[0], cuts, [m]])).astype(np.int32)


def _gmm_inputs(rng):
    m, k, n, g = 256, 128, 128, 4
    return _normal(rng, m, k), _normal(rng, g, k, n), _groups(rng, m, g)


def _gmm_reference(args):
    lhs, rhs, sizes = args
    ends = np.cumsum(sizes)
    out = np.zeros((lhs.shape[0], rhs.shape[2]))
    for g, (end, size) in enumerate(zip(ends, sizes)):
        rows = slice(end - size, end)
        out[rows] = np.asarray(lhs[rows], np.float64) @ np.asarray(rhs[g], np.float64)
    return [out]


def _tk_gmm(mod, args, run):
    import jax
    import jax.numpy as jnp
    p = jax.lax.Precision.DEFAULT
    return mod.gmm(*args, precision=(p, p), out_dtype=jnp.float32, tiling=(128, 128, 128))


def _tgmm_inputs(rng):
    m, k, n, g = 256, 128, 128, 4
    return _normal(rng, m, k), _normal(rng, m, n), _groups(rng, m, g)


def _tk_tgmm(mod, args, run):
    import jax
    import jax.numpy as jnp
    p = jax.lax.Precision.DEFAULT
    return mod.tgmm(*args, precision=(p, p), out_dtype=jnp.float32, tiling=(128, 128, 128))


# what the kernel asks of the default device to size its persistent grid
_H100 = types.SimpleNamespace(core_count=132, device_kind="NVIDIA H100 80GB HBM3",
                              compute_capability="9.0")
_B200 = types.SimpleNamespace(core_count=148, device_kind="NVIDIA B200",
                              compute_capability="10.0", platform="gpu")


def _mgpu_ragged_inputs(rng):
    import ml_dtypes
    m, k, n, g = 256, 128, 128, 4
    bf = ml_dtypes.bfloat16
    return (_normal(rng, m, k).astype(bf), _normal(rng, g, k, n).astype(bf),
            _groups(rng, m, g))


def _tk_mgpu_ragged(mod, args, run):
    import importlib

    import jax.numpy as jnp
    common = importlib.import_module(f"{TK}.ragged_dot.pallas_mosaic_gpu_common")
    cfg = common.Config(block_m=64, block_n=64, block_k=64, num_stages=2, split_k=1)
    return mod.ragged_dot_kernel(*args, out_dtype=jnp.dtype("float32"), config=cfg)


def _attn_inputs(rng):
    import ml_dtypes
    t, h, d = 128, 2, 64
    return tuple(_normal(rng, t, h, d).astype(ml_dtypes.bfloat16) for _ in range(3))


def _tk_mgpu_attention(mod, args, run):
    import jax.numpy as jnp
    q, k, v = args
    out, _ = mod.flash_attention_kernel(
        q, k, v, None, None, None, None, is_causal=True, logits_soft_cap=None,
        logits_scale=q.shape[-1] ** -0.5, out_dtype=jnp.dtype("float32"), normalize_output=True,
        return_residuals=False, use_stable_softmax=True, rescale_threshold=0.0,
        config=mod.Config(block_q=64, block_kv=64, num_stages=2))
    return out


def _ragged_contracting_inputs(rng):
    """lhs [T, M] and rhs [T, N] with groups along T: the VJP's d(rhs) of a ragged dot."""
    import ml_dtypes
    t, m, n, g = 256, 128, 128, 4
    bf = ml_dtypes.bfloat16
    return _normal(rng, t, m).astype(bf), _normal(rng, t, n).astype(bf), _groups(rng, t, g)


def _ragged_contracting_reference(args):
    lhs, rhs, sizes = args
    ends = np.cumsum(sizes)
    f64 = lambda x: np.asarray(x, np.float64)  # noqa: E731
    return [np.stack([f64(lhs[e - s:e]).T @ f64(rhs[e - s:e]) for e, s in zip(ends, sizes)])]


def _tk_mgpu_ragged_contracting(mod, args, run):
    import importlib

    import jax.numpy as jnp
    common = importlib.import_module(f"{TK}.ragged_dot.pallas_mosaic_gpu_common")
    cfg = common.Config(block_m=64, block_n=64, block_k=64, num_stages=2, split_k=1)
    return mod.ragged_contracting_dim_dot_kernel(*args, out_dtype=jnp.dtype("float32"),
                                                 config=cfg)


def _quantized_rhs(rhs, qtype):
    """rhs [G, K, N] quantized with qwix as tokamax's tests do, one scale per
    group and column over the whole K (K = 128 here: one K block)."""
    import jax.numpy as jnp
    import qwix
    return qwix.quantize(rhs, jnp.dtype(qtype), tiled_axes={0: 1, 1: rhs.shape[1], 2: 1})


def _tk_mgpu_ragged_quant(mod, args, run):
    import importlib

    import jax.numpy as jnp
    common = importlib.import_module(f"{TK}.ragged_dot.pallas_mosaic_gpu_common")
    lhs, rhs, sizes = args
    cfg = common.Config(block_m=64, block_n=64, block_k=128, num_stages=2, split_k=1)
    return mod.ragged_dot_quantized_kernel(lhs, _quantized_rhs(rhs, "int8"), sizes,
                                           out_dtype=jnp.dtype("bfloat16"), config=cfg)


def _tk_mgpu_ragged_quant_sm100(mod, args, run):
    import importlib

    import jax.numpy as jnp
    common = importlib.import_module(f"{TK}.ragged_dot.pallas_mosaic_gpu_common")
    lhs, rhs, sizes = args
    # tokamax's B200 test config for a quantized rhs (int4)
    cfg = common.Config(block_m=64, block_n=128, block_k=128, num_stages=2, split_k=1)
    return mod.ragged_dot_gpu_quant_blackwell_kernel(lhs, _quantized_rhs(rhs, "int4"), sizes,
                                                     out_dtype=jnp.dtype("bfloat16"),
                                                     config=cfg)


def _sm100_quantized(fn_name, lhs_qtype, rhs_qtype="int4", **config):
    """tokamax's Blackwell ragged dots with a quantized rhs (and lhs), configured
    as tokamax's tests of that kernel configure it (one scale per 128 of K)."""
    def call(mod, args, run):
        import importlib

        import jax.numpy as jnp
        import qwix
        common = importlib.import_module(f"{TK}.ragged_dot.pallas_mosaic_gpu_common")
        lhs, rhs, sizes = args
        if lhs_qtype:
            lhs = qwix.quantize(lhs, jnp.dtype(lhs_qtype), tiled_axes={0: 1, 1: 128})
        cfg = common.Config(**{"block_m": 16, "block_n": 128, "block_k": 128, "num_stages": 2,
                               "split_k": 1, "collective": False,
                               "grid_minor_dim": common.MatmulDimension.M, **config})
        return getattr(mod, fn_name)(lhs, _quantized_rhs(rhs, rhs_qtype), sizes,
                                     jnp.dtype("bfloat16"), cfg)
    return call


def _attn_sm100_inputs(rng):
    import ml_dtypes
    return tuple(_normal(rng, 256, 2, 64).astype(ml_dtypes.bfloat16) for _ in range(3))


def _tk_mgpu_attention_sm100(mod, args, run):
    import jax.numpy as jnp
    q, k, v = args
    out, _ = mod.flash_attention_kernel(
        q, k, v, None, None, None, None, is_causal=True, logits_soft_cap=None,
        logits_scale=q.shape[-1] ** -0.5, out_dtype=jnp.dtype("float32"), normalize_output=True,
        return_residuals=False, use_stable_softmax=True, rescale_threshold=0.0,
        config=mod.Config(block_q=256, block_kv=128, num_stages=2))   # 128 rows per CTA
    return out


def _attn_fwd64(q, k, v, causal):
    """Float64 attention over [T, H, D] arrays: (out, m, l, weights), m and l
    [H, T] as the forward kernels' residuals (max and sum of the scaled logits)."""
    s = np.einsum("thd,shd->hts", q, k) * q.shape[-1] ** -0.5
    if causal:
        s = np.where(np.tril(np.ones(s.shape[1:], bool)), s, -np.inf)
    m = s.max(-1)
    e = np.exp(s - m[..., None])
    l = e.sum(-1)
    w = e / l[..., None]
    return np.einsum("hts,shd->thd", w, v), m, l, w


def _attn_vjp_inputs(rng, t, h, d, dtype, causal=True):
    """q, k, v, m, l, out, dout: the forward's residuals and output in float64
    from the rounded q, k, v, so the backward sees a consistent set."""
    q, k, v, dout = (_normal(rng, t, h, d).astype(dtype) for _ in range(4))
    out, m, l, _ = _attn_fwd64(*(np.asarray(x, np.float64) for x in (q, k, v)), causal)
    return q, k, v, m.astype(np.float32), l.astype(np.float32), out.astype(dtype), dout


def _attn_vjp_reference(args, causal=True):
    """[dq, dk, dv] in float64 from the inputs of ``_attn_vjp_inputs``."""
    q, k, v, _, _, out, dout = (np.asarray(a, np.float64) for a in args)
    _, _, _, w = _attn_fwd64(q, k, v, causal)
    scale = q.shape[-1] ** -0.5
    dv = np.einsum("hts,thd->shd", w, dout)
    dp = np.einsum("thd,shd->hts", dout, v)
    ds = w * (dp - np.einsum("thd,thd->ht", out, dout)[..., None])
    return [np.einsum("hts,shd->thd", ds, k) * scale, np.einsum("hts,thd->shd", ds, q) * scale,
            dv]


def _attn_vjp_mgpu_inputs(rng):
    import ml_dtypes
    return _attn_vjp_inputs(rng, 128, 2, 64, ml_dtypes.bfloat16)


def _tk_mgpu_attention_vjp(mod, args, run):
    q, k, v, m, l, out, dout = args
    cfg = mod.Config(block_q_dkv=64, block_kv_dkv=64, block_q_dq=64, block_kv_dq=64,
                     num_stages=2, compute_wgs=2)
    dq, dk, dv, _ = mod.flash_attention_vjp_kernel(
        q, k, v, (m, l), out, dout, None, None, None, None, logits_scale=q.shape[-1] ** -0.5,
        logits_soft_cap=None, is_causal=True, ds_dtype=None, config=cfg)
    return dq, dk, dv


def _tk_mgpu_attention_vjp_sm100(mod, args, run):
    q, k, v, m, l, out, dout = args
    cfg = mod.Config(block_q_dkv=128, block_kv_dkv=128, block_q_dq=128, block_kv_dq=128,
                     num_stages=2)
    dq, dk, dv, _ = mod.flash_attention_vjp_kernel(
        q, k, v, (m, l), out, dout, None, None, None, None, logits_scale=q.shape[-1] ** -0.5,
        logits_soft_cap=None, is_causal=True, ds_dtype=None, config=cfg)
    return dq, dk, dv


def _attn_vjp_mgpu_bias_inputs(rng):
    """As ``_attn_vjp_mgpu_inputs`` plus a full [H, T, t] bias and mask (their
    blocks then go through the pipeline, with dS as a fourth output)."""
    import ml_dtypes
    args = _attn_vjp_mgpu_inputs(rng)
    t, h = args[0].shape[:2]
    return (*args, _normal(rng, h, t, t).astype(ml_dtypes.bfloat16),
            rng.random((h, t, t)) < 0.9)


def _tk_mgpu_attention_vjp_bias(mod, args, run):
    import jax.numpy as jnp
    q, k, v, m, l, out, dout, bias, mask = args
    cfg = mod.Config(block_q_dkv=64, block_kv_dkv=64, block_q_dq=64, block_kv_dq=64,
                     num_stages=2, compute_wgs=2)
    return mod.flash_attention_vjp_kernel(
        q, k, v, (m, l), out, dout, bias, mask, None, None, logits_scale=q.shape[-1] ** -0.5,
        logits_soft_cap=None, is_causal=True, ds_dtype=jnp.dtype(bias.dtype), config=cfg)


def _attn_vjp_splash_inputs(rng):
    return _attn_vjp_inputs(rng, 256, 2, 128, np.float32)


def _tk_splash_attention_vjp(mod, args, run):
    import jax
    import jax.numpy as jnp
    q, k, v, m, l, out, dout = args
    p = jax.lax.Precision.DEFAULT
    grads, _ = mod.PallasMosaicTpuFlashAttentionVjp()._fwd(
        (m, m + jnp.log(l)), out, dout, q, k, v, precision=((p, p), (p, p)),  # max, logsumexp
        logits_dtype=jnp.dtype("float32"), logits_scale=q.shape[-1] ** -0.5, bias=None,
        logits_soft_cap=None, mask=mod.base.Mask(is_causal=True), dropout_mask=None,
        dropout_rate=0.0, paging_info=None, q_indices=None, k_indices=None,
        normalize_output=True, return_residuals=False,
        config=mod.Config(block_q_dkv=128, block_kv_dkv=128, block_kv_dkv_compute=128))
    return grads["q"], grads["k"], grads["v"]


def _attn_vjp_triton_inputs(rng):
    return _attn_vjp_inputs(rng, 64, 2, 64, np.float32)


def _tk_triton_attention_vjp(mod, args, run):
    import jax
    import jax.numpy as jnp
    q, k, v, m, l, out, dout = args
    p = jax.lax.Precision.DEFAULT
    grads, _ = mod.PallasTritonFlashAttentionVjp()._fwd(
        (m, l), out, dout, q, k, v, precision=(p, p), logits_dtype=jnp.dtype("float32"),
        logits_scale=q.shape[-1] ** -0.5, bias=None, logits_soft_cap=None,
        mask=mod.Mask(is_causal=True), dropout_mask=None, dropout_rate=0.0, paging_info=None,
        q_indices=None, k_indices=None, normalize_output=True, return_residuals=False,
        config=mod.Config(block_m1=32, block_n1=32, block_m2=32, block_n2=32, num_stages=2,
                          num_warps=4))
    return grads["q"], grads["k"], grads["v"]


def _norm_vjp_inputs(rng):
    x, scale, offset = _norm_inputs(rng)
    # [rows, 1]: the normalized axis kept, as the forward kernel returns them
    mean = x.mean(-1, keepdims=True, dtype=np.float64)
    rstd = 1 / np.sqrt(x.var(-1, keepdims=True, dtype=np.float64) + 1e-6)
    return (x, scale, offset, mean.astype(np.float32), rstd.astype(np.float32),
            _normal(rng, *x.shape))


def _tk_triton_norm_vjp(mod, args, run):
    x, scale, offset, mean, rstd, dout = args
    (dx, dscale, doffset), _ = mod.PallasTritonNormalizationVjp()._fwd(
        (mean, rstd), None, dout, x, scale, offset, axis=-1, epsilon=1e-6, scale_offset=0.0,
        subtract_mean=True, return_residuals=False,
        config=mod.Config(block_m=8, block_n=None, num_warps=4))
    return dx, dscale, doffset


def _gmm_v2_inputs(rng):
    m, k, n, g = 128, 512, 512, 16
    import ml_dtypes
    bf = ml_dtypes.bfloat16
    return (_normal(rng, m, k).astype(bf), _normal(rng, g, k, n).astype(bf), _groups(rng, m, g),
            _normal(rng, g, 1, n).astype(bf))


def _tk_gmm_v2(mod, args, run):
    lhs, rhs, sizes, bias = args
    import jax.numpy as jnp
    return mod.gmm_v2(lhs, rhs, sizes, rhs_bias=bias, group_offset=jnp.zeros((), jnp.int32),
                      preferred_element_type=jnp.float32)


def _tk_triton_ragged(mod, args, run):
    import importlib

    import jax
    base = importlib.import_module(f"{TK}.ragged_dot.base")
    p = jax.lax.Precision.DEFAULT
    out, _ = mod.PallasTritonRaggedDot()._fwd(
        args[0], args[1], group_sizes=args[2],
        ragged_dot_dimension_numbers=base.DEFAULT_RAGGED_DOT_DIM_NUMS, precision=(p, p),
        preferred_element_type=None, return_residuals=False, maybe_quantize_lhs=False,
        config=mod.Config(block_m=32, block_n=32, block_k=32, num_stages=2))
    return out


def _splash_inputs(rng):
    return tuple(_normal(rng, 1, 256, 2, 128) for _ in range(3))


def _causal_attention_reference(args):
    q, k, v = (np.asarray(a, np.float64) for a in args)        # [B, T, H, D]
    logits = np.einsum("bthd,bshd->bhts", q, k) * q.shape[-1] ** -0.5
    t = q.shape[1]
    logits = np.where(np.tril(np.ones((t, t), bool)), logits, -np.inf)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    return [np.einsum("bhts,bshd->bthd", w / w.sum(-1, keepdims=True), v)]


def _tk_splash_attention(mod, args, run):
    import jax
    import jax.numpy as jnp
    p = jax.lax.Precision.DEFAULT
    layout = mod.splash.QKVLayout.HEAD_DIM_MINOR
    out, _ = mod.PallasMosaicTpuFlashAttention()._fwd(
        *args, precision=((p, p), (p, p)), logits_dtype=jnp.dtype("float32"),
        logits_scale=args[0].shape[-1] ** -0.5, bias=None, logits_soft_cap=None,
        mask=mod.base.Mask(is_causal=True), dropout_mask=None, dropout_rate=0.0,
        paging_info=None, q_indices=None, k_indices=None, normalize_output=True,
        return_residuals=False,
        config=mod.Config(block_q=128, block_kv=128, block_kv_compute=128, q_layout=layout,
                          k_layout=layout, v_layout=layout, use_experimental_scheduler=False))
    return out


def _lsce_inputs(rng):
    b, h, v = 256, 256, 512
    return _normal(rng, b, h), rng.integers(0, v, size=b).astype(np.int32), _normal(rng, h, v)


def _tk_lsce(mod, args, run):
    return mod.linear_softmax_cross_entropy_loss_fwd_pallas_mosaic_tpu(
        *args, b_block_size=128, h_block_size=128, v_block_size=256, reduction="none")


def _glu_inputs(rng):
    return _normal(rng, 64, 128), _normal(rng, 128, 2, 64)


def _tk_triton_glu(mod, args, run):
    import jax
    p = jax.lax.Precision.DEFAULT
    out, _ = mod.PallasTritonGatedLinearUnit()._fwd(
        *args, activation=jax.nn.swish, precision=(p, p), return_residuals=False,
        config=mod.Config(block_m=32, block_n=32, block_k=32, num_warps=4, num_stages=2))
    return out


def _tk_mgpu_ragged_sm100(mod, args, run):
    import importlib

    import jax.numpy as jnp
    common = importlib.import_module(f"{TK}.ragged_dot.pallas_mosaic_gpu_common")
    # tokamax's B200 test config; a float32 output is not supported there
    cfg = common.Config(block_m=128, block_n=128, block_k=128, num_stages=2, split_k=1)
    return mod.ragged_dot_gpu_non_quant_blackwell_kernel(*args, out_dtype=jnp.dtype("bfloat16"),
                                                         config=cfg)


def _glu_mgpu_inputs(rng):
    import ml_dtypes
    bf = ml_dtypes.bfloat16
    return _normal(rng, 128, 128).astype(bf), _normal(rng, 128, 2, 128).astype(bf)


def _tk_mgpu_glu(mod, args, run):
    import importlib

    import jax
    common = importlib.import_module(f"{TK}.gated_linear_unit.pallas_mosaic_gpu_common")
    return mod.gated_linear_unit(*args, activation=jax.nn.swish, config=common.Config(
        tile_m=64, tile_n=64, tile_k=64, num_stages=2))


def _glu_mgpu_tiles(tile_m, tile_n=64, tile_k=64):
    """The Mosaic GPU GLU kernel of the case's module with the given tiles."""
    def call(mod, args, run):
        import importlib

        import jax
        common = importlib.import_module(f"{TK}.gated_linear_unit.pallas_mosaic_gpu_common")
        return mod.gated_linear_unit(*args, activation=jax.nn.swish, config=common.Config(
            tile_m=tile_m, tile_n=tile_n, tile_k=tile_k, num_stages=2))
    return call


def _glu_reference(args):
    """swish(x @ w[:, 0]) * (x @ w[:, 1]) in float64."""
    x, w = (np.asarray(a, np.float64) for a in args)
    gate, up = x @ w[:, 0], x @ w[:, 1]
    return [gate / (1 + np.exp(-gate)) * up]


def _triton_attn_inputs(rng):
    return tuple(_normal(rng, 1, 64, 2, 64) for _ in range(3))


def _tk_triton_attention(mod, args, run):
    import jax
    import jax.numpy as jnp
    p = jax.lax.Precision.DEFAULT
    q = args[0]
    out, _ = mod.PallasTritonFlashAttention()._fwd(
        *args, precision=((p, p), (p, p)), logits_dtype=jnp.dtype("float32"),
        logits_scale=q.shape[-1] ** -0.5, bias=None, logits_soft_cap=None,
        mask=mod.Mask(is_causal=True), dropout_mask=None, dropout_rate=0.0, paging_info=None,
        q_indices=None, k_indices=None, normalize_output=True, return_residuals=False,
        config=mod.Config(block_q=32, block_k=32, num_stages=2, num_warps=4))
    return out


def _tk_triton_flex_attention(mod, args, run):
    import jax
    import jax.numpy as jnp
    q, k, v = args
    t, s = q.shape[-3], k.shape[-3]

    def score_mod(scores):          # scaled, plus a relative-position bias (tokamax's test)
        return scores * q.shape[-1] ** -0.5 + (jnp.arange(t)[:, None] - jnp.arange(s))

    def mask_mod(shape):            # causal
        return jnp.arange(t)[:, None] >= jnp.arange(s)

    p = jax.lax.Precision.DEFAULT
    out, _ = mod.PallasTritonFlexAttention()._fwd(
        q, k, v, precision=((p, p), (p, p)), score_mod=score_mod, mask_mod=mask_mod,
        dropout_mask=None,
        dropout_rate=0.0, normalize_output=True, return_residuals=False,
        config=mod.Config(block_q=32, block_k=32, num_stages=2, num_warps=4))
    return out


def _norm_inputs(rng):
    return _normal(rng, 32, 256), _normal(rng, 256), _normal(rng, 256)


def _tk_triton_norm(mod, args, run):
    import importlib
    cfg = importlib.import_module(f"{TK}.normalization.pallas_triton_config")
    out, _ = mod.PallasTritonNormalization()._fwd(
        *args, axis=-1, epsilon=1e-6, scale_offset=0.0, subtract_mean=True,
        return_residuals=False, config=cfg.Config(block_m=8, block_n=None, num_warps=4))
    return out


TOKAMAX = Library(
    name="tokamax", repo="openxla/tokamax", env="PALLAS_TOKAMAX_SRC", package="tokamax",
    requires="absl-py, einshape, jaxtyping, pydantic, qwix (flax, optax, treescope, msgpack, "
             "rich), typeguard 2.13.3, immutabledict, tqdm, xprof (etils, fire, termcolor, six, "
             "protobuf)",
    not_run={
        "ragged_dot (Mosaic TPU v2)": "not given a row yet",
        "ragged_gather, ragged_scatter, ragged_gather_reduce, experimental topk":
            "TPU SparseCore (`tpu_sc`) kernels: a v5e has no SparseCore, and ours lacks the "
            "names listed below",
        "experimental mla, splash attention, causal_conv1d_gated_delta_rule": "not given a row "
                                                                                "yet",
    },
    stand_ins=("pallas_mgpu.inline_mgpu", "pallas_mgpu.RefUnion", "pallas_mgpu.warp_map",
               "pallas_mgpu.ShapeDtypeStruct", "pallas_mgpu.CopyPartition",
               "pallas_mgpu.RefType", "pallas_mgpu.dynamic_scheduling_loop"),
    cases=(
        Case("ragged_dot gmm (Mosaic TPU)", f"{TK}.ragged_dot.pallas_mosaic_tpu_kernel",
             _gmm_inputs, _tk_gmm, reference=_gmm_reference),
        Case("ragged_dot tgmm (Mosaic TPU)", f"{TK}.ragged_dot.pallas_mosaic_tpu_kernel",
             _tgmm_inputs, _tk_tgmm),
        Case("gmm_v2 (experimental, Mosaic TPU)", f"{TK}.experimental.gmm_v2.gmm_v2",
             _gmm_v2_inputs, _tk_gmm_v2, rtol=2e-2),
        Case("flash attention (Mosaic TPU, splash)", f"{TK}.attention.pallas_mosaic_tpu",
             _splash_inputs, _tk_splash_attention, reference=_causal_attention_reference),
        Case("flash attention VJP (Mosaic TPU, splash)", f"{TK}.attention.pallas_mosaic_tpu_vjp",
             _attn_vjp_splash_inputs, _tk_splash_attention_vjp, reference=_attn_vjp_reference),
        Case("linear softmax cross-entropy fwd (Mosaic TPU)",
             f"{TK}.linear_softmax_cross_entropy_loss.pallas_mosaic_tpu_kernel",
             _lsce_inputs, _tk_lsce),
        Case("ragged_dot sm90 (Mosaic GPU)", f"{TK}.ragged_dot.pallas_mosaic_gpu_kernel_sm90",
             _mgpu_ragged_inputs, _tk_mgpu_ragged, kind="mgpu", modes=("interpret", "cuda"),
             rtol=2e-2, returns={"backend.get_default_device": _H100},
             reference=_gmm_reference, ref_rtol=2e-2),
        Case("ragged_dot sm90, ragged contracting dim (Mosaic GPU)",
             f"{TK}.ragged_dot.pallas_mosaic_gpu_kernel_sm90", _ragged_contracting_inputs,
             _tk_mgpu_ragged_contracting, kind="mgpu", modes=("interpret", "cuda"), rtol=2e-2,
             returns={"backend.get_default_device": _H100},
             reference=_ragged_contracting_reference, ref_rtol=2e-2),
        Case("ragged_dot sm90, int8 rhs (Mosaic GPU)",
             f"{TK}.ragged_dot.pallas_mosaic_gpu_kernel_sm90_quant", _mgpu_ragged_inputs,
             _tk_mgpu_ragged_quant, kind="mgpu", modes=("interpret", "cuda"), rtol=2e-2,
             returns={"backend.get_default_device": _H100}),
        Case("ragged_dot sm100, int4 rhs (Mosaic GPU)",
             f"{TK}.ragged_dot.pallas_mosaic_gpu_kernel_sm100_quant", _mgpu_ragged_inputs,
             _tk_mgpu_ragged_quant_sm100, kind="blackwell", modes=("interpret", "cuda"),
             rtol=2e-2, returns={"backend.get_default_device": _B200}),
        Case("ragged_dot sm100, fp8 lhs x int4 rhs (Mosaic GPU)",
             f"{TK}.ragged_dot.pallas_mosaic_gpu_kernel_sm100_fp8_quant", _mgpu_ragged_inputs,
             _sm100_quantized("ragged_dot_gpu_fp8_quant_blackwell_kernel", "float8_e4m3fn"),
             kind="blackwell", modes=("cuda",),
             returns={"backend.get_default_device": _B200}),
        Case("ragged_dot sm100, int8 lhs x int4 rhs (Mosaic GPU)",
             f"{TK}.ragged_dot.pallas_mosaic_gpu_kernel_sm100_i8_quant", _mgpu_ragged_inputs,
             _sm100_quantized("ragged_dot_gpu_i8_quant_blackwell_kernel", "int8"),
             kind="blackwell", modes=("cuda",),
             returns={"backend.get_default_device": _B200}),
        Case("ragged_dot sm100, int4 rhs post-scaled (Mosaic GPU)",
             f"{TK}.ragged_dot.pallas_mosaic_gpu_kernel_sm100_quant_post_scale",
             _mgpu_ragged_inputs,
             _sm100_quantized("ragged_dot_gpu_quant_post_scale_blackwell_kernel", None,
                              block_m=64, collective=False, post_scale=True),
             kind="blackwell", modes=("cuda",),
             returns={"backend.get_default_device": _B200}),
        Case("gated linear unit (Triton)", f"{TK}.gated_linear_unit.pallas_triton",
             _glu_inputs, _tk_triton_glu, kind="gpu", modes=("cuda",),
             returns={"grid.jax.devices": [_H100]}),
        Case("flex_attention (Triton)", f"{TK}.flex_attention.pallas_triton",
             _triton_attn_inputs, _tk_triton_flex_attention, kind="gpu", modes=("cuda",)),
        Case("layer norm (Triton)", f"{TK}.normalization.pallas_triton",
             _norm_inputs, _tk_triton_norm, kind="gpu", modes=("cuda",)),
        Case("ragged_dot (Triton)", f"{TK}.ragged_dot.pallas_triton", _gmm_inputs,
             _tk_triton_ragged, kind="gpu", modes=("cuda",)),
        Case("flash attention (Triton)", f"{TK}.attention.pallas_triton",
             _triton_attn_inputs, _tk_triton_attention, kind="gpu", modes=("cuda",)),
        Case("gated linear unit sm90 (Mosaic GPU)",
             f"{TK}.gated_linear_unit.pallas_mosaic_gpu_kernel_sm90", _glu_mgpu_inputs,
             _tk_mgpu_glu, kind="mgpu", modes=("interpret", "cuda"), rtol=2e-2,
             returns={"backend.get_default_device": _H100}),
        Case("gated linear unit sm80 (Mosaic GPU)",
             f"{TK}.gated_linear_unit.pallas_mosaic_gpu_kernel_sm80", _glu_mgpu_inputs,
             _glu_mgpu_tiles(64), kind="mgpu", modes=("interpret", "cuda"), rtol=2e-2,
             returns={"backend.get_default_device": _H100}, reference=_glu_reference,
             ref_rtol=2e-2),
        Case("gated linear unit sm100 (Mosaic GPU)",
             f"{TK}.gated_linear_unit.pallas_mosaic_gpu_kernel_sm100", _glu_mgpu_inputs,
             _glu_mgpu_tiles(128, 128, 128), kind="blackwell", modes=("interpret", "cuda"),
             rtol=2e-2, reference=_glu_reference, ref_rtol=2e-2),
        Case("ragged_dot sm100 (Mosaic GPU)", f"{TK}.ragged_dot.pallas_mosaic_gpu_kernel_sm100",
             _mgpu_ragged_inputs, _tk_mgpu_ragged_sm100, kind="blackwell",
             modes=("interpret", "cuda"), rtol=2e-2, reference=_gmm_reference, ref_rtol=2e-2),
        Case("attention sm90 (Mosaic GPU)", f"{TK}.attention.pallas_mosaic_gpu_kernel_sm90",
             _attn_inputs, _tk_mgpu_attention, kind="mgpu", modes=("interpret", "cuda"),
             rtol=2e-2),
        Case("attention sm100 (Mosaic GPU)", f"{TK}.attention.pallas_mosaic_gpu_kernel_sm100",
             _attn_sm100_inputs, _tk_mgpu_attention_sm100, kind="blackwell",
             modes=("interpret", "cuda")),
        Case("attention VJP sm90 (Mosaic GPU)",
             f"{TK}.attention.pallas_mosaic_gpu_vjp_kernel_sm90", _attn_vjp_mgpu_inputs,
             _tk_mgpu_attention_vjp, kind="mgpu", modes=("interpret", "cuda"), rtol=2e-2,
             reference=_attn_vjp_reference, ref_rtol=3e-2),
        Case("attention VJP sm90, bias and mask (Mosaic GPU)",
             f"{TK}.attention.pallas_mosaic_gpu_vjp_kernel_sm90", _attn_vjp_mgpu_bias_inputs,
             _tk_mgpu_attention_vjp_bias, kind="mgpu", modes=("cuda",)),
        Case("attention VJP sm100 (Mosaic GPU)",
             f"{TK}.attention.pallas_mosaic_gpu_vjp_kernel_sm100", _attn_vjp_mgpu_inputs,
             _tk_mgpu_attention_vjp_sm100, kind="blackwell", modes=("interpret", "cuda")),
        Case("flash attention VJP (Triton)", f"{TK}.attention.pallas_triton_vjp",
             _attn_vjp_triton_inputs, _tk_triton_attention_vjp, kind="gpu", modes=("cuda",)),
        Case("layer norm VJP (Triton)", f"{TK}.normalization.pallas_triton_vjp",
             _norm_vjp_inputs, _tk_triton_norm_vjp, kind="gpu", modes=("cuda",)),
    ),
)

LIBRARIES = (TOKAMAX, TPU_INFERENCE)
