"""Emitters of reductions and scans (``tl.reduce``/``tl.associative_scan``), and the
combine functions the generated module defines for them."""

from __future__ import annotations

import numpy as np

from pallas_triton import padding
from pallas_triton.emitters import broadcast_expr, in_aval, register
from pallas_triton.jaxpr_text import is_float, tl_dtype
from pallas_triton.widening import computed_dtype


# Triton's standard combine functions: its interpreter reduces/scans with them in
# NumPy (np.sum, np.nanmax, np.cumsum); any other combine runs element by element in Python.
STD_COMBINE = {"add": "tl.standard._sum_combine", "mul": "tl.standard._prod_combine",
               "max": "tl.standard._elementwise_max", "min": "tl.standard._elementwise_min"}
SCAN_IMPORT = "from pallas_triton.interpret_scan import cumprod as _xla_order_cumprod"


def combine_fn(w, kind: str) -> str:
    return STD_COMBINE.get(kind) or w.helper(kind)


def reduce_expr(w, x: str, axes, combine: str) -> str:
    for axis in sorted(axes, reverse=True):
        x = f"tl.reduce({x}, {axis}, {combine_fn(w, combine)})"
    return x


def _float_extremum(w, eqn, x: str, kind: str) -> str:
    """max/min that propagate NaN, as JAX's do."""
    axes = eqn.params["axes"]
    if w.target != "interpret":
        return reduce_expr(w, x, axes, kind + "_nan")   # one max.NaN per step on a GPU
    # The interpreter's fast path (np.nanmax) drops NaN: put it back where a NaN was seen.
    # It also returns -0.0 or +0.0 by position; XLA's max of zeros is +0.0 if any is (min:
    # -0.0 if any is).
    v = w.bind(x)
    nans = reduce_expr(w, f"({v} != {v}).to(tl.int32)", axes, "add")
    bits = np.dtype(computed_dtype(w, eqn, in_aval(eqn).dtype)).itemsize * 8
    zero = 0 if kind == "max" else -(1 << (bits - 1))         # +0.0 / -0.0 as an int
    has_zero = reduce_expr(w, f"({v}.to(tl.int{bits}, bitcast=True) == {zero}).to(tl.int32)",
                           axes, "add")
    r = w.bind(reduce_expr(w, v, axes, kind))
    signed = "0.0" if kind == "max" else "-0.0"
    exact_zero = f"({r}.to(tl.int{bits}, bitcast=True) & {(1 << (bits - 1)) - 1}) == 0"
    r = f"tl.where({exact_zero}, tl.where({has_zero} > 0, {signed}, {r}), {r})"
    return f"tl.where({nans} > 0, float('nan'), {r})"


def _neutral_padding(w, eqn, x, kind, axes):
    """``x`` with the reduction's neutral element in the lanes padding ``axes`` (padding.py)."""
    aval = in_aval(eqn)
    return padding.fill_padding(w, x, aval.shape, axes, padding.neutral(kind, aval.dtype))


_REDUCTION_KINDS = {"reduce_sum": "add", "reduce_max": "max", "reduce_min": "min",
                    "reduce_and": "and", "reduce_or": "or"}


@register(*_REDUCTION_KINDS)
def _reduce(w, eqn, ins):
    kind, axes = _REDUCTION_KINDS[eqn.primitive.name], eqn.params["axes"]
    x = _neutral_padding(w, eqn, ins[0], kind, axes)
    if kind in ("max", "min") and is_float(in_aval(eqn).dtype):
        return [_float_extremum(w, eqn, x, kind)]
    return [reduce_expr(w, x, axes, kind)]


