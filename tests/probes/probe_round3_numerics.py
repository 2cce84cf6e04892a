"""Probe, round 3 (issue 32): edge values through every elementwise, reduction,
cumulative and cast operation, on each interpreter (built-in, Triton's, TPU
interpret mode, Mosaic GPU interpret mode).

Each case runs one jnp/lax expression inside a kernel on fresh random data
seeded with NaN of both signs, +-inf, +-0, denormals, the largest finite
values and integer min/max, and compares with the same expression jitted by
XLA on CPU. Exact operations (sign, min/max, rounding, casts, integer
arithmetic, comparisons, argmax, ...) must agree bit for bit (a NaN: same
position and sign); approximate ones (transcendentals, sums) must put NaN and
inf where XLA does and be within a few ULP elsewhere (a result below the
smallest normal may be flushed). A difference the backend declares
(pallas_triton.manifests.XLA_DIFFERENCES) is checked with its declared bound.

The built-in interpreter's float32 cases run by default; the rest are
``slow`` (PALLAS_PROBES_ALL=1 or tests/probes/run.py round3_numerics)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import pallas_frontend as pl
from probes.common import Case
from probes.probe_round3_structure import interpret_of

SHAPE = (8, 128)
BF16, F16, F32 = jnp.bfloat16, jnp.float16, jnp.float32


NEEDS = {"builtin": None, "triton": "pallas_triton", "tpu": "pallas_tpu", "mgpu": "pallas_mgpu"}


# --- inputs ------------------------------------------------------------------

def _float_edges(dtype):
    info = jnp.finfo(dtype)
    tiny, dmin = float(info.tiny), float(info.smallest_subnormal)
    big = float(info.max)
    return [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, dmin, -dmin, tiny, -tiny, tiny / 2,
            -tiny / 3, big, -big, big / 2, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 1.5, -3.5, 88.7,
            -88.7, 100.0, -100.0, 1e-7, 709.0, 3.0, np.pi, -np.pi / 2]


def _int_edges(dtype):
    info = np.iinfo(dtype)
    vals = [info.min, info.max, 0, 1, info.max - 1, info.min + 1, 2, 3, 7, 8, 15, 31, 32, 33]
    if info.min < 0:
        vals += [-1, -2, -7, -8, -31, -32, -33]
    return [v for v in vals if info.min <= v <= info.max]


def _edge_array(rng, dtype, shape=SHAPE):
    """Fresh random data with every edge value at a random position."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape))
    if dtype == np.bool_:
        return jnp.asarray(rng.integers(0, 2, shape).astype(bool))
    if jnp.issubdtype(dtype, jnp.integer):
        info = np.iinfo(dtype)
        flat = rng.integers(info.min, int(info.max) + 1, n, dtype=np.int64)
        small = rng.integers(-40, 41, n // 2)      # small values: shifts, division
        flat[: n // 2] = np.clip(small, info.min, info.max)
        edges = _int_edges(dtype)
    else:
        scale = 10.0 ** rng.uniform(-4, 4, n)
        flat = rng.standard_normal(n) * scale
        edges = _float_edges(dtype)
    pos = rng.permutation(n)[: len(edges)]
    flat[pos] = edges
    if jnp.issubdtype(dtype, jnp.integer):
        return jnp.asarray(flat.astype(dtype).reshape(shape))
    return jnp.asarray(flat.reshape(shape), dtype)


def _pair_arrays(rng, dtype, n):
    """``n`` operands of shape (16, 128): the first half holds every pair of
    edge values of the first two operands (then random fill), the second
    half fresh random data with edges; a third operand is random with edges."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return [jnp.concatenate([_edge_array(rng, dtype), _edge_array(rng, dtype)])
                for _ in range(n)]
    edges = _int_edges(dtype) if jnp.issubdtype(dtype, jnp.integer) else _float_edges(dtype)
    k = len(edges)
    firsts = [np.repeat(np.asarray(edges, np.float64), k), np.tile(np.asarray(edges, np.float64), k)]
    out = []
    for j in range(n):
        fill = np.asarray(_edge_array(rng, dtype)).reshape(-1).astype(np.float64)
        head = fill.copy()
        if j < 2:
            head[: k * k] = firsts[j][:1024]
        if jnp.issubdtype(dtype, jnp.integer):
            head = head.astype(np.int64).astype(dtype)
        half = jnp.asarray(head.reshape(SHAPE), dtype)
        out.append(jnp.concatenate([half, _edge_array(rng, dtype)]))
    return out


# --- comparison ----------------------------------------------------------------

def _bits(a):
    a = np.asarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _first_diff(got, want):
    bad = np.argwhere(got)
    return tuple(int(i) for i in bad[0]) if bad.size else None


def _same(got, want, exact, ulps, scale=None):
    """Where ``got`` is XLA's result ``want`` (elementwise). XLA on CPU flushes
    some denormal results to zero (a compare-and-select, an add): a denormal
    where XLA gives a zero is accepted, a zero where XLA gives a denormal is not."""
    got, want = np.asarray(got), np.asarray(want)
    if want.dtype.kind in "biu":
        return got == want
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    gnan, wnan = np.isnan(g64), np.isnan(w64)
    tiny = float(jnp.finfo(want.dtype).tiny)
    flushed_by_xla = (w64 == 0) & (np.abs(g64) < tiny)
    if exact:
        same = (_bits(got) == _bits(want)) | (gnan & wnan & (np.signbit(g64) == np.signbit(w64)))
    else:
        eps = float(jnp.finfo(want.dtype).eps)
        scale = np.abs(w64) if scale is None else scale
        with np.errstate(invalid="ignore"):
            close = np.abs(g64 - w64) <= ulps * eps * scale + tiny
            same = (gnan & wnan) | (g64 == w64) | (np.isfinite(w64) & np.isfinite(g64) & close)
    return same | flushed_by_xla


def _describe(same, got, want, label):
    at = _first_diff(~same, want)
    got, want = np.asarray(got), np.asarray(want)
    return (f"{(~same).sum()} of {same.size} differ, first at {at}: got {got[at]!r} "
            f"(bits {_bits(got)[at]:#x}) vs {label} {want[at]!r} (bits {_bits(want)[at]:#x})",
            at)


def _compare(got, want, exact, ulps, scale=None):
    """None if ``got`` is XLA's result, else where it is not (and the index)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"shape/dtype {got.shape} {got.dtype}, want {want.shape} {want.dtype}", None
    same = _same(got, want, exact, ulps, scale)
    return (None, None) if same.all() else _describe(same, got, want, "XLA")


# this module's op names -> the primitive names pallas_triton's manifest uses
PRIMITIVE = {"rmin": "reduce_min", "rmax": "reduce_max", "rmax0": "reduce_max",
             "rsum": "reduce_sum", "argmax": "argmax", "argmin": "argmin"}
# ops whose NaN bits the manifest says stay XLA's even from NaN operands
NAN_BITS_KEPT = {"neg", "abs", "sign", "round", "roundaway", "max", "min", "select", "clamp",
                 "toi32", "toi8", "tou8", "tou32", "tobool", "tobf16", "tof16", "tof32"}


def _declared(interp, op, dtype):
    """What a backend declares where ``op`` differs from XLA (pallas_triton's
    README "Deliberate differences from XLA", machine-readable in its
    manifests): ulps (or None), NaN sign free, denormal inputs read as zero."""
    none = {"ulps": None, "nan_sign_free": False, "daz": False}
    if interp != "triton":
        return none
    try:
        from pallas_triton import manifests
    except ImportError:
        return none
    entry = manifests.XLA_DIFFERENCES.get(PRIMITIVE.get(op, op)) or {}
    every = getattr(manifests, "XLA_DIFFERENCES_EVERY_PRIMITIVE", {})
    return {"ulps": entry.get("ulps", {}).get(np.dtype(dtype).name),
            "nan_sign_free": entry.get("nan_bits", True) is False or (
                "nan_from_nan_operands" in every and op not in NAN_BITS_KEPT),
            "daz": "denormal_inputs" in every}


def _denormals_as_zero(x):
    x = np.asarray(x)
    if x.dtype.kind not in "fV" or x.dtype == np.bool_:
        return x
    x64 = x.astype(np.float64)
    tiny = float(jnp.finfo(x.dtype).tiny)
    flushed = np.where((x64 != 0) & (np.abs(x64) < tiny), np.copysign(0.0, x64), x64)
    return jnp.asarray(flushed, x.dtype)


# --- the cases ------------------------------------------------------------------

def _build(interp, name, fn, in_dtypes, exact, ulps, rng):
    if len(in_dtypes) >= 2:              # elementwise with 2-3 operands: every edge pair
        xs = _pair_arrays(rng, in_dtypes[0], len(in_dtypes))
    else:
        xs = [_edge_array(rng, d) for d in in_dtypes]
    want = jax.jit(fn)(*xs)

    def kernel(*refs):
        refs[-1][...] = fn(*[r[...] for r in refs[:-1]])
    kernel.__name__ = kernel.__qualname__ = f"k_{name}"
    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(want.shape, want.dtype),
                       interpret=interpret_of(interp))
    op = name.split("_")[0]
    declared = _declared(interp, op, in_dtypes[0])
    bound, is_exact = ((declared["ulps"], False) if declared["ulps"] is not None
                       else (ulps, exact))

    scale = None
    if op in SUMMED:           # rounding scales with the terms, not the result
        scale = np.asarray(SUMMED[op](*[np.abs(np.asarray(x, np.float64)) for x in xs]))

    references = [("XLA", want, False)]
    truth = TRUTH.get(op)
    if truth is not None and not is_exact:     # XLA's own approximation may be the far one
        with np.errstate(all="ignore"):
            references.append(("float64 NumPy", truth(*[np.asarray(x, np.float64) for x in xs])
                               .astype(want.dtype), False))
    if declared["daz"]:
        xs_daz = [_denormals_as_zero(x) for x in xs]
        if any(not np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
               for a, b in zip(xs, xs_daz)):
            references.append(("XLA on denormals read as zero (declared)",
                               np.asarray(jax.jit(fn)(*xs_daz)), True))

    def check(got):        # a string names the first differing element and its inputs
        got = np.asarray(got)
        if got.shape != want.shape or got.dtype != want.dtype:
            return f"shape/dtype {got.shape} {got.dtype}, want {want.shape} {want.dtype}"
        ok = np.zeros(want.shape, bool)
        notes = set()
        for label, ref, is_declared in references:      # an element may match any of them
            ref = np.asarray(ref)
            g = got
            if declared["nan_sign_free"]:
                g = np.where(np.isnan(ref) & np.isnan(g), ref, g).astype(got.dtype)
            same = _same(g, ref, is_exact, bound, scale)
            strict = _same(got, ref, is_exact, bound, scale)
            if (same & ~strict & ~ok).any():
                notes.add("NaN sign or payload")
            if is_declared and (same & ~ok).any():
                notes.add("denormal inputs read as zero")
            ok |= same
        if ok.all():
            return (True, "declared: " + ", ".join(sorted(notes))) if notes else True
        problem, at = _describe(ok, got, want, "XLA")
        if at is not None and all(x.shape == want.shape for x in xs):
            problem += "; inputs there: " + ", ".join(
                f"{np.asarray(x)[at]!r} ({_bits(x)[at]:#x})" for x in xs)
        return problem
    return (lambda: f(*xs)), check


EXACT, APPROX = True, False
_KEEP = functools.partial

FLOAT_UNARY = {
    "neg": (lambda x: -x, EXACT), "abs": (jnp.abs, EXACT), "sign": (jnp.sign, EXACT),
    "floor": (jnp.floor, EXACT), "ceil": (jnp.ceil, EXACT), "round": (jnp.round, EXACT),
    "roundaway": (lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO), EXACT),
    "trunc": (jnp.trunc, EXACT), "square": (lambda x: x * x, EXACT),
    "recip": (lambda x: 1 / x, EXACT), "isfinite": (jnp.isfinite, EXACT),
    "isnan": (jnp.isnan, EXACT), "signbit": (jnp.signbit, EXACT),
    "sqrt": (jnp.sqrt, APPROX), "rsqrt": (lax.rsqrt, APPROX), "exp": (jnp.exp, APPROX),
    "exp2": (jnp.exp2, APPROX), "log": (jnp.log, APPROX), "log1p": (jnp.log1p, APPROX),
    "expm1": (jnp.expm1, APPROX), "tanh": (jnp.tanh, APPROX), "sin": (jnp.sin, APPROX),
    "cos": (jnp.cos, APPROX), "logistic": (jax.nn.sigmoid, APPROX), "erf": (lax.erf, APPROX),
    "atan": (jnp.arctan, APPROX), "sinh": (jnp.sinh, APPROX), "cbrt": (jnp.cbrt, APPROX),
    "softplus": (jax.nn.softplus, APPROX), "logsigmoid": (jax.nn.log_sigmoid, APPROX),
    "relu": (jax.nn.relu, EXACT), "intpow3": (lambda x: lax.integer_pow(x, 3), APPROX),
}
FLOAT_BINARY = {
    "add": (lambda a, b: a + b, EXACT), "sub": (lambda a, b: a - b, EXACT),
    "mul": (lambda a, b: a * b, EXACT), "div": (lambda a, b: a / b, EXACT),
    "max": (jnp.maximum, EXACT), "min": (jnp.minimum, EXACT), "rem": (lax.rem, EXACT),
    "copysign": (jnp.copysign, EXACT), "nextafter": (jnp.nextafter, EXACT),
    "lt": (lambda a, b: a < b, EXACT), "eq": (lambda a, b: a == b, EXACT),
    "ne": (lambda a, b: a != b, EXACT),
    "select": (lambda a, b: jnp.where(a > b, a, b), EXACT),
    "pow": (jnp.power, APPROX), "atan2": (jnp.arctan2, APPROX),
}
FLOAT_TERNARY = {
    "clamp": (lambda a, b, c: lax.clamp(jnp.minimum(b, c), a, jnp.maximum(b, c)), EXACT),
    "fma": (lambda a, b, c: a * b + c, APPROX),
}
FLOAT_REDUCE = {
    "rsum": (lambda x: jnp.sum(x, axis=1, keepdims=True), APPROX),
    "rmax": (lambda x: jnp.max(x, axis=1, keepdims=True), EXACT),
    "rmin": (lambda x: jnp.min(x, axis=1, keepdims=True), EXACT),
    "argmax": (lambda x: jnp.argmax(x, axis=1, keepdims=True).astype(jnp.int32), EXACT),
    "argmin": (lambda x: jnp.argmin(x, axis=1, keepdims=True).astype(jnp.int32), EXACT),
    "rmax0": (lambda x: jnp.max(x, axis=0, keepdims=True), EXACT),
    "cumsum": (lambda x: jnp.cumsum(x, axis=1), APPROX),
    "cummax": (lambda x: lax.cummax(x, axis=1), EXACT),
    "cummin": (lambda x: lax.cummin(x, axis=0), EXACT),
}
CASTS = {
    "toi32": (lambda x: x.astype(jnp.int32), EXACT),
    "toi8": (lambda x: x.astype(jnp.int8), EXACT),
    "tou8": (lambda x: x.astype(jnp.uint8), EXACT),
    "tou32": (lambda x: x.astype(jnp.uint32), EXACT),
    "tobool": (lambda x: x.astype(jnp.bool_), EXACT), "tobf16": (lambda x: x.astype(BF16), EXACT),
    "tof16": (lambda x: x.astype(F16), EXACT), "tof32": (lambda x: x.astype(F32), EXACT),
}
INT_OPS = {
    "iadd": (lambda a, b: a + b, 2), "imul": (lambda a, b: a * b, 2), "ineg": (lambda a: -a, 1),
    "iabs": (jnp.abs, 1), "imax": (jnp.maximum, 2), "imin": (jnp.minimum, 2),
    "idiv": (lax.div, 2), "irem": (lax.rem, 2), "shl": (lax.shift_left, 2),
    "shrl": (lax.shift_right_logical, 2), "shra": (lax.shift_right_arithmetic, 2),
    "popcnt": (lax.population_count, 1), "clz": (lax.clz, 1), "inot": (lambda a: ~a, 1),
    "icumsum": (lambda a: jnp.cumsum(a, axis=1, dtype=a.dtype), 1),
    "icummax": (lambda a: lax.cummax(a, axis=1), 1),
    "icummin": (lambda a: lax.cummin(a, axis=1), 1),
    "irmax": (lambda a: jnp.max(a, axis=1, keepdims=True), 1),
    "irsum": (lambda a: jnp.sum(a, axis=1, keepdims=True, dtype=a.dtype), 1),
    "iargmax": (lambda a: jnp.argmax(a, axis=1, keepdims=True).astype(jnp.int32), 1),
    "itof32": (lambda a: a.astype(F32), 1),
}
BOOL_OPS = {
    "band": (lambda a, b: a & b, 2), "bxor": (lambda a, b: a ^ b, 2), "bnot": (lambda a: ~a, 1),
    "bany": (lambda a: jnp.any(a, axis=1, keepdims=True), 1),
    "ball": (lambda a: jnp.all(a, axis=1, keepdims=True), 1),
    "bsum": (lambda a: jnp.sum(a, axis=1, keepdims=True, dtype=jnp.int32), 1),
}

