"""Float results at NaN, signed zeros, denormals, infinities and overflow, as XLA gives them.

Triton's own operations follow C or the GPU's instructions at these edges
(``tl.where(x > 0, 1, ...)`` makes ``sign(NaN)`` 0, ``min.NaN`` and NumPy's
``minimum`` order -0.0 and +0.0 as equal). These emitters spell out XLA's
results with comparisons and selects, so that one expression gives them on a GPU
and under Triton's interpreter:

- ``sign``: NaN stays itself, ``sign(±0) = ±0``, otherwise ±1.
- ``max``/``min``/``clamp``: a NaN operand gives NaN (16-bit: which NaN depends on
  the processor XLA compiles for, ``host_floats.py``), -0.0 < +0.0, otherwise one
  operand's bits unchanged (bfloat16 denormals are kept or read as zero as XLA
  reads them on this host).
- ``round``: the sign of ``x`` is kept (``round(-0.0) = -0.0``, ``round(-0.3) = -0.0``).
- ``log1p(inf) = inf``; ``expm1`` of a large ``x`` is ``exp(x) - 1`` (finite up to
  ``exp``'s own overflow, 88.72 in float32), ``expm1(inf) = inf``.
- ``reduce_precision``: XLA's rounding (nearest even) and exponent range on the bits,
  NaN kept (it was an identity).
- ``sinh`` near 0 from ``expm1`` (``exp(x) - exp(-x)`` cancels: 3.1e-6 gave 3.0994e-6),
  ``sinh(-0.0) = -0.0``; ``sinh``/``cosh`` finite up to their own overflow (89.4 in
  float32, where ``exp`` alone overflows at 88.72).

Denormals: XLA on CPU compares and computes float32 with denormals treated as
zero, and Triton's interpreter runs its kernels in that processor mode too
(``denormal_mode``: set around each run); a GPU keeps them. The expressions below work in either mode.
Where XLA's NaN *sign* comes from its CPU code generation (which ORs or ANDs
the two operands of a float32 min/max), the result here is the first NaN
operand (README "Deliberate differences from XLA").
"""

from __future__ import annotations

import numpy as np

from pallas_triton import _jax_compat, host_floats
from pallas_triton.emitters import _python_number, in_aval, is_float, out_aval, register
from pallas_triton.jaxpr_text import tl_dtype
from pallas_triton.widening import cast, computed_dtype, to_float32


def _tensor(w, expr: str, dtype) -> str:
    """``expr`` bound to a name, as a tensor (a Python number cannot be bitcast)."""
    if _python_number(expr):
        expr = f"tl.full([], {expr}, {tl_dtype(dtype)})"
    return w.bind(expr)


def sign_bit(x: str, dtype) -> str:
    """True where the float ``x`` has its sign bit set (also -0.0 and -NaN)."""
    return f"(({x}).to(tl.int{np.dtype(dtype).itemsize * 8}, bitcast=True) < 0)"


def _is_zero_bits(x: str, dtype, negative: bool) -> str:
    """True where ``x`` is exactly -0.0 (or +0.0): its bits, not a comparison, which
    also holds for denormals where they are treated as zero."""
    bits = np.dtype(dtype).itemsize * 8
    pattern = -(1 << (bits - 1)) if negative else 0
    return f"(({x}).to(tl.int{bits}, bitcast=True) == {pattern})"


# --- sign, round ------------------------------------------------------------------------

@register("sign")
def _sign(w, eqn, ins):
    dt = out_aval(eqn).dtype
    x = w.bind(ins[0])
    if not is_float(dt):
        return [cast(w, f"tl.where({x} > 0, 1, tl.where({x} < 0, -1, 0))", np.int32, dt)]
    # x * 0.0 is ±0 with x's sign (also for a denormal treated as zero); NaN stays x
    return [f"tl.where({x} != {x}, {x}, tl.where({x} > 0, 1.0, tl.where({x} < 0, -1.0, "
            f"{x} * 0.0)))"]


@register("round")
def _round(w, eqn, ins):
    """lax.round, both methods, from floor: |x| - floor(|x|) is exact in floating point."""
    x = w.bind(ins[0])
    a = w.bind(f"tl.abs({x})")
    t = w.bind(f"tl.floor({a})")
    d = w.bind(f"{a} - {t}")
    if int(eqn.params.get("rounding_method", 0)) == 0:          # half away from zero
        up = f"{d} >= 0.5"
    else:                                                      # half to even
        odd = f"({t} - 2.0 * tl.floor({t} * 0.5)) == 1.0"
        up = f"({d} > 0.5) | (({d} == 0.5) & ({odd}))"
    r = w.bind(f"tl.where({up}, {t} + 1.0, {t})")
    # the sign of x, not x < 0: round(-0.0) and round(-0.3) are -0.0
    return [f"tl.where({sign_bit(x, computed_dtype(w, eqn, in_aval(eqn).dtype))}, -{r}, {r})"]


# --- max, min, clamp --------------------------------------------------------------------

