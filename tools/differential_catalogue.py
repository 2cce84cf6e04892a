"""The primitives of the differential corpus (tools/differential_corpus.py) and
the inputs they run on.

Every public ``jax.lax.*_p`` primitive is either a case here (elementwise,
reduction, cumulative or cast: each case is a small jnp/lax function that binds
it) or listed in ``NOT_IN_CORPUS`` with the reason; a primitive that appears in
a new JAX, or in a backend's emitter table, and is in neither fails
tests/test_differential_corpus.py. Which dtypes a case runs on is not listed:
a case applies to a dtype when its function, traced on that dtype, binds its
primitive on an operand of that dtype.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

SHAPE = (16, 128)     # one block: tiles every dtype on TPU, powers of two for Triton


@dataclasses.dataclass(frozen=True)
class Case:
    name: str                     # "prim" or "prim[variant]"
    primitive: str
    kind: str                     # unary | binary | ternary | reduction | cumulative | cast
    fn: Callable                  # {operand name: array} -> array (SHAPE or reducible to it)
    target: str | None = None     # casts: the dtype cast to
    scalars: bool = False         # a constant operand or scalar bounds (XLA may simplify)


def _const(x, value):
    """A constant of operand a's dtype."""
    return jnp.asarray(value, x["a"].dtype)


def _u(prim, f):
    return Case(prim, prim, "unary", lambda x: f(x["a"]))


def _b(prim, f):
    return Case(prim, prim, "binary", lambda x: f(x["a"], x["b"]))


UNARY = [_u(n, getattr(lax, n)) for n in (
    "abs", "acos", "acosh", "asin", "asinh", "atan", "atanh", "bessel_i0e", "bessel_i1e",
    "cbrt", "ceil", "clz", "cos", "cosh", "digamma", "erf", "erf_inv", "erfc", "exp", "exp2",
    "expm1", "floor", "is_finite", "lgamma", "log", "log1p", "logistic", "neg",
    "population_count", "rsqrt", "sign", "sin", "sinh", "sqrt", "square", "tan", "tanh",
    "one_minus_square",                             # JAX 0.11+
    "acospi", "asinpi", "atanpi", "cospi", "sinpi", "tanpi", "exp2m1", "log2p1",  # 0.12.1+
    ) if hasattr(lax, n)] + [
    _u("not", lax.bitwise_not),
    _u("copy", lambda x: lax.copy_p.bind(x)),
    Case("round[away]", "round", "unary",
         lambda x: lax.round(x["a"], lax.RoundingMethod.AWAY_FROM_ZERO)),
    Case("round[even]", "round", "unary",
         lambda x: lax.round(x["a"], lax.RoundingMethod.TO_NEAREST_EVEN)),
    Case("integer_pow[2]", "integer_pow", "unary", lambda x: lax.integer_pow(x["a"], 2)),
    Case("integer_pow[3]", "integer_pow", "unary", lambda x: lax.integer_pow(x["a"], 3)),
    Case("integer_pow[-2]", "integer_pow", "unary",
         lambda x: lax.integer_pow(x["a"], -2)),
    *([Case("polynomial", "polynomial", "unary",                  # JAX 0.11+
            lambda x: lax.polynomial(x["a"], [0.5, -1.25, 2.0, 0.75]))]
      if hasattr(lax, "polynomial") else []),
    Case("reduce_precision[e5m10]", "reduce_precision", "unary",
         lambda x: lax.reduce_precision(x["a"], exponent_bits=5, mantissa_bits=10)),
    Case("reduce_precision[e8m7]", "reduce_precision", "unary",
         lambda x: lax.reduce_precision(x["a"], exponent_bits=8, mantissa_bits=7)),
]

