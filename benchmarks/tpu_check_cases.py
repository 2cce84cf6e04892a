"""What ``benchmarks/tpu_check.py`` runs on a TPU: each case as ours, JAX's
Pallas and plain jnp (XLA), plus autotune candidates of ours.

A ``Case`` holds functions of this machine's JAX (0.12): ``inputs()`` makes the
operands on the device (so nothing large travels to a TPU host), ``sides``
maps a side ("ours", "jax", "xla") to the function it times, ``tune`` maps an
autotune candidate's label to ours with those launch parameters (its
``default`` label is JAX's default choice). ``ref`` names the NumPy float64
reference: a function of ``benchmarks/tpu_check_refs.py`` or, for the
conformance kernels, ``conformance:<name>_ref`` of the conformance suite.

Sizes: "full" for the chip, "small" for the dry run on CPU (the same code).
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import importlib
import importlib.util
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import jax_ops_copy  # noqa: E402  (JAX's ops/ with only the Pallas imports swapped)

# The conformance kernels' file, read with its Pallas import pointed at JAX's
# (the JAX side of the same kernel source).
CONFORMANCE_FILE = ROOT / "pallas_frontend" / "testing" / "kernels.py"
OURS_IMPORT = "import pallas_frontend as pl"
JAX_IMPORT = "from jax.experimental import pallas as pl"


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    group: str                                  # conformance | jax-ops | matmul
    inputs: Callable[[], tuple]                 # () -> device arrays
    ref: str
    sides: dict[str, Callable[..., Any]]
    ref_kwargs: dict = dataclasses.field(default_factory=dict)
    flops: float = 0.0                          # per call; 0: report GB/s instead
    bytes: float = 0.0                          # 0 with flops 0: the operands' and results' size
    rtol: float = 2e-2                          # relative to the reference's max |value|
    tune: dict[str, Callable[..., Any]] = dataclasses.field(default_factory=dict)
    default: str = ""                           # the label in ``tune`` of JAX's defaults


def _normal(seed: int, *specs):
    """Operands of the given (shape, dtype), standard normal, from ``seed``."""
    keys = jax.random.split(jax.random.key(seed), len(specs))
    return tuple(jax.random.normal(k, shape, jnp.float32).astype(dtype)
                 for k, (shape, dtype) in zip(keys, specs))


def traffic_bytes(case: Case) -> float:
    """Bytes a call must move at least: ``case.bytes``, else its operands and results."""
    if case.bytes or case.flops:
        return case.bytes
    args = jax.eval_shape(case.inputs)
    outs = jax.eval_shape(case.sides["xla"], *args)
    return float(sum(a.size * a.dtype.itemsize for a in jax.tree_util.tree_leaves((args, outs))))


# --- conformance kernels: the suite's own source under both Pallas APIs ------------

def swapped_conformance_source() -> str:
    """The conformance kernels' source with its Pallas import pointed at JAX's."""
    source = CONFORMANCE_FILE.read_text()
    if OURS_IMPORT not in source:
        raise RuntimeError(f"{CONFORMANCE_FILE} no longer has {OURS_IMPORT!r}")
    return source.replace(OURS_IMPORT, JAX_IMPORT)


@functools.cache
def conformance_modules():
    """(ours, JAX's): pallas_frontend.testing.kernels and its swapped copy."""
    from pallas_frontend.testing import kernels as ours
    folder = Path(tempfile.mkdtemp(prefix="tpu_check_"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    path = folder / "tpu_check_jax_kernels.py"
    path.write_text(swapped_conformance_source())
    spec = importlib.util.spec_from_file_location("tpu_check_jax_kernels", path)
    theirs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(theirs)
    return ours, theirs


def _conformance_case(name, build, args, operands, xla, ref_kwargs=None, seed=0, ref=None,
                      on_cpu=False, rtol=1e-4):
    ours, theirs = conformance_modules()
    # JAX's pallas_call runs on a CPU only when told to interpret (the dry run)
    jax_call = {"interpret": True} if on_cpu else {}
    specs = [(s, jnp.float32) for s in operands]
    return Case(
        name=f"conformance.{name}", group="conformance",
        inputs=functools.partial(_normal, seed, *specs),
        ref=ref or f"conformance:{build}_ref", ref_kwargs=ref_kwargs or {},
        sides={"ours": getattr(ours, build)(*args),
               "jax": getattr(theirs, build)(*args, **jax_call),
               "xla": xla},
        rtol=rtol)


def _layer_norm_xla(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + eps) * w + b


def conformance_cases(size, on_cpu=False):
    n, rows, cols = (1 << 22, 4096, 1024) if size == "full" else (1 << 12, 64, 256)
    block = min(n, 1 << 16)
    br = min(rows, 256)
    mm = 1024 if size == "full" else 256
    _conformance = functools.partial(_conformance_case, on_cpu=on_cpu)
    return [
        _conformance("vector_add", "vector_add", (n, block), [(n,), (n,)],
                     lambda x, y: x + y),
        _conformance("softmax", "softmax", (rows, cols, br), [(rows, cols)],
                     lambda x: jax.nn.softmax(x, axis=-1)),
        _conformance("layer_norm", "layer_norm", (rows, cols, br, 1e-5),
                     [(rows, cols), (cols,), (cols,)], _layer_norm_xla, {"eps": 1e-5}),
        _conformance("transpose_2d", "transpose_2d", (rows, cols, br, min(cols, 256)),
                     [(rows, cols)], lambda x: x.T, ref="transpose"),
        _conformance("blocked_matmul", "blocked_matmul", (mm, mm, mm, 256, 256, 256),
                     [(mm, mm), (mm, mm)],
                     lambda x, y: jnp.dot(x, y, preferred_element_type=jnp.float32),
                     # a TPU's default f32 dot rounds operands to bf16 (one MXU pass), in
                     # XLA's jnp.dot as in a kernel's: both measured 2.4e-3 at K=1024 on v5e
                     ref="matmul", rtol=1e-2),
    ]


# --- JAX's shipped TPU kernels, ours = JAX's file with only the imports changed ----

def _ops(name):
    """(ours, JAX's) module ``name`` of jax/experimental/pallas/ops/."""
    return (jax_ops_copy.ours_ops().load(name),
            importlib.import_module(f"jax.experimental.pallas.ops.{name}"))


def _xla_attention(q, k, v, causal=False, sm_scale=1.0):
    s = jnp.einsum("...qd,...kd->...qk", q, k, preferred_element_type=jnp.float32) * sm_scale
    if causal:
        ql, kl = s.shape[-2:]
        s = jnp.where(jnp.tril(jnp.ones((ql, kl), bool), kl - ql), s, -jnp.inf)
    p = jax.nn.softmax(s, axis=-1)
    return jnp.einsum("...qk,...kd->...qd", p.astype(v.dtype), v,
                      preferred_element_type=jnp.float32).astype(q.dtype)


def _vjp(fn):
    """(q, k, v, do) -> (dq, dk, dv) of ``fn(q, k, v)``: the forward and the backward."""
    def grads(q, k, v, do):
        _, pullback = jax.vjp(fn, q, k, v)
        return pullback(do)
    return grads


def _flash_blocks(mod, fwd=128, bwd=128):
    return mod.BlockSizes(block_q=fwd, block_k_major=fwd, block_k=fwd, block_b=1,
                          block_q_major_dkv=bwd, block_k_major_dkv=bwd, block_k_dkv=bwd,
                          block_q_dkv=bwd, block_k_major_dq=bwd, block_k_dq=bwd,
                          block_q_dq=bwd)


FLASH_TUNE = {f"fwd{f}/bwd{b}": (f, b) for f, b in
              [(128, 128), (256, 256), (512, 256), (512, 512), (1024, 512), (512, 1024)]}


def flash_cases(size):
    b, h, s, d = (2, 8, 2048, 128) if size == "full" else (1, 2, 256, 128)
    scale = d ** -0.5
    ours, theirs = _ops("tpu.flash_attention")
    spec = ((b, h, s, d), jnp.bfloat16)

    def fwd(mod, blocks=(128, 128)):
        return functools.partial(mod.flash_attention, causal=False, sm_scale=scale,
                                 block_sizes=_flash_blocks(mod, *blocks))
    tune = {k: v for k, v in FLASH_TUNE.items() if max(v) <= s}
    attn_flops = 4.0 * b * h * s * s * d
    kw = {"causal": False, "sm_scale": scale}
    # JAX's default BlockSizes (BlockSizes.get_default) are all 128: "fwd128/bwd128"
    return [
        Case("ops.tpu.flash_attention", "jax-ops", functools.partial(_normal, 1, *[spec] * 3),
             "attention", {"ours": fwd(ours), "jax": fwd(theirs),
                           "xla": functools.partial(_xla_attention, **kw)},
             ref_kwargs=kw, flops=attn_flops,
             tune={k: fwd(ours, v) for k, v in tune.items()}, default="fwd128/bwd128"),
        Case("ops.tpu.flash_attention.bwd", "jax-ops",
             functools.partial(_normal, 2, *[spec] * 4), "attention_bwd",
             {"ours": _vjp(fwd(ours)), "jax": _vjp(fwd(theirs)),
              "xla": _vjp(functools.partial(_xla_attention, **kw))},
             ref_kwargs=kw, flops=3.5 * attn_flops,
             tune={k: _vjp(fwd(ours, v)) for k, v in tune.items()}, default="fwd128/bwd128"),
    ]


def _page_inputs(seed, batch, heads, kv_heads, d, page, pages_per_seq):
    total = batch * pages_per_seq
    q, kp, vp = _normal(seed, ((batch, heads, d), jnp.bfloat16),
                        ((kv_heads, total, page, d), jnp.bfloat16),
                        ((kv_heads, total, page, d), jnp.bfloat16))
    k1, k2 = jax.random.split(jax.random.key(seed + 100))
    lengths = jax.random.randint(k1, (batch,), 1, page * pages_per_seq + 1, jnp.int32)
    indices = jax.random.permutation(k2, total).astype(jnp.int32).reshape(batch, pages_per_seq)
    return q * jnp.bfloat16(d ** -0.5), kp, vp, lengths, indices


def _xla_paged(q, k_pages, v_pages, lengths, page_indices):
    kv_heads, _, page, d = k_pages.shape
    batch, heads, _ = q.shape
    k = k_pages[:, page_indices].reshape(kv_heads, batch, -1, d)    # (kvh, b, seq, d)
    v = v_pages[:, page_indices].reshape(kv_heads, batch, -1, d)
    qg = q.reshape(batch, kv_heads, heads // kv_heads, d)
    s = jnp.einsum("bhgd,hbsd->bhgs", qg, k, preferred_element_type=jnp.float32)
    valid = jnp.arange(k.shape[2])[None, None, None, :] < lengths[:, None, None, None]
    p = jax.nn.softmax(jnp.where(valid, s, -jnp.inf), axis=-1)
    o = jnp.einsum("bhgs,hbsd->bhgd", p.astype(v.dtype), v, preferred_element_type=jnp.float32)
    return o.reshape(batch, heads, d).astype(q.dtype)


def paged_cases(size):
    dims = (16, 32, 8, 128, 16, 128) if size == "full" else (2, 8, 2, 128, 16, 8)
    batch, heads, kv_heads, d, page, pages_per_seq = dims
    ours, theirs = _ops("tpu.paged_attention.paged_attention_kernel")

    def call(mod, per_block):
        return functools.partial(mod.paged_attention, pages_per_compute_block=per_block)
    blocks = [p for p in (4, 8, 16, 32, 64) if pages_per_seq % p == 0]
    kv_bytes = 2.0 * kv_heads * batch * pages_per_seq * page * d * 2
    # JAX ships no default; its paged attention tests and benchmark use 4 pages a block
    return [Case("ops.tpu.paged_attention", "jax-ops",
                 functools.partial(_page_inputs, 3, *dims), "paged_attention",
                 {"ours": call(ours, 4), "jax": call(theirs, 4), "xla": _xla_paged},
                 bytes=kv_bytes, tune={f"pages{p}": call(ours, p) for p in blocks},
                 default="pages4")]


def _gmm_inputs(seed, m, k, n, groups):
    lhs, rhs = _normal(seed, ((m, k), jnp.bfloat16), ((groups, k, n), jnp.bfloat16))
    cuts = jnp.sort(jax.random.randint(jax.random.key(seed + 100), (groups - 1,), 0, m + 1))
    edges = jnp.concatenate([jnp.zeros(1, jnp.int32), cuts.astype(jnp.int32),
                             jnp.full(1, m, jnp.int32)])
    return lhs, rhs, jnp.diff(edges)


# (1024, 512, 1024) overflows v5e's scoped VMEM (compile error)
GMM_TUNE = [(128, 128, 128), (256, 256, 256), (512, 512, 512), (256, 512, 512),
            (512, 1024, 1024), (1024, 512, 512), (512, 2048, 512)]


def gmm_cases(size):
    m, k, n, groups = (8192, 2048, 2048, 8) if size == "full" else (256, 256, 256, 4)
    ours, theirs = _ops("tpu.megablox.gmm")

    def call(mod, tiling):
        return functools.partial(mod.gmm, tiling=tiling)
    tune = [t for t in GMM_TUNE if t[1] <= k and t[2] <= n]
    return [Case("ops.tpu.megablox.gmm", "jax-ops",
                 functools.partial(_gmm_inputs, 4, m, k, n, groups), "grouped_matmul",
                 {"ours": call(ours, (128, 128, 128)), "jax": call(theirs, (128, 128, 128)),
                  "xla": lambda lhs, rhs, gs: jax.lax.ragged_dot(
                      lhs, rhs, gs, preferred_element_type=jnp.float32)},
                 flops=2.0 * m * k * n,
                 tune={"x".join(map(str, t)): call(ours, t) for t in tune},
                 default="128x128x128")]


def splash_cases(size):
    h, s, d = (8, 2048, 128) if size == "full" else (2, 256, 128)
    ours, theirs = _ops("tpu.splash_attention.splash_attention_kernel")

    def call(mod):
        masks = mod.mask_lib.MultiHeadMask(tuple(mod.mask_lib.CausalMask((s, s))
                                                 for _ in range(h)))
        return mod.make_splash_mha_single_device(masks, block_sizes=mod.BlockSizes.get_default())
    spec = ((h, s, d), jnp.bfloat16)
    return [Case("ops.tpu.splash_attention(causal)", "jax-ops",
                 functools.partial(_normal, 5, *[spec] * 3), "attention",
                 {"ours": call(ours), "jax": call(theirs),
                  "xla": functools.partial(_xla_attention, causal=True)},
                 ref_kwargs={"causal": True}, flops=2.0 * h * s * s * d)]


# (2048, 1024, 256) and (1024, 2048, 256) overflow v5e's scoped VMEM (compile error)
MATMUL_TUNE = [(512, 512, 256), (512, 512, 512), (512, 1024, 512), (1024, 512, 512),
               (1024, 1024, 256), (1024, 1024, 512), (512, 2048, 256), (2048, 512, 256)]


def matmul_cases(size):
    ours, theirs = _ops("tpu.matmul")
    dims = (4096, 8192) if size == "full" else (256,)
    out = []
    for n in dims:
        spec = ((n, n), jnp.bfloat16)
        inputs = functools.partial(_normal, 6, spec, spec)

        def call(mod, bm, bn, bk):
            return functools.partial(mod.matmul, block_shape=(bm, bn), block_k=bk)
        blocks = [(512, 512, 512), (1024, 1024, 512)] if size == "full" else [(128, 128, 128)]
        for bm, bn, bk in blocks:
            out.append(Case(
                f"ops.tpu.matmul {n}^3 bf16 block {bm}x{bn}x{bk}", "matmul", inputs, "matmul",
                {"ours": call(ours, bm, bn, bk), "jax": call(theirs, bm, bn, bk),
                 "xla": jnp.dot}, flops=2.0 * n ** 3))
        if n == dims[-1]:
            tune = [t for t in MATMUL_TUNE if max(t) <= n] or [(128, 128, 128)]
            last = out[-len(blocks)]
            out[-len(blocks)] = dataclasses.replace(
                last, tune={"x".join(map(str, t)): call(ours, *t) for t in tune},
                default="x".join(map(str, tune[0])))
    return out


# v5e has 128 MiB of VMEM; a kernel gets 16 MiB of it unless its CompilerParams
# ask for more. JAX's ops/tpu/matmul.py cannot ask, and its fastest blocks on a
# v5e need more (1024x1024x2048: 24 MiB); this matmul takes the limit.
RAISED_VMEM = 96 << 20


def blocked_matmul(pl, pltpu):
    """A fresh blocked matmul over ``pl``/``pltpu`` (ours' or JAX's Pallas): grid
    (i, j, k) with k innermost, an f32 accumulator in VMEM scratch, written on the
    last k, and ``vmem_limit_bytes`` among its launch parameters."""
    def kernel(x_ref, y_ref, o_ref, acc_ref):
        @pl.when(pl.program_id(2) == 0)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)
        acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
        def _():
            o_ref[...] = acc_ref[...].astype(o_ref.dtype)

    @functools.partial(jax.jit, static_argnames=("block_shape", "block_k", "vmem_limit_bytes"))
    def matmul(x, y, *, block_shape, block_k, vmem_limit_bytes=None):
        bm, bn = block_shape
        (m, k), n = x.shape, y.shape[1]
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct((m, n), x.dtype),
            grid=(m // bm, n // bn, k // block_k),
            in_specs=[pl.BlockSpec((bm, block_k), lambda i, j, kk: (i, kk)),
                      pl.BlockSpec((block_k, bn), lambda i, j, kk: (kk, j))],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
            scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
            compiler_params=pltpu.CompilerParams(
                dimension_semantics=("parallel", "parallel", "arbitrary"),
                vmem_limit_bytes=vmem_limit_bytes))(x, y)
    return matmul


def pallas_modules(side: str):
    """(pl, pltpu) of ``side``: "ours" (pallas_frontend, pallas_tpu) or "jax"."""
    if side == "ours":
        return importlib.import_module("pallas_frontend"), importlib.import_module("pallas_tpu")
    return (importlib.import_module("jax.experimental.pallas"),
            importlib.import_module("jax.experimental.pallas.tpu"))


def raised_vmem_matmul_cases(size):
    n = 8192 if size == "full" else 256
    block = (1024, 1024, 512) if size == "full" else (128, 128, 128)
    spec = ((n, n), jnp.bfloat16)
    sides = {side: functools.partial(blocked_matmul(*pallas_modules(side)),
                                     block_shape=block[:2], block_k=block[2],
                                     vmem_limit_bytes=RAISED_VMEM)
             for side in ("ours", "jax")}
    return [Case(f"matmul {n}^3 bf16, VMEM limit {RAISED_VMEM >> 20} MiB, block "
                 f"{'x'.join(map(str, block))}", "matmul",
                 functools.partial(_normal, 7, spec, spec), "matmul",
                 sides | {"xla": jnp.dot}, flops=2.0 * n ** 3)]


def cases(size: str = "full", on_cpu: bool = False) -> list[Case]:
    """Every case; ``on_cpu``: for the dry run (JAX's side of the conformance
    kernels interpreted, as JAX requires on a CPU)."""
    return [*conformance_cases(size, on_cpu), *flash_cases(size), *paged_cases(size),
            *gmm_cases(size), *splash_cases(size), *matmul_cases(size),
            *raised_vmem_matmul_cases(size)]