def extremum(w, eqn, a: str, b: str, kind: str, dtype) -> str:
    """XLA's ``max``/``min`` of two float operands computed in ``cdt``; ``dtype`` is their
    type in the kernel (bfloat16's NaN is XLA's quiet NaN)."""
    cdt = computed_dtype(w, eqn, dtype)
    a, b = _tensor(w, a, cdt), _tensor(w, b, cdt)
    name = np.dtype(dtype).name
    floats = host_floats.for_target(w.target)
    if name != "bfloat16" or floats.bfloat16_denormals_read_as_zero:
        # As XLA on CPU sees float32 operands: a denormal treated as zero becomes ±0.0 here
        # (x * 1.0 is x on a GPU). XLA's bfloat16 vector code (AVX512-BF16) keeps
        # bfloat16's denormal bits, so they stay there.
        a, b = w.bind(f"{a} * 1.0"), w.bind(f"{b} * 1.0")
    wins = f"{a} > {b}" if kind == "max" else f"{a} < {b}"
    r = w.bind(f"tl.where({wins}, {a}, {b})")
    # a zero result: -0.0 is the min and +0.0 the max of ±0.0 (the operands compared equal)
    neg = kind == "min"
    z = (f"tl.where({_is_zero_bits(a, cdt, neg)}, {a}, "
         f"tl.where({_is_zero_bits(b, cdt, neg)}, {b}, {r}))")
    r = w.bind(f"tl.where({r} == 0, {z}, {r})")
    if (name == "bfloat16" and not floats.bfloat16_nan_kept) or \
            (name == "float16" and not floats.float16_nan_kept):
        # XLA's quiet NaN (0x7FC0, 0x7E00), as its generic max/min code gives it
        return f"tl.where({a} != {a}, float('nan'), tl.where({b} != {b}, float('nan'), {r}))"
    # a NaN: the first NaN operand; b's with its sign bit ORed (min) or ANDed (max) with
    # a's, as XLA's CPU code for float32/64 (and float16/bfloat16 where host_floats says
    # so) gives it
    sa = sign_bit(a, cdt)
    b_nan = (f"tl.where({sa}, -tl.abs({b}), {b})" if kind == "min"
             else f"tl.where({sa}, {b}, tl.abs({b}))")
    out = f"tl.where({a} != {a}, {a}, tl.where({b} != {b}, {b_nan}, {r}))"
    if name == "bfloat16" and cdt == np.float32:
        # XLA narrows that float32 NaN to bfloat16's quiet NaN with its sign (0x7FC0 /
        # 0xFFC0), the payload dropped
        o = w.bind(out)
        u = w.bind(f"{o}.to(tl.uint32, bitcast=True)")
        quiet = f"(({u} & 0x80000000) | 0x7FC00000).to(tl.float32, bitcast=True)"
        return f"tl.where({o} != {o}, {quiet}, {o})"
    return out


@register("max", "min")
def _max_min(w, eqn, ins):
    dt = out_aval(eqn).dtype
    kind = eqn.primitive.name
    if not is_float(dt):
        return [f"tl.{'maximum' if kind == 'max' else 'minimum'}({ins[0]}, {ins[1]})"]
    return [extremum(w, eqn, ins[0], ins[1], kind, dt)]


@register("clamp")
def _clamp(w, eqn, ins):
    lo, x, hi = ins
    dt = out_aval(eqn).dtype
    if not is_float(dt):
        return [f"tl.minimum(tl.maximum({x}, {lo}), {hi})"]
    # XLA's clamp is min(max(lo, x), hi): a NaN operand or bound gives NaN, and the
    # operand order decides which NaN
    return [extremum(w, eqn, extremum(w, eqn, lo, x, "max", dt), hi, "min", dt)]


# --- log1p, expm1 -----------------------------------------------------------------------

@register("log1p")
def _log1p(w, eqn, ins):
    # log1p(x) = log(u) * (x / (u - 1)) with u = 1 + x: accurate for small x, and the
    # quotient (near 1) cannot overflow; u = inf (x = inf) would give inf * 0
    x = w.bind(ins[0])
    u = w.bind(f"1.0 + {x}")
    # x * 1.0: a denormal x is flushed where the processor flushes (XLA on CPU, the interpreter)
    return [f"tl.where({u} == 1.0, {x} * 1.0, tl.where({u} == float('inf'), {u}, "
            f"tl.log({u}) * ({x} / ({u} - 1.0))))"]


def expm1_expr(w, x: str) -> str:
    # Kahan's (u - 1) * x / log(u) with u = exp(x) for |x| <= 1, where u - 1 cancels;
    # above, u - 1 is as accurate and (u - 1) * x cannot overflow before exp does
    u = w.bind(f"tl.exp({x})")
    return (f"tl.where({x} != {x}, {x}, tl.where({x} > 1.0, {u} - 1.0, tl.where({u} == 1.0, "
            f"{x}, tl.where({u} - 1.0 == -1.0, -1.0, ({u} - 1.0) * {x} / tl.log({u})))))")