BINARY = [_b(n, getattr(lax, n)) for n in (
    "add", "sub", "mul", "div", "rem", "pow", "atan2", "max", "min", "nextafter",
    "shift_left", "shift_right_arithmetic", "shift_right_logical", "eq", "ne", "lt", "le",
    "gt", "ge", "mulhi", "igammac", "igamma_grad_a", "zeta")] + [
    _b("and", lax.bitwise_and), _b("or", lax.bitwise_or), _b("xor", lax.bitwise_xor),
    _b("eq_to", lambda x, y: lax.eq_to_p.bind(x, y)),
    _b("le_to", lambda x, y: lax.le_to_p.bind(x, y)),
    _b("lt_to", lambda x, y: lax.lt_to_p.bind(x, y)),
    # the order m of polygamma is a whole number; b's integer part, kept small
    _b("polygamma", lambda x, y: lax.polygamma(jnp.clip(jnp.floor(jnp.abs(y)), 0, 4), x)),
    *([_b("atan2pi", lax.atan2pi)] if hasattr(lax, "atan2pi") else []),      # JAX 0.12.1+
]

TERNARY = [
    Case("clamp", "clamp", "ternary", lambda x: lax.clamp(x["b"], x["a"], x["c"])),
    Case("clamp[scalar bounds]", "clamp", "unary",
         lambda x: lax.clamp(_const(x, 0), x["a"], _const(x, 100)), scalars=True),
    Case("max[constant]", "max", "unary", lambda x: lax.max(x["a"], _const(x, 1)),
         scalars=True),
    Case("min[constant]", "min", "unary", lambda x: lax.min(x["a"], _const(x, 1)),
         scalars=True),
    Case("select_n", "select_n", "ternary", lambda x: lax.select_n(x["pred"], x["a"], x["b"])),
    Case("select_n[3]", "select_n", "ternary",
         lambda x: lax.select_n(x["which"], x["a"], x["b"], x["c"])),
    Case("regularized_incomplete_beta", "regularized_incomplete_beta", "ternary",
         lambda x: lax.betainc(x["a"], x["b"], x["c"])),
    *([Case(n, n, "ternary", (lambda f: lambda x: f(x["a"], x["b"], x["c"]))(getattr(lax, n)))
       for n in ("fma", "fmuladd")] if hasattr(lax, "fma") else []),           # JAX 0.12.1+
]


# sums and products read s (their rows sum the same in any order), the rest r
SUMS = {"reduce_sum", "reduce_prod", "cumsum", "cumprod", "cumlogsumexp"}


def _input(prim, axis):
    return ("s" if prim in SUMS else "r") + str(axis)


def _reduction(prim, f, axis):
    return Case(f"{prim}[axis{axis}]", prim, "reduction",
                lambda x: jnp.expand_dims(f(x[_input(prim, axis)], axis), axis))


_REDUCERS = {
    "reduce_sum": lambda x, ax: lax.reduce_sum_p.bind(x, axes=(ax,), out_sharding=None),
    "reduce_prod": lambda x, ax: lax.reduce_prod_p.bind(x, axes=(ax,), out_sharding=None),
    "reduce_max": lambda x, ax: lax.reduce_max_p.bind(x, axes=(ax,), out_sharding=None),
    "reduce_min": lambda x, ax: lax.reduce_min_p.bind(x, axes=(ax,), out_sharding=None),
    "reduce_and": lambda x, ax: lax.reduce_and_p.bind(x, axes=(ax,)),
    "reduce_or": lambda x, ax: lax.reduce_or_p.bind(x, axes=(ax,)),
    "reduce_xor": lambda x, ax: lax.reduce_xor_p.bind(x, axes=(ax,)),
    "argmax": lambda x, ax: lax.argmax(x, ax, jnp.int32),
    "argmin": lambda x, ax: lax.argmin(x, ax, jnp.int32),
}
REDUCTIONS = [_reduction(p, f, ax) for p, f in _REDUCERS.items() for ax in (1, 0)]

CUMULATIVE = [
    Case(f"{name}[axis{ax}{'-rev' if rev else ''}]", name, "cumulative",
         (lambda f, name, ax, rev: lambda x: f(x[_input(name, ax)], axis=ax, reverse=rev))(
             getattr(lax, name), name, ax, rev))
    for name in ("cumsum", "cumprod", "cummax", "cummin", "cumlogsumexp")
    for ax, rev in ((1, False), (1, True), (0, False))]


