"""SparseCore vector ops (JAX's ``tpu_sc`` scans, sort, mask reductions,
pack/unpack, ``bitcast``) and ``parallel_loop``, owned by backend ``tpu``.

The value ops are pure: each primitive's ``impl`` (plain ``jnp``) is its
meaning on any platform, the CPU model's included; the SparseCore lowering
maps each onto JAX's primitive (``JAX_EQUIVALENT``). Semantics, from JAX's
SparseCore lowering:
- ``cumsum`` / ``cummax(x, mask=m)`` (1-D): a running sum / max over the lanes
  where ``m`` holds; a lane before the first selected one passes ``x``
  through; after it, a lane holds the running value. Floats: NaN keys are
  refused by the CPU model (the chip's NaN order is not documented).
- ``scan_count(x, mask=m)``: lane ``i`` counts the selected lanes ``j <= i``
  with ``x[j] == x[i]`` (from 1); the second result marks, per distinct
  value, its last selected lane.
- ``sort_key_val(keys, values, mask=m, descending=d)``: a stable sort of the
  selected lanes by key (equal keys keep lane order, also when descending),
  followed by the unselected lanes in lane order; with a mask, the third
  result is ``iota < popcount(m)``. Keys are int32, uint32 or float32, one
  vector of ``num_lanes``; NaN keys are refused by the CPU model.
- ``all_reduce_population_count`` / ``all_reduce_ffs(m, reduce=r)``: the
  number of set lanes / the first set lane (``m.size`` if none), as an int32
  vector of ``m.size // r`` equal lanes.
- ``pack(a, b, format=f)``: two 32-bit vectors narrowed to half width
  (float32 -> bfloat16, int32 -> int16 by truncation), ``INTERLEAVED`` as
  ``[a0, b0, a1, b1, ...]``, ``COMPRESSED`` as rows ``[[a0, b0], [a1, b1], ...]``
  (shape ``(n, 2)``); ``unpack`` inverts it, widening.
- ``parallel_loop(lo, hi, step, carry=c)``: iterations may run in any order
  or concurrently; the model runs them in order, so only programs whose
  iterations are independent (as JAX requires) mean the same on the chip.
"""

from __future__ import annotations

import enum

import jax
import jax.numpy as jnp
from jax import lax

from pallas_frontend import backend_api
from pallas_frontend.backend_api import def_pure_primitive, kernel_primitive, register_interpret_rule

from pallas_tpu.primitives import OWNER, _is_ref

cumop_p = kernel_primitive("sc_masked_cumop", owner=OWNER)
scan_count_p = kernel_primitive("sc_scan_count", owner=OWNER, multiple_results=True)
sort_p = kernel_primitive("sc_sort_key_val", owner=OWNER, multiple_results=True)
mask_reduce_p = kernel_primitive("sc_mask_all_reduce", owner=OWNER)
pack_p = kernel_primitive("sc_pack", owner=OWNER)
unpack_p = kernel_primitive("sc_unpack", owner=OWNER, multiple_results=True)
parallel_loop_p = kernel_primitive("sc_parallel_loop", owner=OWNER, multiple_results=True)

JAX_EQUIVALENT = {
    "sc_masked_cumop": "masked_cumsum_p / masked_cummax_p (kind='sum' / 'max'): plsc.cumsum, "
                       "plsc.cummax",
    "sc_scan_count": "scan_count_p: plsc.scan_count",
    "sc_sort_key_val": "masked_sort_p (descending): plsc.sort_key_val",
    "sc_mask_all_reduce": "all_reduce_population_count_p / all_reduce_ffs_p (kind, reduce)",
    "sc_pack": "pack_p (format, preferred_element_type): plsc.pack",
    "sc_unpack": "unpack_p (format, preferred_element_type): plsc.unpack",
    "sc_parallel_loop": "parallel_loop_p (unroll; jaxpr takes consts, index, carries): "
                        "plsc.parallel_loop",
}

_SCAN_DTYPES = (jnp.dtype(jnp.int32), jnp.dtype(jnp.uint32), jnp.dtype(jnp.float32))


