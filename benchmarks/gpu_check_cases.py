"""The cases of ``benchmarks/gpu_check.py``: numerics (the conformance kernels and
JAX's GPU ops, each with an XLA ``jnp`` reference) and timed rows (matmul, flash
attention forward and backward, softmax, layer norm) per implementation.

Everything here only *builds* callables and inputs; running and timing them is
``gpu_check.py``'s job. ``dev`` is True on a GPU, False for ``--dry-run`` on CPU
(then every kernel goes through its backend's interpret path)."""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import jax_ops_cases  # noqa: E402
from jax_ops_copy import jax_ops, ours_ops, shipped  # noqa: E402

import pallas_frontend as pl  # noqa: E402
from pallas_frontend import registry  # noqa: E402
from pallas_frontend.testing import kernels as K  # noqa: E402

# max |ours - ref| / max |ref| allowed, by operand dtype and the kind of arithmetic.
# float32 dots run as TF32 on Hopper by default (Triton and XLA alike): 10-bit mantissa.
TOL = {("float32", "elementwise"): 1e-5, ("float32", "reduction"): 1e-4,
       ("float32", "dot"): 1e-2, ("bfloat16", "elementwise"): 1e-2,
       ("bfloat16", "reduction"): 2e-2, ("bfloat16", "dot"): 2e-2,
       # float16 keeps 10 mantissa bits (JAX's Mosaic GPU attention takes float16 inputs)
       ("float16", "elementwise"): 1e-3, ("float16", "reduction"): 5e-3,
       ("float16", "dot"): 1e-2}


def route(backend: str, dev: bool) -> dict:
    """pallas_call keywords sending a portable kernel to ``backend``: its device
    path on a GPU ("cuda" is the lowering platform's name; jax says "gpu"), else
    its interpret mode (Triton's interpreter, Mosaic GPU's interpret mode)."""
    return registry.get_backend(backend).call_options("cuda" if dev else "cpu")


def route_name(options: dict) -> str:
    (key, value), = options.items()
    return f"{key}={type(value).__module__.split('.')[0]}.{type(value).__name__}"


@dataclasses.dataclass(frozen=True)
class Numeric:
    """One kernel on fresh inputs against an XLA jnp reference."""
    name: str
    build: Callable[[dict], Callable]      # call options -> the kernel
    inputs: Callable[[np.random.Generator], tuple]
    ref: Callable                          # jnp, same arguments
    kind: str = "elementwise"              # a key of TOL with the inputs' dtype


def _f32(*shapes):
    return lambda rng: tuple(rng.standard_normal(s).astype(np.float32) for s in shapes)


def _ln_ref(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + eps) * w + b


def _ragged_reduce_ref(x, bc):
    lanes = (x.shape[0], bc)
    return (jnp.broadcast_to(x.sum(1, keepdims=True), lanes),
            jnp.broadcast_to(x.max(1, keepdims=True), lanes))


