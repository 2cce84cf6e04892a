"""Integer division, remainder, shifts and float -> int casts with XLA's results.

Where C (and so Triton, on a GPU and in its NumPy interpreter) leaves a result
undefined or machine-specific, XLA defines one, and the reference interpreter
follows XLA; the generated code guards those cases explicitly:

- ``x / 0`` is -1 (all bits set, also unsigned), ``rem(x, 0)`` is ``x``;
  ``INT_MIN / -1`` is ``INT_MIN`` and ``rem(INT_MIN, -1)`` is 0.
- a shift by a negative amount or by the bit width or more gives 0 (left and
  logical right) or the sign fill (arithmetic right).
- a float -> int conversion saturates at the type's range; NaN gives 0.

A divisor or shift amount known at trace time that cannot hit these cases
gets the plain operator.
"""

from __future__ import annotations

import numpy as np
from jax.extend.core import Literal

from pallas_triton.emitters import (_python_number, in_aval, is_float, literal, out_aval,
                                    register, tl_dtype)
from pallas_triton.widening import cast


def _static(eqn, k):
    """The value of operand ``k`` if it is a scalar literal, else None."""
    v = eqn.invars[k]
    if isinstance(v, Literal) and not np.shape(v.val):
        return int(np.asarray(v.val))
    return None


def _signed(dtype) -> bool:
    return np.issubdtype(np.dtype(dtype), np.signedinteger)


@register("div")
def _div(w, eqn, ins):
    dt = out_aval(eqn).dtype
    if is_float(dt):
        # Triton divides 16-bit floats in float32 and returns float32: round the quotient
        # to the type XLA's division gives, or the next operation sees the unrounded one
        # (round(a / b) on float16 rounded 7157.66 to 7160 where XLA gives 7156)
        from pallas_triton.widening import computed_dtype
        cdt = computed_dtype(w, eqn, dt)
        q = f"({ins[0]} / {ins[1]})"
        return [cast(w, q, np.float32, cdt) if cdt.itemsize == 2 else q]
    d = _static(eqn, 1)
    if d is not None and d not in (0, -1):
        return [f"({ins[0]} // {ins[1]})"]     # Triton's // truncates toward zero, as lax.div
    x, y = w.bind(ins[0]), w.bind(ins[1])
    if not _signed(dt):
        safe = w.bind(f"tl.where({y} == 0, 1, {y})")
        return [f"tl.where({y} == 0, {literal(np.iinfo(dt).max, dt)}, {x} // {safe})"]
    safe = w.bind(f"tl.where(({y} == 0) | ({y} == -1), 1, {y})")
    # -x wraps INT_MIN to itself, as XLA's INT_MIN / -1 does
    return [f"tl.where({y} == 0, {literal(-1, dt)}, tl.where({y} == -1, -{x}, {x} // {safe}))"]


@register("rem")
def _rem(w, eqn, ins):
    if is_float(out_aval(eqn).dtype):
        return [f"({ins[0]} % {ins[1]})"]      # fmod, as lax.rem
    d = _static(eqn, 1)
    if d is not None and d not in (0, -1):
        return [f"({ins[0]} % {ins[1]})"]
    x, y = w.bind(ins[0]), w.bind(ins[1])
    bad = f"({y} == 0) | ({y} == -1)" if _signed(out_aval(eqn).dtype) else f"{y} == 0"
    safe = w.bind(f"tl.where({bad}, 1, {y})")  # x % 1 == 0 == rem(x, -1)
    return [f"tl.where({y} == 0, {x}, {x} % {safe})"]


def _shift(w, eqn, ins, op, fill):
    dt = np.dtype(out_aval(eqn).dtype)
    bits = dt.itemsize * 8
    s = _static(eqn, 1)
    if s is not None and 0 <= s < bits:
        return [op(ins[0], ins[1])]
    x, y = w.bind(ins[0]), w.bind(ins[1])
    out = f"({y} >= {bits})" + (f" | ({y} < 0)" if _signed(dt) else "")
    out = w.bind(out)
    safe = w.bind(f"tl.where({out}, 0, {y})")
    return [f"tl.where({out}, {fill(x, dt)}, {op(x, safe)})"]


def _zero(x, dt):
    return literal(0, dt)


@register("shift_left")
def _shift_left(w, eqn, ins):
    return _shift(w, eqn, ins, lambda x, y: f"({x} << {y})", _zero)


@register("shift_right_arithmetic")
def _shift_right_arithmetic(w, eqn, ins):
    # sign fill from the top bit, also for unsigned types (XLA shifts their bits as signed)
    dt = np.dtype(out_aval(eqn).dtype)
    signed = tl_dtype(f"int{dt.itemsize * 8}")

    def as_signed(x):
        return x if _signed(dt) else f"({x}).to({signed}, bitcast=True)"

    def back(x):
        return x if _signed(dt) else f"({x}).to({tl_dtype(dt)}, bitcast=True)"

    def sign_fill(x, dt):
        return f"tl.where({as_signed(x)} < 0, {literal(-1 if _signed(dt) else np.iinfo(dt).max, dt)}, " \
               f"{literal(0, dt)})"
    def amount(y):
        # signed too: int64 >> uint64 is promoted to float (NumPy, the interpreter)
        return y if _python_number(y) else as_signed(y)
    return _shift(w, eqn, ins, lambda x, y: back(f"({as_signed(x)} >> {amount(y)})"),
                  sign_fill)


@register("shift_right_logical")
def _shift_right_logical(w, eqn, ins):
    dt = np.dtype(out_aval(eqn).dtype)
    unsigned = tl_dtype(f"uint{dt.itemsize * 8}")

    def logical(x, y):
        return f"(({x}).to({unsigned}, bitcast=True) >> {y}).to({tl_dtype(dt)}, bitcast=True)"
    return _shift(w, eqn, ins, logical, _zero)


def float_to_int(w, expr: str, src, dst) -> str:
    """``tl.cast`` float -> integer, saturating, NaN -> 0 (C leaves these undefined)."""
    src, dst = np.dtype(src), np.dtype(dst)
    x = expr if src.itemsize >= 4 else f"({expr}).to(tl.float32)"   # thresholds need the range
    x = w.bind(x)
    info = np.iinfo(dst)
    # both bounds are powers of two (or 0): exact in every float type from float32 up
    high = w.bind(f"{x} >= {float(int(info.max) + 1)!r}")
    low = w.bind(f"{x} < {float(info.min)!r}")
    safe = w.bind(f"tl.where({high} | {low} | ({x} != {x}), 0.0, {x})")
    return (f"tl.where({high}, {literal(info.max, dst)}, tl.where({low}, "
            f"{literal(info.min, dst)}, tl.cast({safe}, {tl_dtype(dst)})))")


def needs_saturation(src, dst) -> bool:
    return is_float(src) and np.issubdtype(np.dtype(dst), np.integer)


@register("convert_element_type")
def _convert(w, eqn, ins):
    new = np.dtype(eqn.params["new_dtype"])
    if isinstance(eqn.invars[0], Literal):
        return [literal(np.asarray(eqn.invars[0].val).astype(new), new)]
    if new == np.dtype(bool):
        return [f"({ins[0]} != 0)"]
    src = in_aval(eqn).dtype
    if w.target == "interpret" and np.dtype(src).name == "bfloat16":
        src = np.float32            # widened before this emitter (widening.ARITHMETIC)
    if needs_saturation(src, new):
        return [float_to_int(w, ins[0], src, new)]
    return [cast(w, ins[0], src, new)]