class PackFormat(enum.Enum):
    """How ``pack`` lays two vectors out (JAX's members and values)."""
    COMPRESSED = "compressed"     # [a0, a1], [b0, b1] -> [[a0, b0], [a1, b1]]
    INTERLEAVED = "interleaved"   # [a0, a1], [b0, b1] -> [a0, b0, a1, b1]


def _check_scan(op, x, mask):
    if jnp.dtype(x.dtype) not in _SCAN_DTYPES:
        raise NotImplementedError(f"plsc.{op}: x has dtype {x.dtype}; it takes int32, uint32 "
                                  "or float32.")
    if jnp.dtype(mask.dtype) != jnp.bool_:
        raise TypeError(f"plsc.{op}: mask has dtype {mask.dtype}; pass a boolean array.")
    if tuple(x.shape) != tuple(mask.shape):
        raise ValueError(f"plsc.{op}: x has shape {x.shape}, mask {mask.shape}; they must match.")


# --- masked cumulative sum / max -------------------------------------------------

def _cumop_impl(x, mask, *, kind):
    return _masked_scan(x, mask, lax.add if kind == "sum" else jnp.maximum)


def _masked_scan(x, mask, op):
    # carry (seen, acc); a lane before the first selected one passes x through
    def step(carry, xm):
        seen, acc = carry
        xi, mi = xm
        new_acc = jnp.where(seen, op(acc, xi), xi)
        acc = jnp.where(mi, new_acc, acc)
        seen = seen | mi
        return (seen, acc), jnp.where(seen, acc, xi)
    _, out = lax.scan(step, (jnp.bool_(False), jnp.zeros((), x.dtype)), (x, mask))
    return out


def _cumop_abstract(x, mask, *, kind):
    _check_scan("cumsum" if kind == "sum" else "cummax", x, mask)
    return jax.core.ShapedArray(x.shape, x.dtype)


def_pure_primitive(cumop_p, impl=_cumop_impl, abstract_eval=_cumop_abstract)
register_interpret_rule(cumop_p)


def _cum(op, kind, x, mask):
    x = jnp.asarray(x)
    if x.ndim != 1:
        raise NotImplementedError(f"plsc.{op}: x must be 1-D, got shape {x.shape}.")
    mask = jnp.ones(x.shape, jnp.bool_) if mask is None else jnp.asarray(mask)
    return cumop_p.bind(x, mask, kind=kind)


def cumsum(x, *, mask=None):
    """Running sum of ``x`` over the lanes where ``mask`` holds (1-D)."""
    return _cum("cumsum", "sum", x, mask)


def cummax(x, *, mask=None):
    """Running max of ``x`` over the lanes where ``mask`` holds (1-D)."""
    return _cum("cummax", "max", x, mask)


# --- scan_count ----------------------------------------------------------------------

def _scan_count_impl(x, mask):
    n = x.shape[-1]
    same = (x[:, None] == x[None, :]) & mask[:, None] & mask[None, :]
    lower = jnp.tril(jnp.ones((n, n), jnp.bool_))     # j <= i
    counts = jnp.sum(same & lower, axis=1, dtype=jnp.int32)
    later = jnp.triu(jnp.ones((n, n), jnp.bool_), 1)   # j > i
    last = mask & ~jnp.any(same & later, axis=1)
    return counts, last


def _scan_count_abstract(x, mask):
    _check_scan("scan_count", x, mask)
    return [jax.core.ShapedArray(x.shape, jnp.int32), jax.core.ShapedArray(x.shape, jnp.bool_)]


def_pure_primitive(scan_count_p, impl=_scan_count_impl, abstract_eval=_scan_count_abstract)
register_interpret_rule(scan_count_p)


def scan_count(x, mask=None):
    """(running count of each lane's value among the selected lanes so far,
    mask of each value's last selected lane)."""
    x = jnp.asarray(x)
    mask = jnp.ones(x.shape, jnp.bool_) if mask is None else jnp.asarray(mask)
    return tuple(scan_count_p.bind(x, mask))