@register("cumsum", "cumprod", "cummax", "cummin")
def _cumulative(w, eqn, ins):
    kind = {"cumsum": "add", "cumprod": "mul", "cummax": "max", "cummin": "min"}[
        eqn.primitive.name]
    if kind in ("max", "min") and is_float(in_aval(eqn).dtype):
        kind += "_nan" if w.target != "interpret" else "_nan_zeros"
    axis, reverse = eqn.params["axis"], bool(eqn.params.get("reverse", False))
    if not in_aval(eqn).shape:
        return [ins[0]]
    x = _neutral_padding(w, eqn, ins[0], kind.removesuffix("_zeros"), (axis,))
    if kind in ("add", "mul") and is_float(in_aval(eqn).dtype):
        # XLA's scan starts from 0 (1): -0.0 + 0.0 is +0.0, and a denormal is flushed
        # where the processor flushes (XLA on CPU, the interpreter)
        x = f"({x} {'+ 0.0' if kind == 'add' else '* 1.0'})"
        if kind == "mul" and w.target == "interpret":
            # in XLA's association order: with denormals flushed, the order decides
            # whether a product that passes near the denormal range survives
            # (interpret_scan.py)
            w.imports.add(SCAN_IMPORT)
            n = in_aval(eqn).shape[axis]
            return [f"_xla_order_cumprod({w.bind(x)}, {axis}, {n}, {reverse})"]
    # The interpreter scans in NumPy only with Triton's sum/prod combines; any other it
    # calls element by element outside @jit, where Triton's own max/min cannot run.
    combine = combine_fn(w, kind) if kind in ("add", "mul") else w.helper(kind)
    return [f"tl.associative_scan({x}, {axis}, {combine}, reverse={reverse})"]


@register("argmax", "argmin")
def _argmax(w, eqn, ins):
    (axis,) = eqn.params["axes"]
    shape = in_aval(eqn).shape
    idx = broadcast_expr(f"tl.arange(0, {padding.size(shape[axis])})", (shape[axis],), shape,
                         (axis,))
    combine = "argmax" if eqn.primitive.name == "argmax" else "argmin"
    x = padding.fill_padding(w, ins[0], shape, (axis,),
                             padding.neutral(combine[3:], in_aval(eqn).dtype))
    expr = f"tl.reduce(({x}, {idx}), {axis}, {w.helper(combine)})[1]"
    dt = np.dtype(eqn.params["index_dtype"])
    return [expr if dt == np.int32 else f"({expr}).to({tl_dtype(dt)})"]


# --- helpers the generated module defines (Triton's own are @jit; see triton_runtime) --

HELPERS = {
    "add": "return a + b",
    "max": "return tl.maximum(a, b)",
    "min": "return tl.minimum(a, b)",
    # float max/min that propagate NaN: on a GPU llvm.maximum/minimum (max.NaN), which
    # also order -0.0 below +0.0 as XLA does
    "max_nan": "return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)",
    "min_nan": "return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)",
    # the same under the interpreter, whose NumPy maximum/minimum return either zero: of two
    # zeros +0.0 is the max (a + b) and -0.0 the min (-(-a + -b))
    "max_nan_zeros": "r = tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)\n"
                     "    return tl.where(a == 0, tl.where(b == 0, a + b, r), r)",
    "min_nan_zeros": "r = tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)\n"
                     "    return tl.where(a == 0, tl.where(b == 0, -(-a + -b), r), r)",
    "and": "return a & b",
    "or": "return a | b",
}
# (value, index) pairs; ties keep the lower index, and a NaN wins over any number (the
# first NaN's index), as XLA's argmax/argmin do. a != a is False for integers.
_ARG_COMBINE = ("nan = a != a\n"
                "    pick = (nan & ((c == c) | (b < d))) | ((c == c) & ((a {op} c) | ((a == c) & (b < d))))\n"
                "    return tl.where(pick, a, c), tl.where(pick, b, d)")
TUPLE_HELPERS = {"argmax": _ARG_COMBINE.format(op=">"), "argmin": _ARG_COMBINE.format(op="<")}


def helper_source(kind: str) -> str:
    if kind in TUPLE_HELPERS:
        return f"@triton.jit\ndef _combine_{kind}(a, b, c, d):\n    {TUPLE_HELPERS[kind]}\n"
    return f"@triton.jit\ndef _combine_{kind}(a, b):\n    {HELPERS[kind]}\n"
