"""Which operations compute their 16-bit float operands in float32.

Two reasons to widen, both decided per equation before its emitter runs:

- Triton's math functions (``tl.exp``, ``tl.sqrt``, ...) accept only fp32/fp64:
  on f16/bf16 they fail inside Triton's compiler. JAX's Triton lowering widens
  them the same way; the result is rounded back to the 16-bit type.
- Triton's interpreter stores bfloat16 as its raw 16 bits in a uint16 NumPy
  array and does arithmetic, comparisons and integer conversions on those bits
  (``x * 3`` on ones gives -3.7e19). Under the interpreter every arithmetic
  operation on bfloat16 is therefore done in float32 and rounded back after each
  operation: one correctly rounded float32 result of +, -, *, /, sqrt rounded
  to bfloat16 is the correctly rounded bfloat16 result (float32 keeps more than
  2 * 8 + 2 significand bits), so this is what a bfloat16 ALU gives.

Loads, stores, selects, shape changes and bitcasts move the bits unchanged and
are never widened; the interpreter's bfloat16 <-> float32/float16 conversions
are exact, so ``.to`` is the only bridge used.
"""

from __future__ import annotations

import numpy as np

from pallas_triton.jaxpr_text import tl_dtype

SIXTEEN_BIT_FLOATS = ("float16", "bfloat16")

# Triton computes these only in fp32/fp64 (its math library and libdevice).
FLOAT32_ONLY = frozenset({
    "exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt", "rsqrt", "cbrt",
    "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh",
    "asinh", "acosh", "atanh", "logistic", "erf", "erf_inv", "erfc", "pow",
    "rem", "floor", "ceil", "round", "triton_approx_tanh",
})

# Everything the interpreter would compute on bfloat16's bits.
ARITHMETIC = FLOAT32_ONLY | frozenset({
    "add", "add_any", "sub", "mul", "div", "sign", "max", "min", "clamp",
    "square", "integer_pow", "one_minus_square", "polynomial",
    "is_finite", "eq", "ne", "lt", "le", "gt", "ge", "convert_element_type",
    "reduce_sum", "reduce_max", "reduce_min", "reduce_prod",
    "cumsum", "cumprod", "cummax", "cummin", "argmax", "argmin",
    "debug_print",                     # prints the value, not the raw 16 bits
})
# neg and abs of bfloat16 flip or clear the sign bit on the raw bits instead
# (emitters._bf16_sign_bit): widening would quiet a signalling NaN on the way back


def _sixteen_bit(aval) -> bool:
    return np.dtype(getattr(aval, "dtype", np.float32)).name in SIXTEEN_BIT_FLOATS


def widened_dtypes(target: str, eqn) -> tuple[str, ...]:
    """The 16-bit float dtype names this equation computes in float32 (empty: none)."""
    name = eqn.primitive.name
    if name in FLOAT32_ONLY:
        return SIXTEEN_BIT_FLOATS
    if target == "interpret" and name in ARITHMETIC:
        return ("bfloat16",)
    return ()


def computed_dtype(w, eqn, dtype) -> np.dtype:
    """The type an equation's emitter computes ``dtype`` values in (float32 if widened)."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype.name in widened_dtypes(w.target, eqn) else dtype


def rounded(w, eqn, expr: str) -> str:
    """An intermediate of a widened equation rounded to its 16-bit output type (and back to
    float32), so that an equation of several operations rounds after each as a 16-bit ALU
    (and XLA) does; unchanged where the equation is not widened."""
    dtype = np.dtype(eqn.outvars[0].aval.dtype)
    if dtype.name not in widened_dtypes(w.target, eqn):
        return expr
    return w.bind(to_float32(w, cast(w, expr, np.float32, dtype), dtype))


def widen_inputs(w, eqn, ins, dtypes) -> list[str]:
    out = []
    for v, x in zip(eqn.invars, ins):
        aval = getattr(v, "aval", None)
        if isinstance(x, str) and _sixteen_bit(aval) and np.dtype(aval.dtype).name in dtypes:
            x = to_float32(w, x, aval.dtype)
        out.append(x)
    return out


def narrow_outputs(w, eqn, outs, dtypes) -> list:
    if eqn.primitive.name == "convert_element_type":
        return list(outs)              # its emitter casts to the output type itself
    out = []
    for v, x in zip(eqn.outvars, outs or ()):
        aval = getattr(v, "aval", None)
        if isinstance(x, str) and _sixteen_bit(aval) and np.dtype(aval.dtype).name in dtypes:
            x = cast(w, x, np.float32, aval.dtype)
        out.append(x)
    return out


def to_float32(w, expr: str, src) -> str:
    if w.target == "interpret" and np.dtype(src).name == "bfloat16":
        # bf16 is the high half of a float32: exact, and independent of the
        # interpreter's conversion code
        return (f"(({expr}).to(tl.uint16, bitcast=True).to(tl.uint32) << 16)"
                ".to(tl.float32, bitcast=True)")
    return f"({expr}).to(tl.float32)"


def cast(w, expr: str, src, dst) -> str:
    """``tl.cast(expr, dst)`` from ``src``, which the interpreter gets right too."""
    src, dst = np.dtype(src), np.dtype(dst)
    if w.target != "interpret" or "bfloat16" not in (src.name, dst.name) or src == dst:
        return f"tl.cast({expr}, {tl_dtype(dst)})"
    if dst.name != "bfloat16":                  # from bf16: exactly to float32 first
        return f"tl.cast({to_float32(w, expr, src)}, {tl_dtype(dst)})"
    # to bf16: the interpreter truncates float32 -> bf16 and writes an int's bits for
    # int -> bf16; round to nearest even on the float32 bits instead. NaN becomes the
    # quiet NaN with its sign kept (0x7FC0 / 0xFFC0), as XLA converts it.
    x = w.bind(f"tl.cast({expr}, tl.float32)")   # a no-op on float32
    bits = w.bind(f"{x}.to(tl.uint32, bitcast=True)")
    rounded = f"(({bits} + 0x7FFF + (({bits} >> 16) & 1)) >> 16)"
    return (f"tl.where({x} != {x}, ({bits} >> 16) | 0x7FC0, {rounded}).to(tl.uint16)"
            ".to(tl.bfloat16, bitcast=True)")