# --- sort_key_val ------------------------------------------------------------------

def _sort_impl(keys, values, *maybe_mask, descending):
    mask = maybe_mask[0] if maybe_mask else jnp.ones(keys.shape, jnp.bool_)
    lane = jnp.arange(keys.shape[0], dtype=jnp.int32)
    # stable: (unselected last, key, lane); descending sorts by the key's order reversed
    order_keys = keys if not descending else _reverse_order(keys)
    # the unselected lanes follow in lane order, whatever their keys
    order_keys = jnp.where(mask, order_keys, jnp.zeros_like(order_keys))
    _, _, perm = lax.sort((~mask, order_keys, lane), num_keys=3)
    outs = [keys[perm], values[perm]]
    if maybe_mask:
        outs.append(lane < jnp.sum(mask, dtype=jnp.int32))
    return outs


def _reverse_order(keys):
    if jnp.issubdtype(keys.dtype, jnp.floating):
        return -keys
    return ~keys      # order-reversing for signed and unsigned integers alike


def _sort_abstract(keys, values, *maybe_mask, descending):
    if jnp.dtype(keys.dtype) not in _SCAN_DTYPES:
        raise NotImplementedError(f"plsc.sort_key_val: keys have dtype {keys.dtype}; it takes "
                                  "int32, uint32 or float32.")
    if keys.ndim != 1 or keys.shape != values.shape:
        raise ValueError(f"plsc.sort_key_val: keys {keys.shape} and values {values.shape} must "
                         "be 1-D vectors of one shape.")
    if jnp.dtype(values.dtype).itemsize != 4:
        raise NotImplementedError(f"plsc.sort_key_val: values have dtype {values.dtype}; they "
                                  "must be 32-bit.")
    if maybe_mask:
        _check_scan("sort_key_val", keys, maybe_mask[0])
    return [keys, values, *maybe_mask]


def_pure_primitive(sort_p, impl=_sort_impl, abstract_eval=_sort_abstract)
register_interpret_rule(sort_p)


def sort_key_val(keys, values, *, mask=None, descending: bool = False):
    """Sorts ``keys`` and carries ``values`` along (stable; unselected lanes
    last); returns ``(keys, values)``, plus the output mask when ``mask`` is given."""
    from pallas_tpu import sc_mesh
    lanes = sc_mesh.get_sparse_core_info().num_lanes
    keys, values = jnp.asarray(keys), jnp.asarray(values)
    if keys.shape != (lanes,):
        raise ValueError(f"plsc.sort_key_val: keys have shape {keys.shape}; SparseCore sorts "
                         f"one vector of ({lanes},).")
    maybe_mask = () if mask is None else (jnp.asarray(mask),)
    return tuple(sort_p.bind(keys, values, *maybe_mask, descending=bool(descending)))


# --- mask reductions ----------------------------------------------------------------