@register("expm1")
def _expm1(w, eqn, ins):
    return [expm1_expr(w, w.bind(ins[0]))]


def _half_exp(w, a: str) -> str:
    """exp(a) / 2 for a >= 0, finite up to 2 * the largest float: (h / 2) * h with
    h = exp(a / 2) (exp(a) alone overflows first)."""
    h = w.bind(f"tl.exp(0.5 * {a})")
    return f"(0.5 * {h}) * {h}"


@register("sinh")
def _sinh(w, eqn, ins):
    x = w.bind(ins[0])
    a = w.bind(f"tl.abs({x})")
    e = w.bind(expm1_expr(w, a))
    # |x| < 1: (e^a - e^-a) / 2 = (e + e / (e + 1)) / 2 with e = expm1(a), no cancellation
    small = f"0.5 * ({e} + {e} / ({e} + 1.0))"
    large = f"tl.where({a} < 88.0, 0.5 * (tl.exp({a}) - tl.exp(-{a})), {_half_exp(w, a)})"
    r = w.bind(f"tl.where({a} < 1.0, {small}, {large})")
    sign = sign_bit(x, computed_dtype(w, eqn, in_aval(eqn).dtype))
    return [f"tl.where({x} != {x}, {x}, tl.where({sign}, -{r}, {r}))"]


@register("cosh")
def _cosh(w, eqn, ins):
    x = w.bind(ins[0])
    a = w.bind(f"tl.abs({x})")
    r = f"tl.where({a} < 88.0, 0.5 * (tl.exp({a}) + tl.exp(-{a})), {_half_exp(w, a)})"
    return [f"tl.where({x} != {x}, {x}, {r})"]


# --- reduce_precision -------------------------------------------------------------------

def _reduced_bits(u: str, nbits: int, src_mant: int, exponent_bits: int, mantissa_bits: int):
    """XLA's reduce_precision on the unsigned bits ``u`` of a float with ``src_mant``
    mantissa bits: the mantissa rounded to nearest even at ``mantissa_bits``, then an
    exponent past the reduced range made ±inf (above) or ±0 (below, the target's
    denormals included). NaN inputs are the caller's."""
    src_exp = nbits - 1 - src_mant
    if mantissa_bits < src_mant:
        drop = src_mant - mantissa_bits
        last = 1 << drop                      # the lowest mantissa bit that stays
        # + (half - 1) + the kept lowest bit: ties go to the even neighbour
        u = f"(({u} + (({u} & {last}) >> {drop}) + {(last >> 1) - 1}) & {~(last - 1) & ((1 << nbits) - 1)})"
    if exponent_bits < src_exp:
        exp_mask = ((1 << src_exp) - 1) << src_mant
        bias, reduced_bias = (1 << (src_exp - 1)) - 1, (1 << (exponent_bits - 1)) - 1
        exponent = f"({u} & {exp_mask})"
        signed_zero = f"({u} & {1 << (nbits - 1)})"
        u = (f"tl.where({exponent} > {(bias + reduced_bias) << src_mant}, "
             f"{signed_zero} | {exp_mask}, tl.where({exponent} <= "
             f"{(bias - reduced_bias) << src_mant}, {signed_zero}, {u}))")
    return u


@register("reduce_precision")
def _reduce_precision(w, eqn, ins):
    """lax.reduce_precision as XLA computes it, on the bits (so denormals are neither
    flushed nor read as zero): NaN stays the input NaN; bfloat16 is computed on its
    float32 bits (the same results) and a NaN comes out XLA's quiet NaN, sign kept."""
    dt = np.dtype(in_aval(eqn).dtype)
    e, m = int(eqn.params["exponent_bits"]), int(eqn.params["mantissa_bits"])
    x = _tensor(w, ins[0], dt)
    if dt.name == "bfloat16" and e >= 8 and m >= 7 and w.target == "interpret" \
            and _jax_compat.xla_keeps_wide_bfloat16_reduce_precision(e, m):
        return [x]     # as XLA on this CPU (jaxlib 0.10 to float32's format, 0.12.1 to
        #                any at least bfloat16's own): nothing to reduce
    if dt.name == "bfloat16":
        wide = w.bind(to_float32(w, x, dt))
        u = w.bind(f"{wide}.to(tl.uint32, bitcast=True)")
        r = w.bind(f"{_reduced_bits(u, 32, 23, e, m)}.to(tl.float32, bitcast=True)")
        quiet = f"(({u} & 0x80000000) | 0x7FC00000).to(tl.float32, bitcast=True)"
        return [cast(w, f"tl.where({wide} != {wide}, {quiet}, {r})", np.float32, dt)]
    nbits = dt.itemsize * 8
    u = w.bind(f"{x}.to(tl.uint{nbits}, bitcast=True)")
    r = f"{_reduced_bits(u, nbits, int(np.finfo(dt).nmant), e, m)}.to({tl_dtype(dt)}, bitcast=True)"
    return [f"tl.where({x} != {x}, {x}, {r})"]