def _position_ref(x, br, bc):
    r, c = jnp.indices(x.shape)
    return x * 2 + (r * x.shape[1] + c), x * (r // br + 1) - c // bc


def conformance_cases(quick: bool) -> list[Numeric]:
    """The portable kernels of ``pallas_frontend.testing.kernels`` (f32)."""
    mm = (128, 256, 384) if quick else (256, 256, 512)
    cases = [
        Numeric("vector_add 1024/128", lambda o: K.vector_add(1024, 128, **o), _f32((1024,), (1024,)),
                jnp.add),
        Numeric("ragged add 1000/128", lambda o: K.vector_add(1000, 128, **o), _f32((1000,), (1000,)),
                jnp.add),
        Numeric(f"blocked_matmul {mm} blocks 128", lambda o: K.blocked_matmul(*mm, 128, 128, 128, **o),
                _f32(mm[::2], mm[2:0:-1]), lambda x, y: jnp.dot(x, y, precision="highest"), "dot"),
        Numeric(f"blocked_matmul {mm} blocks 32x128", lambda o: K.blocked_matmul(*mm, 32, 128, 128, **o),
                _f32(mm[::2], mm[2:0:-1]), lambda x, y: jnp.dot(x, y, precision="highest"), "dot"),
        Numeric(f"scratch_matmul {mm}", lambda o: K.scratch_matmul(*mm, 128, 128, 128, **o),
                _f32(mm[::2], mm[2:0:-1]), lambda x, y: jnp.dot(x, y, precision="highest"), "dot"),
        Numeric("softmax 128x64 rows/8", lambda o: K.softmax(128, 64, 8, **o), _f32((128, 64)),
                lambda x: jax.nn.softmax(x, axis=-1), "reduction"),
        Numeric("softmax 128x128 rows/64", lambda o: K.softmax(128, 128, 64, **o), _f32((128, 128)),
                lambda x: jax.nn.softmax(x, axis=-1), "reduction"),
        Numeric("layer_norm 128x128 rows/64", lambda o: K.layer_norm(128, 128, 64, 1e-5, **o),
                _f32((128, 128), (128,), (128,)), _ln_ref, "reduction"),
        Numeric("transpose_2d 256x384", lambda o: K.transpose_2d(256, 384, 128, 128, **o),
                _f32((256, 384)), lambda x: x.T),
        Numeric("position_ragged 100x200", lambda o: K.position_ragged(100, 200, 64, 128, **o),
                _f32((100, 200)), functools.partial(_position_ref, br=64, bc=128)),
        Numeric("ragged_row_reduction 100x300", lambda o: K.ragged_row_reduction(100, 300, 64, 128, **o),
                _f32((100, 300)), functools.partial(_ragged_reduce_ref, bc=128), "reduction"),
        Numeric("aliased_half_update 1024", lambda o: K.aliased_half_update(1024, 128, **o),
                _f32((1024,)), lambda x: jnp.concatenate([x[:512] * 2, x[512:]])),
        Numeric("aliased_strided_update 256x128", lambda o: K.aliased_strided_update(256, 128, 64, **o),
                _f32((256, 128)), lambda x: x.reshape(2, 2, 64, 128).at[:, 0].add(1).reshape(256, 128)),
    ]
    return [cases[i] for i in (0, 1, 3, 5, 7)] if quick else cases


# --- JAX's GPU ops (tools/jax_ops_cases.py) on our copy of the ops tree ------------

class NoInterpret:
    """A module whose functions get ``interpret=<value>`` in place of the
    ``interpret=True`` the CPU cases pass (False on a GPU: the device path)."""

    def __init__(self, module, interpret):
        self._module, self._interpret = module, interpret

    def __getattr__(self, name):
        attr = getattr(self._module, name)
        if not callable(attr) or isinstance(attr, type):
            return attr

        @functools.wraps(attr)
        def call(*args, **kwargs):
            if "interpret" in kwargs:
                kwargs["interpret"] = self._interpret
            return attr(*args, **kwargs)
        return call


def _paged_ref(q, k_pages, v_pages, tables, lengths):
    hkv, _, page, d = k_pages.shape
    b, pages = tables.shape
    k = k_pages[:, tables].reshape(hkv, b, pages * page, d).transpose(1, 2, 0, 3)
    v = v_pages[:, tables].reshape(hkv, b, pages * page, d).transpose(1, 2, 0, 3)
    return jax_ops("gpu.paged_attention").paged_attention_reference(q, k, v, lengths)


def _norm_ref(fn):
    def ref(x, w, b):
        return jax.vmap(lambda r: fn(r, w, b))(x)
    return ref


def ops_reference(name: str) -> Callable:
    """The XLA jnp reference of a ``jax_ops_cases`` case (same arguments)."""
    att = lambda: jax_ops("gpu.attention")              # noqa: E731
    dec = lambda: jax_ops("gpu.decode_attention")       # noqa: E731
    refs = {
        "gpu.attention.mha": lambda q, k, v: att().mha_reference(q, k, v, None),
        "gpu.attention.mha(causal)": lambda q, k, v: att().mha_reference(q, k, v, None, causal=True),
        "gpu.layer_norm": _norm_ref(lambda x, w, b: _ln_ref(x, w, b)),
        "gpu.rms_norm": _norm_ref(lambda x, w, b: x * jax.lax.rsqrt(
            (x * x).mean(-1, keepdims=True) + 1e-5) * w + b),
        "gpu.softmax": lambda x: jax.nn.softmax(x, axis=-1),
        "gpu.decode_attention.mqa": lambda q, k, v, s: dec().mqa_reference(q, k, v),
        "gpu.decode_attention.mqa(start_idx)": lambda q, k, v, s: dec().mqa_reference(
            q, k, v, start_idx=s),
        "gpu.decode_attention.gqa": lambda q, k, v: dec().gqa_reference(q, k, v),
        "gpu.paged_attention": _paged_ref,
        "gpu.hopper_matmul_mgpu": lambda a, b: jnp.dot(
            a, b, preferred_element_type=jnp.float32).astype(a.dtype),
        "gpu.attention_mgpu": lambda q, k, v: jax_ops("gpu.attention_mgpu").attention_reference(
            q, k, v).astype(q.dtype),
        "gpu.ragged_dot_mgpu": lambda a, b, g: jax.lax.ragged_dot(
            a, b, g, preferred_element_type=jnp.float32).astype(a.dtype),
    }
    return refs[name]


def ops_cases():
    """(case, backend) for JAX's Triton-style and Mosaic GPU ops the installed JAX ships."""
    return ([(c, "triton") for c in jax_ops_cases.GPU_CASES if shipped(c.module)]
            + [(c, "mgpu") for c in jax_ops_cases.MGPU_CASES])


def ops_module(case, dev: bool):
    """Our copy of the case's module, called on the device path (dev) or, on CPU,
    through Triton's interpreter (Triton-style ops; Mosaic GPU ops run under
    ``force_gpu_interpret_mode``, set by the caller)."""
    mod = ours_ops().load(case.module)
    if case.kind == "mgpu":
        return mod
    import pallas_triton
    return NoInterpret(mod, False if dev else pallas_triton.InterpretParams())
