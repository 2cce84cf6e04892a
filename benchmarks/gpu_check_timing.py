"""Timed rows of ``benchmarks/gpu_check.py``: for each benchmark, one entry per
implementation (ours on Triton, ours on Mosaic GPU, JAX's Pallas on Triton and
on Mosaic GPU, XLA), each a jitted callable on the benchmark's inputs.

Where JAX ships a kernel for the job (``ops/gpu/attention.py``, ``softmax.py``,
``layer_norm.py``, ``hopper_matmul_mgpu.py``, ``attention_mgpu.py``), ours runs
the same file with the Pallas imports swapped (``tools/jax_ops_copy.py``);
otherwise both run one kernel source written here against either ``pl``."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

import gpu_check_cases as C

IMPLS = ("ours-Triton", "ours-MGPU", "JAX-Triton", "JAX-MGPU", "XLA")


@dataclasses.dataclass(frozen=True)
class Bench:
    name: str
    metric: str                           # "TFLOP/s" or "GB/s"
    work: float                           # flops or bytes per call
    inputs: Callable[[np.random.Generator], tuple]
    impls: tuple[tuple[str, str, Callable[[], Callable]], ...]  # (impl, source, make fn)

    def __post_init__(self):
        # rows built from a JAX GPU ops file this JAX does not ship are left out (JAX
        # 0.12.1 dropped its Triton-style attention.py, softmax.py, layer_norm.py, ...)
        object.__setattr__(self, "impls", tuple(
            i for i in self.impls if (m := re.fullmatch(r"JAX's (\w+)\.py", i[1])) is None
            or C.shipped(f"gpu.{m[1]}")))


def kloop_matmul(plm, m, n, k, bm, bn, bk, **call):
    """A (bm, k) x (k, bn) block per program, the k loop inside the kernel
    (JAX's Triton grid axes are all parallel, so no k grid axis here)."""
    def body(x, y, o):
        def step(i, acc):
            return acc + jnp.dot(x[:, plm.ds(i * bk, bk)], y[plm.ds(i * bk, bk), :],
                                 preferred_element_type=jnp.float32)
        o[...] = jax.lax.fori_loop(0, k // bk, step, jnp.zeros((bm, bn), jnp.float32)).astype(o.dtype)
    return plm.pallas_call(
        body, jax.ShapeDtypeStruct((m, n), jnp.bfloat16), grid=(m // bm, n // bn),
        in_specs=[plm.BlockSpec((bm, k), lambda i, j: (i, 0)), plm.BlockSpec((k, bn), lambda i, j: (0, j))],
        out_specs=plm.BlockSpec((bm, bn), lambda i, j: (i, j)), name="kloop_matmul", **call)


def _jax_triton_params(dev, **kw):
    from jax.experimental.pallas import triton as jplt
    return {"compiler_params": jplt.CompilerParams(**kw), "interpret": not dev}


def _interp(dev: bool, ours: bool):
    """The ``interpret=`` a JAX ops file gets: False on a GPU; on CPU Triton's
    interpreter for ours, JAX's interpret mode for JAX's."""
    if dev:
        return False
    if not ours:
        return True
    import pallas_triton
    return pallas_triton.InterpretParams()


def _ours_triton_params(dev, **kw):
    import pallas_triton
    params = pallas_triton.CompilerParams(**kw)
    return ({"compiler_params": params} if dev
            else {"interpret": pallas_triton.InterpretParams(compiler_params=params)})


def _bf16(*shapes):
    return lambda rng: tuple(jnp.asarray(rng.standard_normal(s), jnp.bfloat16) for s in shapes)


def _f32(*shapes):
    return lambda rng: tuple(jnp.asarray(rng.standard_normal(s), jnp.float32) for s in shapes)


def matmul(dev: bool, n: int) -> Bench:
    from jax.experimental import pallas as jpl
    import pallas_frontend as pl
    tiles = dict(bm=128, bn=128, bk=64)

    def hopper(mod):
        cfg = mod.TuningConfig(tile_m=128, tile_n=256, tile_k=64, max_concurrent_steps=4)
        return lambda a, b: mod.matmul(a, b, None, cfg)
    return Bench(f"matmul bf16 {n}^3", "TFLOP/s", 2.0 * n ** 3, _bf16((n, n), (n, n)), (
        ("ours-Triton", "k-loop kernel (here)", lambda: kloop_matmul(
            pl, n, n, n, **tiles, **_ours_triton_params(dev, num_warps=8, num_stages=3))),
        ("ours-Triton", "portable k-grid blocked_matmul", lambda: C.K.blocked_matmul(
            n, n, n, 128, 128, 64, **_ours_triton_params(dev, num_warps=8, num_stages=3))),
        ("ours-MGPU", "portable k-grid blocked_matmul", lambda: C.K.blocked_matmul(
            n, n, n, 128, 128, 64, **C.route("mgpu", dev))),
        ("ours-MGPU", "JAX's hopper_matmul_mgpu.py", lambda: hopper(C.ours_ops().load(
            "gpu.hopper_matmul_mgpu"))),
        ("JAX-Triton", "k-loop kernel (here)", lambda: kloop_matmul(
            jpl, n, n, n, **tiles, **_jax_triton_params(dev, num_warps=8, num_stages=3))),
        ("JAX-MGPU", "JAX's hopper_matmul_mgpu.py", lambda: hopper(C.jax_ops(
            "gpu.hopper_matmul_mgpu"))),
        ("XLA", "jnp.dot", lambda: jnp.dot),
    ))


def _xla_attention(q, k, v):
    return jax.nn.dot_product_attention(q, k, v, implementation="xla")


def _grad(fn):
    return jax.grad(lambda q, k, v: jnp.sum(fn(q, k, v).astype(jnp.float32)), argnums=(0, 1, 2))


def attention(dev: bool, b: int, s: int, h: int, d: int, backward: bool) -> Bench:
    fwd_flops = 4.0 * b * h * s * s * d
    # forward + backward: the backward's 5 matmuls on top of the forward's 2 (x2.5)
    work = fwd_flops * (3.5 if backward else 1.0)

    def mha(mod, ours):
        bs = mod.BlockSizes(block_q=128, block_k=64, block_q_dkv=64, block_kv_dkv=64,
                            block_q_dq=64, block_kv_dq=64)
        return lambda q, k, v: mod.mha(q, k, v, None, sm_scale=1.0 / np.sqrt(d),
                                       block_sizes=bs, interpret=_interp(dev, ours))

    def mgpu(mod):
        cfg = mod.TuningConfig(block_q=64, block_kv=64, max_concurrent_steps=2)
        return lambda q, k, v: mod.attention(q, k, v, cfg)
    wrap = _grad if backward else (lambda f: f)
    return Bench(f"flash attn {'fwd+bwd' if backward else 'fwd'} bf16 b{b} s{s} h{h} d{d}", "TFLOP/s",
                 work, _bf16(*[(b, s, h, d)] * 3), (
        ("ours-Triton", "JAX's attention.py", lambda: wrap(mha(C.ours_ops().load("gpu.attention"), True))),
        ("ours-MGPU", "JAX's attention_mgpu.py", lambda: wrap(mgpu(C.ours_ops().load(
            "gpu.attention_mgpu")))),
        ("JAX-Triton", "JAX's attention.py", lambda: wrap(mha(C.jax_ops("gpu.attention"), False))),
        ("JAX-MGPU", "JAX's attention_mgpu.py", lambda: wrap(mgpu(C.jax_ops("gpu.attention_mgpu")))),
        ("XLA", "jax.nn.dot_product_attention(xla)", lambda: wrap(_xla_attention)),
    ))


def softmax(dev: bool, rows: int, cols: int, mgpu: bool = True) -> Bench:
    def ops(mod, ours):
        return lambda x: mod.softmax(x, axis=-1, interpret=_interp(dev, ours))
    return Bench(f"softmax f32 {rows}x{cols}", "GB/s", 2.0 * rows * cols * 4, _f32((rows, cols)), (
        ("ours-Triton", "JAX's softmax.py", lambda: ops(C.ours_ops().load("gpu.softmax"), True)),
        ("ours-Triton", "portable softmax, rows/64", lambda: C.K.softmax(
            rows, cols, 64, **C.route("triton", dev))),
        *[("ours-MGPU", "portable softmax, rows/64", lambda: C.K.softmax(
            rows, cols, 64, **C.route("mgpu", dev)))][:mgpu],
        ("JAX-Triton", "JAX's softmax.py", lambda: ops(C.jax_ops("gpu.softmax"), False)),
        ("XLA", "jax.nn.softmax", lambda: lambda x: jax.nn.softmax(x, axis=-1)),
    ))


def layer_norm(dev: bool, rows: int, cols: int, mgpu: bool = True) -> Bench:
    def ops(mod, ours):
        return lambda x, w, b: mod.layer_norm(x[None], w, b, interpret=_interp(dev, ours))[0]
    return Bench(f"layer norm f32 {rows}x{cols}", "GB/s", (2.0 * rows * cols + 2 * cols) * 4,
                 _f32((rows, cols), (cols,), (cols,)), (
        ("ours-Triton", "JAX's layer_norm.py", lambda: ops(C.ours_ops().load("gpu.layer_norm"), True)),
        ("ours-Triton", "portable layer_norm, rows/64", lambda: C.K.layer_norm(
            rows, cols, 64, 1e-5, **C.route("triton", dev))),
        *[("ours-MGPU", "portable layer_norm, rows/64", lambda: C.K.layer_norm(
            rows, cols, 64, 1e-5, **C.route("mgpu", dev)))][:mgpu],
        ("JAX-Triton", "JAX's layer_norm.py", lambda: ops(C.jax_ops("gpu.layer_norm"), False)),
        ("XLA", "jnp", lambda: C._ln_ref),
    ))


def benches(dev: bool, tiny: bool) -> list[Bench]:
    """Full sizes on a GPU; ``tiny`` (the CPU dry run) shrinks them to run in interpret mode."""
    if tiny:
        return [matmul(dev, 128), attention(dev, 1, 128, 1, 64, False),
                attention(dev, 1, 128, 1, 64, True), softmax(dev, 64, 256, mgpu=False),
                softmax(dev, 128, 128), layer_norm(dev, 64, 256, mgpu=False),
                layer_norm(dev, 128, 128)]
    return [matmul(dev, 4096), attention(dev, 2, 4096, 8, 128, False),
            attention(dev, 2, 4096, 8, 128, True),
            # Mosaic GPU: a 64-row block of 4096 f32 columns is 1 MiB, over shared memory
            # (227 KiB); 256 columns fit (device-less lowering for sm_90a)
            softmax(dev, 8192, 4096, mgpu=False), softmax(dev, 65536, 256),
            layer_norm(dev, 8192, 4096, mgpu=False), layer_norm(dev, 65536, 256)]
