"""The emitter table: one function per JAX primitive, producing Triton expressions.

An emitter is ``emit(w, eqn, ins) -> list[str]``: ``w`` is the ``KernelWriter``
(for fresh names, helper functions and nested jaxprs), ``ins`` the Python
expressions of the operands; it returns one expression per output. Emitters
that need statements (loops, branches, memory) write them through ``w``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pallas_triton import padding
from pallas_triton.jaxpr_text import TL_DTYPES, is_float, literal, tl_dtype  # noqa: F401

EMITTERS: dict[str, Callable] = {}

def register(*names: str):
    """Registers an emitter under one or more primitive names (used by plugins' primitives too)."""
    def decorator(fn):
        for n in names:
            EMITTERS[n] = fn
        return fn
    return decorator


def out_aval(eqn, k=0):
    return eqn.outvars[k].aval


def in_aval(eqn, k=0):
    return eqn.invars[k].aval


# --- elementwise ---------------------------------------------------------------

def _binary(op):
    return lambda w, eqn, ins: [f"({ins[0]} {op} {ins[1]})"]


# add_any: the tangent sum that JVP kernels contain (same arithmetic as add).
for _name, _op in {"add": "+", "add_any": "+", "sub": "-", "mul": "*", "and": "&", "or": "|", "xor": "^",
                   "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}.items():
    register(_name)(_binary(_op))


# div, rem and the shifts: xla_numerics.py (XLA's results where C leaves them undefined)


def _call(fn):
    return lambda w, eqn, ins: [f"{fn}({', '.join(ins)})"]


for _name, _fn in {"exp": "tl.exp", "exp2": "tl.exp2", "log": "tl.log", "log2": "tl.log2",
                   "sqrt": "tl.sqrt",
                   "rsqrt": "tl.rsqrt", "sin": "tl.sin", "cos": "tl.cos", "abs": "tl.abs",
                   "floor": "tl.floor", "ceil": "tl.ceil", "erf": "tl.erf",
                   "max_contiguous": "tl.max_contiguous"}.items():
    register(_name)(_call(_fn))


@register("neg")
def _neg(w, eqn, ins):
    return [f"(-{ins[0]})"]


@register("not")
def _not(w, eqn, ins):
    return [f"(~{ins[0]})"]


@register("square")
def _square(w, eqn, ins):
    return [f"({ins[0]} * {ins[0]})"]


@register("bitcast_convert_type")
def _bitcast(w, eqn, ins):
    new = np.dtype(eqn.params["new_dtype"])
    if new.itemsize != np.dtype(in_aval(eqn).dtype).itemsize:
        from pallas_triton.errors import unsupported
        raise unsupported("bitcast_convert_type between types of different widths")
    return [f"({ins[0]}).to({tl_dtype(new)}, bitcast=True)"]


@register("tan")
def _tan(w, eqn, ins):
    x = w.bind(ins[0])
    return [f"(tl.sin({x}) / tl.cos({x}))"]


@register("sinh", "cosh")
def _sinh_cosh(w, eqn, ins):
    x = w.bind(ins[0])
    sign = "-" if eqn.primitive.name == "sinh" else "+"
    return [f"((tl.exp({x}) {sign} tl.exp(-{x})) * 0.5)"]


@register("polynomial")
def _polynomial(w, eqn, ins):
    # c0 + c1*x + c2*x^2 + ... (coefficients ascending), by Horner's rule
    x, coeffs = w.bind(ins[0]), ins[1:]
    acc = coeffs[-1]
    for c in reversed(coeffs[:-1]):
        acc = f"({acc} * {x} + {c})"
    return [acc]


@register("one_minus_square")
def _one_minus_square(w, eqn, ins):
    # what tanh's JVP multiplies the tangent by: 1 - tanh(x)^2
    x = w.bind(ins[0])
    return [f"(1.0 - {x} * {x})"]


@register("logistic")
def _logistic(w, eqn, ins):
    return [f"(1.0 / (1.0 + tl.exp(-{ins[0]})))"]


# tanh: math_library.py (libdevice/ocml; NumPy under the interpreter)


@register("log1p")
def _log1p(w, eqn, ins):
    # log1p(x) = log(u) * x / (u - 1) with u = 1 + x: accurate for small x.
    x = w.bind(ins[0])
    u = w.bind(f"1.0 + {x}")
    return [f"tl.where({u} == 1.0, {x}, tl.log({u}) * {x} / ({u} - 1.0))"]


@register("expm1")
def _expm1(w, eqn, ins):
    x = w.bind(ins[0])
    u = w.bind(f"tl.exp({x})")
    return [f"tl.where({u} == 1.0, {x}, tl.where({u} - 1.0 == -1.0, -1.0, "
            f"({u} - 1.0) * {x} / tl.log({u})))"]


@register("sign")
def _sign(w, eqn, ins):
    x = ins[0]
    from pallas_triton.widening import cast
    return [cast(w, f"tl.where({x} > 0, 1, tl.where({x} < 0, -1, 0))", np.int32, out_aval(eqn).dtype)]


@register("max", "min")
def _max_min(w, eqn, ins):
    fn = "tl.maximum" if eqn.primitive.name == "max" else "tl.minimum"
    nan = ", propagate_nan=tl.PropagateNan.ALL" if is_float(out_aval(eqn).dtype) else ""
    return [f"{fn}({ins[0]}, {ins[1]}{nan})"]


@register("clamp")
def _clamp(w, eqn, ins):
    lo, x, hi = ins
    return [f"tl.minimum(tl.maximum({x}, {lo}), {hi})"]


@register("integer_pow")
def _integer_pow(w, eqn, ins):
    y = eqn.params["y"]
    if y == 0:
        return [f"tl.full({padding.shape(out_aval(eqn).shape)}, 1, {tl_dtype(out_aval(eqn).dtype)})"]
    x = w.bind(ins[0])
    # square-and-multiply keeps the number of multiplies at O(log y)
    acc, base, n = None, x, abs(y)
    while n:
        if n & 1:
            acc = base if acc is None else w.bind(f"{acc} * {base}")
        n >>= 1
        if n:
            base = w.bind(f"{base} * {base}")
    return [f"(1.0 / {acc})" if y < 0 else acc]


# pow: math_library.py (the vendor libraries' pow)


@register("select_n")
def _select_n(w, eqn, ins):
    pred, *cases = ins
    if len(cases) == 1:
        return [cases[0]]
    if in_aval(eqn).dtype == np.dtype(bool):
        return [f"tl.where({pred}, {cases[1]}, {cases[0]})"]
    expr = cases[-1]
    for k in range(len(cases) - 2, -1, -1):
        expr = f"tl.where({pred} == {k}, {cases[k]}, {expr})"
    return [expr]


# convert_element_type: xla_numerics.py (saturating float -> int casts)


@register("multiple_of")
def _multiple_of(w, eqn, ins):
    values = list(eqn.params["values"])
    if not in_aval(eqn).shape:
        return [ins[0]]          # Triton's hint needs a tensor; scalars get divisibility from constants
    return [f"tl.multiple_of({ins[0]}, {values if len(values) > 1 else values[0]})"]


@register("copy", "copy_p", "reduce_precision", "optimization_barrier", "stop_gradient",
          "reshard")
def _identity(w, eqn, ins):
    return list(ins)


# --- shapes ----------------------------------------------------------------------

def broadcast_expr(x: str, in_shape, out_shape, dims) -> str:
    if tuple(in_shape) == tuple(out_shape):
        return x
    in_shape, out_shape = padding.shape(in_shape), padding.shape(out_shape)
    if not in_shape:
        return f"tl.broadcast_to({x}, {list(out_shape)})"
    with_ones = [1] * len(out_shape)
    for src, dst in enumerate(dims):
        with_ones[dst] = in_shape[src]
    if with_ones != list(in_shape):
        x = f"tl.reshape({x}, {with_ones})"
    return f"tl.broadcast_to({x}, {list(out_shape)})"


def _python_number(text: str) -> bool:
    if text in ("True", "False") or text.startswith("float('"):
        return True
    try:
        float(text)
        return True
    except ValueError:
        return False


@register("broadcast_in_dim")
def _broadcast_in_dim(w, eqn, ins):
    if not in_aval(eqn).shape and (type(eqn.invars[0]).__name__ == "Literal" or
                                   _python_number(ins[0])):
        # a Python number (also one a folded cast left) is not a tensor; tl.full makes one
        return [f"tl.full({padding.shape(eqn.params['shape'])}, {ins[0]}, "
                f"{tl_dtype(out_aval(eqn).dtype)})"]
    return [broadcast_expr(ins[0], in_aval(eqn).shape, eqn.params["shape"],
                           eqn.params["broadcast_dimensions"])]


@register("broadcast_to")
def _broadcast_to(w, eqn, ins):
    # numpy-style: trailing dims align
    in_shape, out_shape = in_aval(eqn).shape, tuple(eqn.params["shape"])
    dims = tuple(range(len(out_shape) - len(in_shape), len(out_shape)))
    return [broadcast_expr(ins[0], in_shape, out_shape, dims)]


def reshape_expr(w, x: str, in_shape, out_shape) -> str:
    if tuple(in_shape) == tuple(out_shape):
        return x
    padding.check_reshape(in_shape, out_shape)
    in_shape, out_shape = padding.shape(in_shape), padding.shape(out_shape)
    if not out_shape:                        # a one-element tensor to a scalar
        flat = x if len(in_shape) == 1 else f"tl.reshape({x}, [1])"
        return f"tl.reduce({flat}, 0, {w.helper('add')})"
    if not in_shape:
        return f"tl.broadcast_to({x}, {list(out_shape)})"
    return f"tl.reshape({x}, {list(out_shape)})"


@register("reshape", "squeeze", "expand_dims")
def _reshape(w, eqn, ins):
    return [reshape_expr(w, ins[0], in_aval(eqn).shape, out_aval(eqn).shape)]


@register("transpose")
def _transpose(w, eqn, ins):
    perm = tuple(eqn.params["permutation"])
    if perm == tuple(range(len(perm))):
        return [ins[0]]
    return [f"tl.permute({ins[0]}, {perm})"]


@register("iota")
def _iota(w, eqn, ins):
    shape, dim = tuple(eqn.params["shape"]), eqn.params["dimension"]
    expr = f"tl.arange(0, {padding.size(shape[dim])})"
    expr = broadcast_expr(expr, (shape[dim],), shape, (dim,))
    dtype = np.dtype(eqn.params["dtype"])
    from pallas_triton.widening import cast
    return [expr if dtype == np.int32 else cast(w, expr, np.int32, dtype)]


@register("slice")
def _slice(w, eqn, ins):
    # Triton tensors cannot be sliced; gather along each narrowed axis instead.
    x = ins[0]
    shape = list(in_aval(eqn).shape)
    starts, limits = eqn.params["start_indices"], eqn.params["limit_indices"]
    strides = eqn.params["strides"] or (1,) * len(shape)
    for axis, (lo, hi, st) in enumerate(zip(starts, limits, strides)):
        n = len(range(lo, hi, st))
        if (lo, n, st) == (0, shape[axis], 1):
            continue
        new_shape = shape[:axis] + [n] + shape[axis + 1:]
        lanes = f"({lo} + tl.arange(0, {padding.size(n)}) * {st})"
        if padding.size(n) != n:                  # padded lanes gather an in-range element
            lanes = f"tl.minimum({lanes}, {shape[axis] - 1})"
        idx = broadcast_expr(lanes, (n,), new_shape, (axis,))
        if n < shape[axis]:
            x = w.bind(f"tl.gather({x}, {idx}, {axis})")
        else:
            from pallas_triton.errors import unsupported
            raise unsupported("a slice that is not narrower than its operand")
        shape = new_shape
    return [x]


# --- reductions ----------------------------------------------------------------------

# Triton's standard combine functions: its interpreter reduces/scans with them in
# NumPy (np.sum, np.nanmax, np.cumsum); any other combine runs element by element in Python.
STD_COMBINE = {"add": "tl.standard._sum_combine", "mul": "tl.standard._prod_combine",
               "max": "tl.standard._elementwise_max", "min": "tl.standard._elementwise_min"}


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
    v = w.bind(x)
    nans = reduce_expr(w, f"({v} != {v}).to(tl.int32)", axes, "add")
    return f"tl.where({nans} > 0, float('nan'), {reduce_expr(w, v, axes, kind)})"


def _neutral_padding(w, eqn, x, kind, axes):
    """``x`` with the reduction's neutral element in the lanes padding ``axes`` (padding.py)."""
    aval = in_aval(eqn)
    return padding.fill_padding(w, x, aval.shape, axes, padding.neutral(kind, aval.dtype))


@register("reduce_sum")
def _reduce_sum(w, eqn, ins):
    x = _neutral_padding(w, eqn, ins[0], "add", eqn.params["axes"])
    return [reduce_expr(w, x, eqn.params["axes"], "add")]


@register("reduce_max")
def _reduce_max(w, eqn, ins):
    x = _neutral_padding(w, eqn, ins[0], "max", eqn.params["axes"])
    if is_float(in_aval(eqn).dtype):
        return [_float_extremum(w, eqn, x, "max")]
    return [reduce_expr(w, x, eqn.params["axes"], "max")]


@register("reduce_min")
def _reduce_min(w, eqn, ins):
    x = _neutral_padding(w, eqn, ins[0], "min", eqn.params["axes"])
    if is_float(in_aval(eqn).dtype):
        return [_float_extremum(w, eqn, x, "min")]
    return [reduce_expr(w, x, eqn.params["axes"], "min")]


@register("cumsum", "cumprod", "cummax", "cummin")
def _cumulative(w, eqn, ins):
    kind = {"cumsum": "add", "cumprod": "mul", "cummax": "max", "cummin": "min"}[
        eqn.primitive.name]
    if kind in ("max", "min") and is_float(in_aval(eqn).dtype):
        kind += "_nan"
    axis, reverse = eqn.params["axis"], bool(eqn.params.get("reverse", False))
    if not in_aval(eqn).shape:
        return [ins[0]]
    x = _neutral_padding(w, eqn, ins[0], kind, (axis,))
    return [f"tl.associative_scan({x}, {axis}, {combine_fn(w, kind)}, reverse={reverse})"]


@register("reduce_and")
def _reduce_and(w, eqn, ins):
    x = _neutral_padding(w, eqn, ins[0], "and", eqn.params["axes"])
    return [reduce_expr(w, x, eqn.params["axes"], "and")]


@register("reduce_or")
def _reduce_or(w, eqn, ins):
    x = _neutral_padding(w, eqn, ins[0], "or", eqn.params["axes"])
    return [reduce_expr(w, x, eqn.params["axes"], "or")]


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


# --- matmul -------------------------------------------------------------------------

@register("dot_general")
def _dot_general(w, eqn, ins):
    from pallas_triton.errors import unsupported
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    la, ra = in_aval(eqn, 0), in_aval(eqn, 1)
    if lb or rb or la.ndim != 2 or ra.ndim != 2:
        raise unsupported("dot_general other than a 2-D matrix product (no batch dims)")
    # padded contraction lanes hold unspecified data (maybe NaN): 0 there on both sides
    a = padding.fill_padding(w, ins[0], la.shape, lc, "0")
    b = padding.fill_padding(w, ins[1], ra.shape, rc, "0")
    widened = w.target == "interpret" and np.dtype(la.dtype).name in ("bfloat16", "float16")
    if widened:
        # Triton's interpreter multiplies 16-bit floats as their raw bits (garbage, not an
        # error); float32 operands give the GPU's result: 16-bit products are exact in
        # float32 and tl.dot accumulates in float32 there too.
        a, b = f"{a}.to(tl.float32)", f"{b}.to(tl.float32)"
    if tuple(lc) == (0,):
        a = f"tl.trans({a})"
    if tuple(rc) == (1,):
        b = f"tl.trans({b})"
    m = padding.size(la.shape[1 - lc[0]])
    n = padding.size(ra.shape[1 - rc[0]])
    k = padding.size(la.shape[lc[0]])
    if min(m, n, k) < 16:
        raise unsupported(f"a dot of shape ({m}x{k}) @ ({k}x{n}): tl.dot needs every dim >= 16")
    out = np.dtype(out_aval(eqn).dtype)
    acc = "tl.int32" if np.issubdtype(la.dtype, np.integer) else "tl.float32"
    extra = ""
    if widened:
        extra = ", input_precision='ieee'"        # exact: 16-bit values fit tf32 anyway
    elif np.dtype(la.dtype) == np.float32:
        precision = eqn.params.get("precision")
        highest = precision is not None and "HIGHEST" in str(precision)
        high = precision is not None and not highest and "HIGH" in str(precision)
        choice = "ieee" if highest else "tf32" if high else w.dot_input_precision
        extra = f", input_precision={choice!r}"
    expr = f"tl.dot({a}, {b}, out_dtype={acc}{extra})"
    if tl_dtype(out) != acc:
        from pallas_triton.widening import cast
        expr = cast(w, expr, acc[3:], out)
    return [expr]


# --- helpers the generated module defines (Triton's own are @jit; see triton_runtime) --

HELPERS = {
    "add": "return a + b",
    "max": "return tl.maximum(a, b)",
    "min": "return tl.minimum(a, b)",
    "max_nan": "return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)",
    "min_nan": "return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)",
    "and": "return a & b",
    "or": "return a | b",
}
TUPLE_HELPERS = {
    # (value, index) pairs; ties keep the lower index, as jnp.argmax does.
    "argmax": "gt = (a > c) | ((a == c) & (b < d))\n    return tl.where(gt, a, c), tl.where(gt, b, d)",
    "argmin": "lt = (a < c) | ((a == c) & (b < d))\n    return tl.where(lt, a, c), tl.where(lt, b, d)",
}


def helper_source(kind: str) -> str:
    if kind in TUPLE_HELPERS:
        return f"@triton.jit\ndef _combine_{kind}(a, b, c, d):\n    {TUPLE_HELPERS[kind]}\n"
    return f"@triton.jit\ndef _combine_{kind}(a, b):\n    {HELPERS[kind]}\n"