def _mask_reduce_impl(x, *, kind, reduce):
    n = x.shape[0]
    if kind == "population_count":
        v = jnp.sum(x, dtype=jnp.int32)
    else:
        v = jnp.where(jnp.any(x), jnp.argmax(x).astype(jnp.int32), jnp.int32(n))
    return jnp.full((n // reduce,), v, jnp.int32)


def _mask_reduce_abstract(x, *, kind, reduce):
    name = "all_reduce_" + ("population_count" if kind == "population_count" else "ffs")
    if jnp.dtype(x.dtype) != jnp.bool_:
        raise TypeError(f"plsc.{name}: takes a boolean mask, got {x.dtype}.")
    if x.ndim != 1:
        raise ValueError(f"plsc.{name}: takes a 1-D mask, got shape {x.shape}.")
    if reduce < 1:
        raise ValueError(f"plsc.{name}: reduce must be >=1, got {reduce}.")
    if x.shape[0] % reduce:
        raise ValueError(f"plsc.{name}: reduce={reduce} must divide the dimension size "
                         f"{x.shape[0]}.")
    return jax.core.ShapedArray((x.shape[0] // reduce,), jnp.int32)


def_pure_primitive(mask_reduce_p, impl=_mask_reduce_impl, abstract_eval=_mask_reduce_abstract)
register_interpret_rule(mask_reduce_p)


def all_reduce_population_count(x, *, reduce: int = 1):
    """The number of set lanes of ``x``, in every lane of an int32 vector."""
    return mask_reduce_p.bind(jnp.asarray(x), kind="population_count", reduce=int(reduce))


def all_reduce_ffs(x, *, reduce: int = 1):
    """The first set lane of ``x`` (``x.size`` if none), in every lane."""
    return mask_reduce_p.bind(jnp.asarray(x), kind="ffs", reduce=int(reduce))


# --- pack / unpack ---------------------------------------------------------------------

_NARROW = {jnp.dtype(jnp.float32): jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.int32): jnp.dtype(jnp.int16)}
_WIDE = {v: k for k, v in _NARROW.items()}


def _pack_impl(a, b, *, format, preferred_element_type):
    dtype = preferred_element_type or _NARROW[jnp.dtype(a.dtype)]
    a, b = a.astype(dtype), b.astype(dtype)
    pairs = jnp.stack([a, b], axis=-1)
    return pairs.reshape(-1) if format is PackFormat.INTERLEAVED else pairs


def _pack_abstract(a, b, *, format, preferred_element_type):
    if a.shape != b.shape or a.ndim != 1 or a.dtype != b.dtype:
        raise ValueError(f"plsc.pack: a {a.shape} {a.dtype} and b {b.shape} {b.dtype} must be "
                         "1-D of one shape and dtype.")
    dtype = preferred_element_type
    if dtype is None:
        if jnp.dtype(a.dtype) not in _NARROW:
            raise NotImplementedError(f"plsc.pack: packs float32 or int32, got {a.dtype}.")
        dtype = _NARROW[jnp.dtype(a.dtype)]
    elif jnp.dtype(dtype).itemsize * 2 != jnp.dtype(a.dtype).itemsize:
        raise ValueError(f"plsc.pack: preferred_element_type={dtype} must be half as wide as "
                         f"{a.dtype}.")
    shape = (2 * a.shape[0],) if format is PackFormat.INTERLEAVED else (a.shape[0], 2)
    return jax.core.ShapedArray(shape, dtype)


def _unpack_impl(ab, *, format, preferred_element_type):
    dtype = preferred_element_type or _WIDE[jnp.dtype(ab.dtype)]
    pairs = ab.reshape(-1, 2)
    return [pairs[:, 0].astype(dtype), pairs[:, 1].astype(dtype)]


def _unpack_abstract(ab, *, format, preferred_element_type):
    if format is PackFormat.INTERLEAVED and (ab.ndim != 1 or ab.shape[0] % 2):
        raise ValueError(f"plsc.unpack: INTERLEAVED takes a 1-D array of even size, got {ab.shape}.")
    if format is PackFormat.COMPRESSED and (ab.ndim != 2 or ab.shape[1] != 2):
        raise ValueError(f"plsc.unpack: COMPRESSED takes shape (n, 2), got {ab.shape}.")
    dtype = preferred_element_type
    if dtype is None:
        if jnp.dtype(ab.dtype) not in _WIDE:
            raise NotImplementedError(f"plsc.unpack: unpacks bfloat16 or int16, got {ab.dtype}.")
        dtype = _WIDE[jnp.dtype(ab.dtype)]
    elif jnp.dtype(dtype).itemsize != 2 * jnp.dtype(ab.dtype).itemsize:
        raise ValueError(f"plsc.unpack: preferred_element_type={dtype} must be twice as wide "
                         f"as {ab.dtype}.")
    return [jax.core.ShapedArray((ab.size // 2,), dtype)] * 2


def_pure_primitive(pack_p, impl=_pack_impl, abstract_eval=_pack_abstract)
def_pure_primitive(unpack_p, impl=_unpack_impl, abstract_eval=_unpack_abstract)
register_interpret_rule(pack_p)
register_interpret_rule(unpack_p)


def _format(format) -> PackFormat:
    if not isinstance(format, PackFormat):
        raise TypeError(f"plsc.pack/unpack: format must be a plsc.PackFormat, got {format!r}.")
    return format


def pack(a, b, /, *, format, preferred_element_type=None):
    """Narrows and packs two 32-bit vectors into one of half-width elements."""
    pet = None if preferred_element_type is None else jnp.dtype(preferred_element_type)
    return pack_p.bind(jnp.asarray(a), jnp.asarray(b), format=_format(format),
                       preferred_element_type=pet)


def unpack(ab, /, *, format, preferred_element_type=None):
    """Unpacks and widens what ``pack`` made: ``(a, b)``."""
    pet = None if preferred_element_type is None else jnp.dtype(preferred_element_type)
    return tuple(unpack_p.bind(jnp.asarray(ab), format=_format(format),
                               preferred_element_type=pet))


def bitcast(x, dtype):
    """``pltpu.bitcast(x, dtype, dim=-1)`` (JAX deprecates this spelling)."""
    from pallas_tpu.layout_ops import bitcast as tpu_bitcast
    return tpu_bitcast(x, dtype, dim=-1)


# --- parallel_loop ------------------------------------------------------------------------

def _parallel_loop_abstract(*avals, body, num_consts, unroll, effect_spec):
    carries = avals[3 + num_consts:]
    return list(carries), {e for e in _ref_effects(effect_spec)}


def _ref_effects(effect_spec):
    return backend_api.ref_effects(reads=[i for i, _ in effect_spec],
                                   writes=[i for i, _ in effect_spec])


parallel_loop_p.def_effectful_abstract_eval(_parallel_loop_abstract)


def parallel_loop(lower, upper, step=1, *, unroll: int = 1, carry=None):
    """Decorator: runs ``body(i)`` (or ``carry = body(i, carry)``) for ``i`` in
    ``range(lower, upper, step)``; iterations must not depend on each other's
    Ref writes (the chip may reorder them). Returns the final carry."""
    def decorator(body):
        flat_carry, carry_tree = jax.tree.flatten(carry)
        if any(hasattr(c, "transforms") and hasattr(c, "ref") for c in flat_carry):
            raise TypeError("plsc.parallel_loop: TransformedRefs are not allowed as carried "
                            "values (a view ref.at[...]); close over the Ref instead.")
        if any(_is_ref(c) for c in flat_carry):
            raise TypeError("plsc.parallel_loop: carried values may not be refs, but got: "
                            f"{[jax.typeof(c) for c in flat_carry]}; close over the Ref instead.")
        flat_carry = [jnp.asarray(c) for c in flat_carry]

        def flat_body(i, *cs):
            if carry is None:
                body(i)
                return []
            out = body(i, jax.tree.unflatten(carry_tree, cs))
            out_leaves, out_tree = jax.tree.flatten(out)
            if out_tree != carry_tree:
                raise ValueError(f"plsc.parallel_loop: body result should have same structure "
                                 f"as carry: {out_tree} != {carry_tree}; return the same "
                                 "structure.")
            return [jnp.asarray(o, c.dtype) for o, c in zip(out_leaves, cs)]
        in_avals = [jax.core.ShapedArray((), jnp.int32)] + [jax.typeof(c) for c in flat_carry]
        jaxpr, consts = backend_api.trace_body(flat_body, in_avals,
                                               traced_for="plsc.parallel_loop body")
        bounds = [jnp.asarray(b, jnp.int32) for b in (lower, upper, step)]
        effect_spec = tuple((3 + k, "w") for k, c in enumerate(consts) if _is_ref(c))
        out = parallel_loop_p.bind(*bounds, *consts, *flat_carry, body=jaxpr,
                                   num_consts=len(consts), unroll=int(unroll),
                                   effect_spec=effect_spec)
        return None if carry is None else jax.tree.unflatten(carry_tree, out)
    return decorator
