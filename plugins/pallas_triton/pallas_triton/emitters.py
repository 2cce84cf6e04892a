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
                   "rsqrt": "tl.rsqrt", "cos": "tl.cos",
                   "floor": "tl.floor", "ceil": "tl.ceil", "erf": "tl.erf",
                   "max_contiguous": "tl.max_contiguous"}.items():
    register(_name)(_call(_fn))


@register("sin")
def _sin(w, eqn, ins):
    # Under the interpreter NumPy's float64 sin returns a denormal input as it is (no
    # arithmetic for the denormals-are-zero mode to read it as zero); XLA on CPU reads
    # it as zero (JAX 0.12.1's XLA; 0.12.0.1's kept it, which the manifest allows too)
    x = ins[0]
    if w.target == "interpret" and np.dtype(in_aval(eqn).dtype) == np.float64 \
            and not _python_number(x):
        x = w.bind(x)
        x = w.bind(f"tl.where(tl.abs({x}) < {np.finfo(np.float64).tiny!r}, {x} * 0.0, {x})")
    return [f"tl.sin({x})"]


def _bf16_sign_bit(w, eqn, ins, op: str, mask: str):
    """neg/abs of bfloat16 under the interpreter: on the raw bits (it stores bfloat16 as
    uint16), so a signalling NaN keeps its payload as XLA's neg/abs keep it (computed
    in float32, the way back would quiet it); None where this is not that case."""
    if (w.target != "interpret" or np.dtype(in_aval(eqn).dtype).name != "bfloat16"
            or _python_number(ins[0])):
        return None
    bits = f"({ins[0]}).to(tl.uint16, bitcast=True)"
    return [f"({bits} {op} tl.full([], {mask}, tl.uint16)).to(tl.bfloat16, bitcast=True)"]


@register("neg")
def _neg(w, eqn, ins):
    return _bf16_sign_bit(w, eqn, ins, "^", "0x8000") or [f"(-{ins[0]})"]


@register("abs")
def _abs(w, eqn, ins):
    return _bf16_sign_bit(w, eqn, ins, "&", "0x7FFF") or [f"tl.abs({ins[0]})"]


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


# sinh, cosh: float_edges.py


@register("polynomial")
def _polynomial(w, eqn, ins):
    # c0 + c1*x + c2*x^2 + ... (coefficients ascending), by Horner's rule, rounded as XLA
    # on CPU rounds it: float32/float64 steps fused (fma); 16-bit floats, where JAX lowers
    # each step as fmuladd (0.12.1 on), an fma in float32 rounded to the type per step;
    # before that float16 so where XLA computes float16 natively (AVX512-FP16,
    # host_floats.py) and otherwise, as bfloat16 always, every multiply and add rounded
    from pallas_triton import _jax_compat, host_floats
    from pallas_triton.widening import computed_dtype, rounded
    x, coeffs = w.bind(ins[0]), ins[1:]
    dt = np.dtype(out_aval(eqn).dtype)
    acc = coeffs[-1]
    sixteen = dt.name in ("float16", "bfloat16")
    fmuladd = _jax_compat.polynomial_steps_are_fmuladd()
    unfused16 = dt == np.float16 and not fmuladd and \
        not host_floats.for_target(w.target).float16_fused
    if not is_float(dt) or (dt.name == "bfloat16" and not fmuladd) or unfused16:
        for c in reversed(coeffs[:-1]):
            acc = rounded(w, eqn, f"({rounded(w, eqn, f'({acc} * {x})')} + {c})")
        return [acc]
    wide = "tl.float64" if dt == np.float64 else "tl.float32"
    narrow = sixteen and computed_dtype(w, eqn, dt) == dt
    as_wide = lambda v: v if _python_number(v) else f"({v}).to({wide})"  # noqa: E731
    xw = w.bind(as_wide(x))
    acc = f"tl.full([], {acc}, {wide})" if _python_number(acc) else as_wide(acc)
    for c in reversed(coeffs[:-1]):
        acc = w.bind(f"tl.fma({acc}, {xw}, {as_wide(c)})")
        if sixteen:                   # each step rounded to the 16-bit type
            acc = w.bind(f"{acc}.to({tl_dtype(dt)}).to(tl.float32)") if narrow else \
                rounded(w, eqn, acc)
    return [f"{acc}.to({tl_dtype(dt)})" if narrow else acc]


@register("one_minus_square")
def _one_minus_square(w, eqn, ins):
    # what tanh's JVP multiplies the tangent by: 1 - tanh(x)^2
    # (1 - x) * (1 + x), as XLA computes it (1 - x * x loses 300 ULP at x = 0.001);
    # integers stay integers (wrapping)
    from pallas_triton.widening import rounded
    x = w.bind(ins[0])
    one = "1.0" if is_float(out_aval(eqn).dtype) else "1"
    return [f"(({rounded(w, eqn, f'{one} - {x}')}) * ({rounded(w, eqn, f'{one} + {x}')}))"]


@register("logistic")
def _logistic(w, eqn, ins):
    return [f"(1.0 / (1.0 + tl.exp(-{ins[0]})))"]


# tanh: math_library.py (libdevice/ocml; NumPy under the interpreter)


# log1p, expm1, sign, max, min, clamp, round: float_edges.py (XLA's results at NaN,
# signed zeros, infinities and overflow)


@register("integer_pow")
def _integer_pow(w, eqn, ins):
    y = eqn.params["y"]
    if y == 0:
        return [f"tl.full({padding.shape(out_aval(eqn).shape)}, 1, {tl_dtype(out_aval(eqn).dtype)})"]
    from pallas_triton.widening import rounded
    x = w.bind(ins[0])
    # square-and-multiply keeps the number of multiplies at O(log y); each product rounded
    # to a widened 16-bit type, as XLA's multiplies are
    acc, base, n = None, x, abs(y)
    while n:
        if n & 1:
            acc = base if acc is None else w.bind(rounded(w, eqn, f"{acc} * {base}"))
        n >>= 1
        if n:
            base = w.bind(rounded(w, eqn, f"{base} * {base}"))
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


# reduce_precision: float_edges.py (XLA's rounding, overflow and underflow on the bits)


@register("copy", "copy_p", "optimization_barrier", "stop_gradient", "reshard")
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


@register("rev")
def _rev(w, eqn, ins):
    # lax.rev (x[::-1]): a gather with reversed lanes along each reversed axis
    x = ins[0]
    shape = list(in_aval(eqn).shape)
    for axis in eqn.params["dimensions"]:
        n = shape[axis]
        if n == 1:
            continue
        lanes = f"({n - 1} - tl.arange(0, {padding.size(n)}))"
        if padding.size(n) != n:                  # padded lanes gather an in-range element
            lanes = f"tl.maximum({lanes}, 0)"
        x = w.bind(f"tl.gather({x}, {broadcast_expr(lanes, (n,), shape, (axis,))}, {axis})")
    return [x]


# reductions and scans: reductions.py; dot_general: dots.py
