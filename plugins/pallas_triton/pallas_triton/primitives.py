"""Triton-specific kernel primitives: memory ops with hints, atomics, and hints/escapes.

Each is a ``kernel_primitive(owner="triton")`` with an abstract eval, a code
emitter, and either a JAX lowering (pure ops) or an interpret rule (Ref ops)
so the frontend's reference interpreter runs kernels that use them. The Ref
ones live in ``load_store.py`` and ``atomics.py`` (re-exported here); this
module holds the pure ones and ``dot``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import mlir

from pallas_frontend.backend_api import (
    def_pure_primitive, kernel_primitive, register_interpret_rule)
from pallas_triton.emitters import register
from pallas_triton.errors import unsupported
from pallas_triton.primitive_refs import OWNER
# the Ref primitives: the package's public names are imported from here
from pallas_triton.atomics import (  # noqa: F401
    atomic_add, atomic_and, atomic_cas, atomic_cas_p, atomic_max, atomic_min, atomic_or,
    atomic_rmw_p, atomic_sub, atomic_xchg, atomic_xor)
from pallas_triton.load_store import load, load_p, store, store_p  # noqa: F401


# --- pure primitives -------------------------------------------------------------------

def _pure(name, impl, abstract_eval=None):
    prim = kernel_primitive(name, owner=OWNER)
    def_pure_primitive(prim, impl=impl, abstract_eval=abstract_eval or (
        lambda x, **_: jax.core.ShapedArray(x.shape, x.dtype)))
    register_interpret_rule(prim)      # pure: the frontend interpreter runs its lowering
    return prim


approx_tanh_p = _pure("triton_approx_tanh", lambda x: jnp.tanh(x))


@jax.custom_jvp
def approx_tanh(x):
    """tanh by the hardware approximation (``tanh.approx.f32`` on CUDA)."""
    return approx_tanh_p.bind(x)


@approx_tanh.defjvp
def _approx_tanh_jvp(primals, tangents):
    y = approx_tanh(primals[0])
    return y, (1.0 - y * y) * tangents[0]


@register("triton_approx_tanh")
def _emit_approx_tanh(w, eqn, ins):
    if w.target == "cuda" and np.dtype(eqn.invars[0].aval.dtype) == np.float32:
        return [f'tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=r,r", [{ins[0]}], '
                "dtype=tl.float32, is_pure=True, pack=1)"]
    from pallas_triton.emitters import EMITTERS
    return EMITTERS["tanh"](w, eqn, ins)   # the interpreter and ROCm: the exact formula


max_contiguous_p = _pure("max_contiguous", lambda x, *, values: x)


def max_contiguous(x, values):
    """Hints that the first ``values`` elements of ``x`` are contiguous."""
    values = tuple(values) if isinstance(values, (list, tuple)) else (int(values),)
    return max_contiguous_p.bind(x, values=values)


@register("max_contiguous")
def _emit_max_contiguous(w, eqn, ins):
    values = list(eqn.params["values"])
    if not eqn.invars[0].aval.shape:
        return [ins[0]]
    return [f"tl.max_contiguous({ins[0]}, {values if len(values) > 1 else values[0]})"]


inline_asm_p = kernel_primitive("triton_elementwise_inline_asm", owner=OWNER, multiple_results=True)


def elementwise_inline_asm(asm: str, *, args, constraints: str, pack: int, result_shape_dtypes):
    """Inline PTX/AMDGCN applied elementwise (``tl.inline_asm_elementwise``).
    Cannot run in any interpreter."""
    return inline_asm_p.bind(*args, asm=asm, constraints=constraints, pack=pack,
                             results=tuple((tuple(r.shape), np.dtype(r.dtype))
                                           for r in result_shape_dtypes))


def _inline_asm_impl(*args, asm, **_):
    raise NotImplementedError(
        f"pallas_triton.elementwise_inline_asm ({asm!r}) runs only on a GPU: neither the frontend "
        "interpreter nor Triton's interpreter can execute inline assembly.")


inline_asm_p.def_impl(_inline_asm_impl)
inline_asm_p.def_abstract_eval(
    lambda *args, results, **_: [jax.core.ShapedArray(s, d) for s, d in results])
mlir.register_lowering(inline_asm_p, mlir.lower_fun(_inline_asm_impl, multiple_results=True))
register_interpret_rule(inline_asm_p)         # its lowering raises a clear error on the host


@register("triton_elementwise_inline_asm")
def _emit_inline_asm(w, eqn, ins):
    if w.target == "interpret":
        raise unsupported("elementwise_inline_asm under Triton's interpreter")
    from pallas_triton.emitters import tl_dtype
    dtypes = [tl_dtype(d) for _, d in eqn.params["results"]]
    dt = dtypes[0] if len(dtypes) == 1 else f"({', '.join(dtypes)},)"
    expr = (f"tl.inline_asm_elementwise({eqn.params['asm']!r}, {eqn.params['constraints']!r}, "
            f"[{', '.join(ins)}], dtype={dt}, is_pure=True, pack={eqn.params['pack']})")
    if len(dtypes) == 1:
        return [expr]
    t = w.bind(expr)
    return [f"{t}[{k}]" for k in range(len(dtypes))]


debug_barrier_p = kernel_primitive("triton_debug_barrier", owner=OWNER, multiple_results=True)
debug_barrier_p.def_impl(lambda: [])
debug_barrier_p.def_abstract_eval(lambda: [])
mlir.register_lowering(debug_barrier_p, lambda ctx: [])
register_interpret_rule(debug_barrier_p)      # a no-op in a sequential interpreter


def debug_barrier():
    """Synchronizes all threads of the program (``tl.debug_barrier``); a no-op when interpreted."""
    debug_barrier_p.bind()


@register("triton_debug_barrier")
def _emit_debug_barrier(w, eqn, ins):
    w.line("tl.debug_barrier()")
    return []


# --- dot (JAX's pallas.triton.dot signature) -------------------------------------------

def dot(a, b, trans_a: bool = False, trans_b: bool = False, allow_tf32: bool | None = None,
        precision=None):
    """``a @ b`` of two 2-D arrays, either transposed first, accumulated in float32
    (int32 for integers, float64 for float64), as ``jax.experimental.pallas.triton.dot``.

    ``allow_tf32=True`` is ``Precision.HIGH`` (tf32 on the GPU), ``False`` is
    ``HIGHEST`` (exact float32); it excludes ``precision``.
    """
    a, b = jnp.asarray(a), jnp.asarray(b)
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"pallas_triton.dot takes 2-D arrays; got shapes {a.shape} and {b.shape}. "
                         "Reshape first, or use jax.lax.dot_general for batched products.")
    if allow_tf32 is not None:
        if precision is not None:
            raise ValueError("pallas_triton.dot: pass allow_tf32= or precision=, not both")
        precision = lax.Precision.HIGH if allow_tf32 else lax.Precision.HIGHEST
    dtype = jnp.promote_types(a.dtype, b.dtype)
    if jnp.issubdtype(dtype, jnp.integer) or dtype == jnp.bool_:
        out = jnp.int32
    elif dtype == jnp.float64:
        out = jnp.float64
    else:
        out = jnp.float32
    dims = (((0 if trans_a else 1,), (1 if trans_b else 0,)), ((), ()))
    return lax.dot_general(a, b, dimension_numbers=dims, precision=precision,
                           preferred_element_type=out)