# float16/bfloat16 get the subset where narrow-type handling bites
NARROW_OPS = ("neg", "abs", "sign", "round", "exp", "log1p", "expm1", "tanh", "max", "min",
              "add", "mul", "div", "clamp", "rsum", "rmax", "argmax", "cummax", "tof32")
INT_DTYPES = {"int8": jnp.int8, "uint8": jnp.uint8, "int32": jnp.int32, "uint32": jnp.uint32}
INT_WIDE = ("icumsum", "icummax", "icummin", "irmax", "iargmax", "imax", "shl", "shra", "idiv")


def _table():
    rows = []                              # (name, fn, in_dtypes, exact)
    float_ops = {**{k: (f, e, 1) for k, (f, e) in FLOAT_UNARY.items()},
                 **{k: (f, e, 2) for k, (f, e) in FLOAT_BINARY.items()},
                 **{k: (f, e, 3) for k, (f, e) in FLOAT_TERNARY.items()},
                 **{k: (f, e, 1) for k, (f, e) in FLOAT_REDUCE.items()}}
    for k, (f, e, n) in float_ops.items():
        rows.append((f"{k}_f32", f, (F32,) * n, e))
    for k, (f, e) in CASTS.items():
        if k != "tof32":
            rows.append((f"{k}_f32", f, (F32,), e))
    for dname, dt in (("bf16", BF16), ("f16", F16)):
        for k in NARROW_OPS:
            f, e, n = float_ops[k] if k in float_ops else (CASTS[k][0], EXACT, 1)
            rows.append((f"{k}_{dname}", f, (dt,) * n, e))
    rows.append(("tof16_bf16", CASTS["tof16"][0], (BF16,), EXACT))
    rows.append(("tobf16_f16", CASTS["tobf16"][0], (F16,), EXACT))
    for dname, dt in INT_DTYPES.items():
        for k, (f, n) in INT_OPS.items():
            if dname == "int32" or k in INT_WIDE or dname == "int8":
                rows.append((f"{k}_{dname}", f, (dt,) * n, EXACT))
    for k, (f, n) in BOOL_OPS.items():
        rows.append((f"{k}_bool", f, (jnp.bool_,) * n, EXACT))
    return rows


