"""Triton-specific kernel primitives: memory ops with hints, atomics, and hints/escapes.

Each is a ``kernel_primitive(owner="triton")`` with an abstract eval, a code
emitter, and either a JAX lowering (pure ops) or an interpret rule (Ref ops)
so the frontend's reference interpreter runs kernels that use them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import mlir

import pallas_frontend as pl
from pallas_frontend.backend_api import (
    def_pure_primitive, kernel_primitive, ref_effects, register_interpret_rule)
from pallas_triton.codegen import resolve_indexer
from pallas_triton.emitters import register
from pallas_triton.errors import unsupported

OWNER = "triton"


# --- Ref plumbing shared by load/store/atomics ---------------------------------------

def _split_ref(ref):
    """(underlying ref, transforms) of a Ref or ``ref.at[...]`` view."""
    if hasattr(ref, "transforms") and hasattr(ref, "ref"):
        return ref.ref, tuple(ref.transforms)
    return ref, ()


def _indexed_shape(ref_aval_shape, transforms):
    if not transforms:
        return tuple(ref_aval_shape)
    return tuple(transforms[-1].get_indexer_shape())


def _array_indices(nd):
    """The indices of a gather/scatter access (every index an array or scalar), or None."""
    if nd is None or not getattr(nd, "int_indexer_shape", ()):
        return None
    if any(isinstance(ix, pl.Slice) for ix in nd.indices):
        raise NotImplementedError("pallas_triton.load/store mixing integer-array indices with "
                                  "slices: index every dim with an array (they broadcast)")
    return tuple(jnp.asarray(ix, jnp.int32) for ix in nd.indices)


def _read_indexed(x, nd):
    if nd is None:
        return x
    idx = _array_indices(nd)
    if idx is not None:     # masked-off lanes may point outside: clip, the mask discards them
        return x.at[idx].get(mode="clip")
    for axis in range(len(nd.indices) - 1, -1, -1):
        ix = nd.indices[axis]
        if isinstance(ix, pl.Slice):
            span = (ix.size - 1) * ix.stride + 1
            x = _window(x, axis, ix.start, span)
            if ix.stride != 1:
                x = lax.slice_in_dim(x, 0, span, ix.stride, axis)
        else:
            x = lax.dynamic_index_in_dim(x, ix, axis, keepdims=False)
    return x


def _fill(dtype):
    """What a lane outside the Ref reads (NaN or the lowest int: visible if a mask misses)."""
    if jnp.issubdtype(dtype, jnp.inexact):
        return jnp.array(jnp.nan, dtype)
    if jnp.issubdtype(dtype, jnp.integer):
        return jnp.array(jnp.iinfo(dtype).min, dtype)
    return jnp.zeros((), dtype)


def _in_range(start, span, n) -> bool:
    return isinstance(start, (int, np.integer)) and 0 <= start and start + span <= n


def _window(x, axis, start, span):
    """``span`` elements of ``x`` from ``start`` along ``axis``; the part outside ``x``
    reads ``_fill`` (a masked-off lane). lax.dynamic_slice would instead clamp the
    window into ``x``, shifting every lane (JAX's issue #21143)."""
    if _in_range(start, span, x.shape[axis]):
        return lax.slice_in_dim(x, int(start), int(start) + span, axis=axis)
    cfg = [(0, 0, 0)] * x.ndim
    cfg[axis] = (span, span, 0)
    padded = lax.pad(x, _fill(x.dtype), cfg)     # exact for starts in [-span, n]
    return lax.dynamic_slice_in_dim(padded, start + span, span, axis)


def _write_indexed(x, nd, value):
    if nd is None:
        return jnp.broadcast_to(value, x.shape).astype(x.dtype)
    idx = _array_indices(nd)
    if idx is not None:
        return x.at[idx].set(value.astype(x.dtype), mode="drop")
    starts, shape = [], []
    for ix in nd.indices:
        if isinstance(ix, pl.Slice):
            if ix.stride != 1:
                raise NotImplementedError("strided Ref writes in the interpret rule")
            starts.append(ix.start)
            shape.append(ix.size)
        else:
            starts.append(ix)
            shape.append(1)
    value = jnp.broadcast_to(value, _indexed_shape_of(nd)).reshape(shape).astype(x.dtype)
    # Lanes past the Ref land in padding that is cut off again (never clamped into it).
    pads = [ix.size if isinstance(ix, pl.Slice) and not _in_range(ix.start, ix.size, n) else 0
            for ix, n in zip(nd.indices, x.shape)]
    if not any(pads):
        return lax.dynamic_update_slice(x, value, starts)
    padded = lax.pad(x, jnp.zeros((), x.dtype), [(p, p, 0) for p in pads])
    out = lax.dynamic_update_slice(padded, value, [st + p for st, p in zip(starts, pads)])
    return lax.slice(out, pads, [p + n for p, n in zip(pads, x.shape)])


def _indexed_shape_of(nd):
    if getattr(nd, "int_indexer_shape", ()):       # gather: the broadcast index shape leads
        return tuple(nd.get_indexer_shape())
    return tuple(ix.size for ix in nd.indices if isinstance(ix, pl.Slice))


def _unflatten(tree, leaves):
    transforms = jax.tree_util.tree_unflatten(tree, leaves)
    return transforms[0] if transforms else None


def _leaves(transforms):
    leaves, tree = jax.tree_util.tree_flatten(transforms)
    return leaves, tree


# --- load / store ---------------------------------------------------------------------

load_p = kernel_primitive("triton_load", owner=OWNER)


def load(ref, *, mask=None, other=None, cache_modifier=None, eviction_policy=None,
         volatile=False):
    """``tl.load`` of ``ref`` (or ``ref.at[...]``) with an optional mask and fill value."""
    if other is not None and mask is None:
        raise ValueError("pallas_triton.load: other= requires mask=")
    base, transforms = _split_ref(ref)
    leaves, tree = _leaves(transforms)
    extra = [x for x in (mask, other) if x is not None]
    return load_p.bind(base, *leaves, *extra, tree=tree, has_mask=mask is not None,
                       has_other=other is not None, cache_modifier=cache_modifier,
                       eviction_policy=eviction_policy, volatile=volatile)


def _load_abstract(ref, *rest, tree, **_):
    n = tree.num_leaves
    nd = _unflatten(tree, list(rest[:n]))
    shape = ref.shape if nd is None else _indexed_shape_of(nd)
    return jax.core.ShapedArray(shape, ref.dtype)


load_p.def_effectful_abstract_eval(lambda *a, **p: (_load_abstract(*a, **p), ref_effects(reads=[0])))


def _load_rule(ctx, x, *rest, tree, has_mask, has_other, **_):
    n = tree.num_leaves
    nd = _unflatten(tree, list(rest[:n]))
    value = _read_indexed(x, nd)
    if has_mask:
        mask = rest[n]
        other = rest[n + 1] if has_other else jnp.zeros((), x.dtype)
        value = jnp.where(mask, value, other)
    return (None,) * (1 + len(rest)), value


register_interpret_rule(load_p, _load_rule)


def _hints(cache_modifier=None, eviction_policy=None, volatile=False, **_):
    text = ""
    if cache_modifier:
        text += f", cache_modifier={cache_modifier!r}"
    if eviction_policy:
        text += f", eviction_policy={eviction_policy!r}"
    if volatile:
        text += ", volatile=True"
    return text


def _gather_indexer(w, transforms):
    """The indexer of a pallas_triton.load/store: integer-array offsets allowed."""
    w.allow_gather = True
    try:
        return resolve_indexer(w, transforms)
    finally:
        w.allow_gather = False


@register("triton_load")
def _emit_load(w, eqn, ins):
    p = eqn.params
    n = p["tree"].num_leaves
    nd = _gather_indexer(w, jax.tree_util.tree_unflatten(p["tree"], eqn.invars[1:1 + n]))
    rest = ins[1 + n:]
    mask = rest[0] if p["has_mask"] else None
    other = rest[1] if p["has_other"] else None
    return [w.load(ins[0], nd, mask=mask, other=other, extra=_hints(**p))]


store_p = kernel_primitive("triton_store", owner=OWNER, multiple_results=True)


def store(ref, val, *, mask=None, eviction_policy=None):
    """``tl.store`` of ``val`` into ``ref`` (or ``ref.at[...]``), where ``mask`` holds."""
    base, transforms = _split_ref(ref)
    leaves, tree = _leaves(transforms)
    extra = [mask] if mask is not None else []
    store_p.bind(base, *leaves, jnp.asarray(val), *extra, tree=tree,
                 has_mask=mask is not None, eviction_policy=eviction_policy)


store_p.def_effectful_abstract_eval(lambda *args, **params: ([], ref_effects(writes=[0])))


def _store_rule(ctx, x, *rest, tree, has_mask, eviction_policy):
    n = tree.num_leaves
    nd = _unflatten(tree, list(rest[:n]))
    val = rest[n]
    idx = _array_indices(nd)
    if idx is not None:
        if has_mask:        # masked-off lanes write nowhere (their index is sent out of range)
            shape = jnp.broadcast_shapes(*(i.shape for i in idx), jnp.shape(rest[n + 1]))
            idx = (jnp.where(rest[n + 1], jnp.broadcast_to(idx[0], shape), x.shape[0]),
                   *(jnp.broadcast_to(i, shape) for i in idx[1:]))
        return (x.at[idx].set(jnp.asarray(val).astype(x.dtype), mode="drop"),) + \
            (None,) * len(rest), []
    if has_mask:
        val = jnp.where(rest[n + 1], val, _read_indexed(x, nd))
    return (_write_indexed(x, nd, val),) + (None,) * len(rest), []


register_interpret_rule(store_p, _store_rule)


@register("triton_store")
def _emit_store(w, eqn, ins):
    p = eqn.params
    n = p["tree"].num_leaves
    nd = _gather_indexer(w, jax.tree_util.tree_unflatten(p["tree"], eqn.invars[1:1 + n]))
    val = ins[1 + n]
    mask = ins[2 + n] if p["has_mask"] else None
    w.store(ins[0], nd, val, mask=mask, extra=_hints(eviction_policy=p["eviction_policy"]))
    return []


# --- atomics -----------------------------------------------------------------------------

atomic_rmw_p = kernel_primitive("triton_atomic_rmw", owner=OWNER)
_ATOMIC_OPS = {
    "add": jnp.add, "sub": jnp.subtract, "max": jnp.maximum, "min": jnp.minimum,
    "and": jnp.bitwise_and, "or": jnp.bitwise_or, "xor": jnp.bitwise_xor,
    "xchg": lambda old, new: new,
}


def _atomic(op):
    def atomic(ref, idx, val, *, mask=None):
        f"""Atomically applies {op} at ``ref[idx]``; returns the old values."""
        view = ref.at[idx] if idx is not None else ref
        base, transforms = _split_ref(view)
        leaves, tree = _leaves(transforms)
        if op == "sub":   # Triton has no atomic_sub: add the negation
            val = -jnp.asarray(val)
        extra = [mask] if mask is not None else []
        return atomic_rmw_p.bind(base, *leaves, jnp.asarray(val), *extra, tree=tree,
                                 op="add" if op == "sub" else op, has_mask=mask is not None)
    atomic.__name__ = f"atomic_{op}"
    atomic.__doc__ = f"Atomic {op} at ``ref[idx]`` (where ``mask`` holds); returns the old values."
    return atomic


atomic_add, atomic_sub, atomic_max, atomic_min = (_atomic(o) for o in ("add", "sub", "max", "min"))
atomic_and, atomic_or, atomic_xor, atomic_xchg = (_atomic(o) for o in ("and", "or", "xor", "xchg"))


def _atomic_effectful(*args, **params):
    return _atomic_abstract(*args, **params), ref_effects(reads=[0], writes=[0])


def _atomic_abstract(ref, *rest, tree, **_):
    nd = _unflatten(tree, list(rest[:tree.num_leaves]))
    shape = ref.shape if nd is None else _indexed_shape_of(nd)
    return jax.core.ShapedArray(shape, ref.dtype)


atomic_rmw_p.def_effectful_abstract_eval(_atomic_effectful)


def _atomic_rule(ctx, x, *rest, tree, op, has_mask):
    n = tree.num_leaves
    nd = _unflatten(tree, list(rest[:n]))
    old = _read_indexed(x, nd)
    new = _ATOMIC_OPS[op](old, rest[n]).astype(x.dtype)
    if has_mask:
        new = jnp.where(rest[n + 1], new, old)
    return (_write_indexed(x, nd, new),) + (None,) * len(rest), old


register_interpret_rule(atomic_rmw_p, _atomic_rule)


@register("triton_atomic_rmw")
def _emit_atomic(w, eqn, ins):
    p = eqn.params
    n = p["tree"].num_leaves
    nd = resolve_indexer(w, jax.tree_util.tree_unflatten(p["tree"], eqn.invars[1:1 + n]))
    ptr, bounds, _ = w.address(ins[0], nd)
    mask = ins[2 + n] if p["has_mask"] else None
    if bounds and mask:
        mask = f"({bounds}) & ({mask})"
    mask = mask or bounds
    tail = (f", mask={mask}" if mask else "") + ")"
    dtype = np.dtype(eqn.invars[0].aval.dtype)
    if p["op"] == "xchg" and w.target == "interpret" and dtype.itemsize in (4, 8) and \
            np.issubdtype(dtype, np.floating):
        # Triton's interpreter exchanges integers only; a float exchange is the same
        # bits moved, so exchange them as an integer of the same width.
        from pallas_triton.emitters import tl_dtype
        bits = "tl.int32" if dtype.itemsize == 4 else "tl.int64"
        old = (f"tl.atomic_xchg({ptr}.to(tl.pointer_type({bits})), "
               f"{ins[1 + n]}.to({bits}, bitcast=True)" + tail)
        return [f"{old}.to({tl_dtype(dtype)}, bitcast=True)"]
    return [f"tl.atomic_{p['op']}({ptr}, {ins[1 + n]}" + tail]


atomic_cas_p = kernel_primitive("triton_atomic_cas", owner=OWNER)


def atomic_cas(ref, cmp, val):
    """Compare-and-swap at ``ref`` (a Ref or ``ref.at[...]``): stores ``val`` where the
    current value equals ``cmp``; returns the old values."""
    base, transforms = _split_ref(ref)
    leaves, tree = _leaves(transforms)
    return atomic_cas_p.bind(base, *leaves, jnp.asarray(cmp), jnp.asarray(val), tree=tree)


atomic_cas_p.def_effectful_abstract_eval(_atomic_effectful)


def _cas_rule(ctx, x, *rest, tree):
    n = tree.num_leaves
    nd = _unflatten(tree, list(rest[:n]))
    old = _read_indexed(x, nd)
    new = jnp.where(old == rest[n], rest[n + 1], old)
    return (_write_indexed(x, nd, new),) + (None,) * len(rest), old


register_interpret_rule(atomic_cas_p, _cas_rule)


@register("triton_atomic_cas")
def _emit_cas(w, eqn, ins):
    n = eqn.params["tree"].num_leaves
    nd = resolve_indexer(w, jax.tree_util.tree_unflatten(eqn.params["tree"], eqn.invars[1:1 + n]))
    ptr, bounds, _ = w.address(ins[0], nd)
    if bounds:
        raise unsupported("atomic_cas on a block that may overhang its array")
    return [f"tl.atomic_cas({ptr}, {ins[1 + n]}, {ins[2 + n]})"]


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