def cast_cases(source, targets) -> list[Case]:
    """``convert_element_type`` from ``source`` to every target dtype,
    ``bitcast_convert_type`` to every target of the same width."""
    out = []
    for t in targets:
        dt = jnp.dtype(t)
        out.append(Case(f"convert_element_type[{t}]", "convert_element_type", "cast",
                        (lambda dt: lambda x: lax.convert_element_type(x["a"], dt))(dt), t))
        if dt.itemsize == jnp.dtype(source).itemsize and "4" not in (t[-1], source[-1]):
            out.append(Case(f"bitcast_convert_type[{t}]", "bitcast_convert_type", "cast",
                            (lambda dt: lambda x: lax.bitcast_convert_type(x["a"], dt))(dt), t))
    return out


CASES = UNARY + BINARY + TERNARY + REDUCTIONS + CUMULATIVE   # + cast_cases(the dtypes)

# Special functions run on float32 only: XLA's CPU compile of them costs as much as
# every other case of a dtype together (the CI budget); no backend but the XLA-based
# interpreters computes them. ``differential_corpus.py --all-special`` runs them on
# every float dtype.
FLOAT32_ONLY = {"lgamma", "digamma", "erf_inv", "erfc", "igammac", "igamma_grad_a",
                "regularized_incomplete_beta", "zeta", "polygamma", "bessel_i0e", "bessel_i1e"}

# 8-bit floats run the arithmetic, comparisons, selections, reductions, scans and casts,
# not the math functions: XLA computes those in float32 and rounds once, and its CPU
# compile of them on 8-bit floats costs a minute per interpreter.
FLOAT8_MATH = {c.primitive for c in UNARY} - {
    "abs", "neg", "sign", "copy", "floor", "ceil", "round", "is_finite", "square",
    "integer_pow", "reduce_precision"} | {"pow", "atan2", "atan2pi", "nextafter", "fma", "fmuladd"}

# The public primitives no case covers, with the reason.
_STRUCTURAL = "moves or reshapes data, computes nothing per element (the conformance suite)"
_COLLECTIVE = "a collective or sharding operation: needs a mesh, not one kernel"
_CONTROL = "control flow or a higher-order primitive: its body's primitives are the cases"
NOT_IN_CORPUS = {
    **{p: _STRUCTURAL for p in (
        "broadcast_in_dim", "concatenate", "dynamic_slice", "dynamic_update_slice", "gather",
        "iota", "pad", "reshape", "rev", "slice", "split", "squeeze", "stack", "tile",
        "transpose", "unstack", "scatter", "scatter-add", "scatter-sub", "scatter-mul",
        "scatter-min", "scatter-max", "sort", "top_k", "approx_top_k", "device_put",
        "optimization_barrier", "stop_gradient", "stage")},
    **{p: _COLLECTIVE for p in (
        "all_gather", "all_to_all", "axis_index", "pmax", "pmin", "ppermute", "psum",
        "ragged_all_to_all", "sharding_constraint")},
    **{p: _CONTROL for p in ("cond", "while", "scan", "custom_linear_solve", "reduce")},
    **{p: "complex numbers: no backend declares a complex dtype"
       for p in ("complex", "conj", "real", "imag")},
    **{p: "a windowed reduction (convolution-like), not an elementwise or row reduction"
       for p in ("reduce_window", "reduce_window_max", "reduce_window_min", "reduce_window_sum",
                 "select_and_gather_add", "select_and_scatter", "select_and_scatter_add",
                 "conv_general_dilated")},
    "dot_general": "a contraction: accumulation order and precision are the backend's "
                   "(the matmul tests of each plugin)",
    "igamma": "XLA on CPU takes 40 s to compile one (a CI budget of its own); igammac, "
              "its complement, is in the corpus",
    "fft": "no backend lowers it in a kernel",
    "rng_bit_generator": "random bits: no reference value to compare with",
    "rng_uniform": "random bits: no reference value to compare with",
    "after_all": "tokens, no values",
    "create_token": "tokens, no values",
    # names that backends' emitter tables use for the same primitives
    "broadcast_to": _STRUCTURAL, "expand_dims": _STRUCTURAL, "copy_p": _STRUCTURAL,
    "add_any": "the autodiff sum: lowers as add (the add case)",
    "max_contiguous": "a compiler hint", "multiple_of": "a compiler hint",
    "reshard": _COLLECTIVE,
    **{p: "not a primitive of this JAX (a name a backend's table keeps for others)"
       for p in ("log2", "reciprocal")},
}