def _erf(x):
    import math
    return np.vectorize(math.erf)(x)


TRUTH = {"fma": lambda a, b, c: (a.astype(np.float32) * b.astype(np.float32)).astype(
             np.float64) + c, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "exp": np.exp, "exp2": np.exp2,
         "log": np.log, "log1p": np.log1p, "expm1": np.expm1, "tanh": np.tanh, "sin": np.sin,
         "cos": np.cos, "logistic": lambda x: 1 / (1 + np.exp(-x)), "erf": _erf,
         "atan": np.arctan, "sinh": np.sinh, "cbrt": np.cbrt,
         "softplus": lambda x: np.logaddexp(0, x), "logsigmoid": lambda x: -np.logaddexp(0, -x),
         "intpow3": lambda x: x ** 3, "pow": np.power, "atan2": np.arctan2}
SUMMED = {"fma": lambda a, b, c: a * b + c, "rsum": lambda x: x.sum(1, keepdims=True),
          "cumsum": lambda x: np.cumsum(x, 1)}
ULPS = 16        # transcendental approximations: XLA's CPU polynomials vs libm/NumPy


def _cases():
    out = []
    table = _table()
    for interp in ("builtin", "triton", "tpu", "mgpu"):
        for name, fn, dts, exact in table:
            ulps = ULPS if dts[0] == F32 else 2
            slow = interp != "builtin" or dts[0] != F32     # CI runs the f32 built-in ones
            out.append(Case(f"{interp}-{name}", _KEEP(_build, interp, name, fn, dts, exact, ulps),
                            (f"k_{name}",), needs=NEEDS[interp], slow=slow, tol=0.0))
    return out


CASES = _cases()