def public_primitives() -> set[str]:
    """The names of the primitives ``jax.lax`` exports."""
    from jax.extend.core import Primitive
    return {getattr(lax, n).name for n in dir(lax) if n.endswith("_p")
            and isinstance(getattr(lax, n), Primitive)}


# --- inputs --------------------------------------------------------------------------

def _float_specials(dt) -> list[float]:
    fi = jnp.finfo(dt)
    sub = float(fi.smallest_subnormal)
    vals = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, sub, -sub, float(fi.tiny) - sub,
            -(float(fi.tiny) - sub), float(fi.tiny), -float(fi.tiny), float(fi.max),
            -float(fi.max), 1.0, -1.0, 0.5, -0.5, 1.5, -2.5, 2.5, 88.7, 100.0, -100.0, 1e-3]
    return vals


def _int_specials(dt) -> list[int]:
    ii = jnp.iinfo(dt)
    bits = ii.bits
    vals = [int(ii.min), int(ii.min) + 1, 0, 1, 2, 7, bits - 1, bits, bits + 1,
            int(ii.max) - 1, int(ii.max), int(ii.max) // 2, int(ii.max) // 2 + 1]
    if ii.min < 0:
        vals += [-1, -2, -7, -bits]
    return sorted({v for v in vals if ii.min <= v <= ii.max})


def kind_of(dtype: str) -> str:
    dt = jnp.dtype(dtype)
    if dt == jnp.bool_:
        return "bool"
    if jnp.issubdtype(dt, jnp.floating):
        return "float"
    return "int"


def specials(dtype: str) -> np.ndarray:
    """The edge values of ``dtype``, as an array of it (NaN of both signs, ±inf, ±0,
    denormals, the extremes; integer min/max and the overflow and shift edges)."""
    dt = jnp.dtype(dtype)
    k = kind_of(dtype)
    if k == "bool":
        return np.array([False, True])
    if k == "int":
        return np.array(_int_specials(dt), object).astype(dt)
    # through float64 keeps the NaN's sign and each denormal (ml_dtypes rounds once)
    return np.array(_float_specials(dt), np.float64).astype(dt)


def _random(rng, dtype: str, n: int) -> np.ndarray:
    dt = jnp.dtype(dtype)
    k = kind_of(dtype)
    if k == "bool":
        return rng.random(n) < 0.5
    if k == "int":
        ii = jnp.iinfo(dt)
        via = dt if dt.itemsize == 8 else np.int64      # int4 and uint4: through int64
        return rng.integers(int(ii.min), int(ii.max), n, endpoint=True, dtype=via).astype(dt)
    scale = rng.choice([1e-3, 0.3, 1.0, 10.0, 1e3], n)
    x = np.where(rng.random(n) < 0.2, rng.uniform(-1, 1, n), rng.standard_normal(n) * scale)
    return x.astype(dt)


def _exact_rows(rng, dtype: str, n: int) -> np.ndarray:
    """Values whose sums and products are exact in ``dtype`` whatever the order:
    mostly ±1, a few ±0.5 and ±2 (partial sums and products stay far inside 8
    significant bits and the float16 range)."""
    x = rng.choice([1.0, -1.0], n)
    pick = rng.random(n)
    x[pick < 0.03] *= 0.5
    x[pick > 0.97] *= 2.0
    return x.astype(jnp.dtype(dtype))


def operands(dtype: str, rng) -> dict[str, np.ndarray]:
    """The operands of SHAPE every case reads: a, b, c (``dtype``), pred (bool),
    which (int32 in 0..2), and r1/s1, r0/s0 for reductions along axis 1 and 0.
    The first len(specials)**2 elements of (a, b) are every pair of edge values;
    c mixes edge values into random ones. r (max, min, argmax, ...) and s (sums
    and products) hold one edge pattern per reduced line, chosen so that the
    result does not depend on the order of the reduction."""
    n = SHAPE[0] * SHAPE[1]
    s = specials(dtype)
    pairs = np.array(np.meshgrid(np.arange(len(s)), np.arange(len(s)))).reshape(2, -1)
    pairs = pairs[:, :n]
    a, b, c = (_random(rng, dtype, n) for _ in range(3))
    a[:pairs.shape[1]], b[:pairs.shape[1]] = s[pairs[0]], s[pairs[1]]
    for x in (a, b, c):         # edge values at random places of the random part too
        pick = rng.random(n) < 0.1
        pick[:pairs.shape[1]] = False
        x[pick] = rng.choice(s, int(pick.sum()))
    out = {"a": a.reshape(SHAPE), "b": b.reshape(SHAPE), "c": c.reshape(SHAPE),
           "pred": (rng.random(n) < 0.5).reshape(SHAPE),
           "which": rng.integers(0, 3, SHAPE).astype(np.int32)}
    rows, cols = SHAPE
    out["r1"], out["s1"] = _lines(dtype, rng, s, rows, cols)
    r0, s0 = zip(*(_lines(dtype, rng, s, 16, rows) for _ in range(cols // 16)))
    out["r0"], out["s0"] = np.concatenate(r0).T.copy(), np.concatenate(s0).T.copy()
    return out


def _lines(dtype: str, rng, s: np.ndarray, lines: int, length: int):
    """(r, s): ``lines`` (at least 16) lines of ``length`` values, an edge pattern in
    each of the first 16."""
    k = kind_of(dtype)
    r = np.stack([_random(rng, dtype, length) for _ in range(lines)])
    at = lambda frac: int(frac * length)            # noqa: E731 - a position in a line
    if k == "bool":
        r[0, :], r[1, :] = True, False
        return r, r
    if k == "int":
        ii = jnp.iinfo(jnp.dtype(dtype))
        r[0] = rng.choice(s, length)
        r[1, :], r[2, :], r[3, :] = ii.min, ii.max, 0
        r[4, at(0.1)] = r[4, at(0.7)] = ii.max      # argmax: the first of equal maxima
        r[5, at(0.2)] = r[5, at(0.6)] = ii.min
        r[6] = rng.integers(max(int(ii.min), -3), min(int(ii.max), 3), length, endpoint=True)
        return r, r                                 # integer sums wrap alike in any order
    dt = jnp.dtype(dtype)
    nan, inf, fi = np.array(np.nan, dt), np.array(np.inf, dt), jnp.finfo(dt)
    # r: two NaNs of different signs meet in no line (which one max() keeps depends
    # on the order)
    r[1, rng.integers(length)] = nan
    r[2, rng.integers(length)] = -nan
    r[3, at(0.1)] = r[3, at(0.6)] = nan            # argmax/argmin: the first NaN's index
    r[4, at(0.2)], r[4, at(0.8)] = inf, -inf
    r[5, at(0.3)] = r[5, at(0.9)] = np.array(fi.max, dt)
    r[6, :] = np.array(-0.0, dt)
    r[7, ::3], r[7, 1::3] = np.array(0.0, dt), np.array(-0.0, dt)
    r[8] = rng.choice(np.concatenate([s[:1], s[2:]]), length)     # edge values but -NaN
    r[9] = rng.choice(s[1:], length)                               # edge values but +NaN
    r[10] = np.array(fi.smallest_subnormal, dt) * rng.integers(1, 4, length).astype(dt)
    r[11, :] = -inf
    r[12, :] = -nan
    r[13, at(0.4)] = r[13, at(0.5)] = np.array(-fi.max, dt)
    # s: exact in any order, or the same inf or NaN in any order
    x = np.stack([_exact_rows(rng, dtype, length) for _ in range(lines)])
    x[8, rng.integers(length)] = nan
    x[9, rng.integers(length)] = -nan
    x[10, at(0.1)], x[10, at(0.7)] = inf, -inf
    x[11, rng.integers(length)] = inf
    x[12, :] = np.array(-0.0, dt)
    x[13, :] = np.array(fi.max, dt)
    x[14] = np.array(fi.smallest_subnormal, dt) * rng.integers(1, 3, length).astype(dt)
    x[15, :] = -inf
    return r, x
