"""Float edge values (NaN of both signs, ±inf, ±0, denormals, overflow) and integer scans:
the generated kernel under Triton's interpreter vs the same jnp/lax code jitted by XLA on
CPU, bit for bit, on fresh random data with the edge values planted in it.

Before float_edges.py (issue 32): sign(NaN) gave 0 and sign(-0.0) +0.0; clamp and
max/min dropped a NaN operand or bound, or the sign of -0.0; argmax/argmin skipped NaN;
log1p(inf), expm1(inf), expm1(100) gave NaN and expm1(88.7) inf; round(-0.0) gave +0.0;
bfloat16 NaN lost its sign and min/max flushed bfloat16 denormals; integer cummax/cummin
crashed the interpreter; debug_print showed bfloat16 as raw bits.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import pallas_frontend as pl
import pallas_triton as pt
from pallas_triton import manifests
from jax_window import LAX_ONE_MINUS_SQUARE

TRITON = dict(interpret=pt.InterpretParams())
FLOATS = [jnp.float32, jnp.bfloat16, jnp.float16]
INTS = [jnp.int8, jnp.uint8, jnp.int32, jnp.uint32]
SHAPE = (16, 64)


def _name(d):
    return np.dtype(d).name


def edge_values(dtype) -> np.ndarray:
    """NaN of both signs, ±inf, ±0, ±denormals, ±the largest finite, halves, ±1."""
    info = jnp.finfo(dtype)
    tiny = float(info.smallest_subnormal)
    return np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, tiny, -tiny, 3 * tiny,
                     -5 * tiny, float(info.max), -float(info.max), 0.5, -0.5, 1.5, -2.5,
                     1.0, -1.0], np.float64)


def float_data(rng, dtype, shape=SHAPE, scale=(1e-3, 1.0, 30.0)) -> jnp.ndarray:
    """Random normals at mixed scales with every edge value planted several times."""
    x = rng.standard_normal(shape) * rng.choice(scale, shape)
    flat = x.reshape(-1)
    edges = edge_values(dtype)
    picks = rng.choice(flat.size, size=len(edges) * 4, replace=False)
    flat[picks] = np.tile(edges, 4)
    return jnp.asarray(x.astype(np.float32)).astype(dtype)   # ml_dtypes keeps NaN's sign


def bits(a) -> np.ndarray:
    a = np.asarray(a)
    return a.view(f"uint{a.dtype.itemsize * 8}")


def _flushed(a: np.ndarray) -> np.ndarray:
    """``a`` with denormals and -0.0 replaced by +0.0."""
    tiny = float(jnp.finfo(a.dtype).tiny)
    wide = a.astype(np.float32)
    return np.where(np.abs(wide) < tiny, 0.0, wide).astype(a.dtype)


def assert_like_xla(got, expect, *, ulps=0, nan_bits=True, flush=False):
    """Bit for bit (NaN payload and sign too when ``nan_bits``; denormals compared as
    +0.0 when ``flush``, as -0.0 is); finite results within ``ulps`` units in the last
    place where the comparison names a bound."""
    got, expect = np.asarray(got), np.asarray(expect)
    assert got.dtype == expect.dtype and got.shape == expect.shape
    if flush:
        got, expect = _flushed(got), _flushed(expect)
    g, e = bits(got).astype(np.int64), bits(expect).astype(np.int64)
    nan_g, nan_e = np.isnan(got.astype(np.float32)), np.isnan(expect.astype(np.float32))
    np.testing.assert_array_equal(nan_g, nan_e, err_msg="NaN where XLA has none, or none where it has")
    same = g == e
    if not nan_bits:
        same |= nan_g & nan_e
    if ulps:
        sign = np.int64(1) << (got.dtype.itemsize * 8 - 1)
        to_line = lambda b: np.where(b & sign, -(b & ~sign), b)   # ordered integers
        same |= ~nan_e & (np.abs(to_line(g) - to_line(e)) <= ulps)
    bad = np.flatnonzero(~same)
    assert not bad.size, (f"{bad.size} elements differ from XLA, e.g. got "
                          f"{[hex(v) for v in g.reshape(-1)[bad[:6]]]} vs XLA "
                          f"{[hex(v) for v in e.reshape(-1)[bad[:6]]]} "
                          f"({got.reshape(-1)[bad[:6]]} vs {expect.reshape(-1)[bad[:6]]})")


def run_like_xla(fn, *args):
    """``fn`` in a Pallas kernel under Triton's interpreter, and jitted by XLA."""
    outs = jax.eval_shape(fn, *args)

    def body(*refs):
        refs[-1][...] = fn(*[r[...] for r in refs[:-1]])
    got = pl.pallas_call(body, out_shape=outs, **TRITON)(*args)
    return got, jax.jit(fn)(*args)


# --- sign, round ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=_name)
def test_sign(rng, dtype):
    if jnp.issubdtype(dtype, jnp.floating):
        x = float_data(rng, dtype)
    else:
        info = np.iinfo(dtype)
        x = jnp.asarray(rng.integers(info.min, int(info.max) + 1, SHAPE).astype(dtype))
    assert_like_xla(*run_like_xla(jnp.sign, x))


@pytest.mark.parametrize("dtype", FLOATS, ids=_name)
@pytest.mark.parametrize("method", ["away_from_zero", "to_nearest_even"])
def test_round_keeps_the_sign(rng, dtype, method):
    x = float_data(rng, dtype, scale=(0.3, 3.0))
    mode = lax.RoundingMethod.AWAY_FROM_ZERO if method == "away_from_zero" else \
        lax.RoundingMethod.TO_NEAREST_EVEN
    assert_like_xla(*run_like_xla(lambda v: lax.round(v, mode), x))


# --- max, min, clamp --------------------------------------------------------------------

def _all_pairs(rng, dtype):
    """Every (edge, edge) pair, and random pairs around them."""
    e = edge_values(dtype)
    a, b = (np.asarray(v).reshape(-1) for v in np.meshgrid(e, e))
    x, y = (np.asarray(float_data(rng, dtype), np.float64).reshape(-1) for _ in range(2))
    x[:a.size], y[:b.size] = a, b
    return tuple(jnp.asarray(v.reshape(SHAPE).astype(np.float32)).astype(dtype) for v in (x, y))


@pytest.mark.parametrize("dtype", FLOATS, ids=_name)
@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min(rng, dtype, op):
    fn = jnp.maximum if op == "max" else jnp.minimum
    x, y = _all_pairs(rng, dtype)
    assert_like_xla(*run_like_xla(fn, x, y))
    assert_like_xla(*run_like_xla(fn, y, x))


@pytest.mark.parametrize("dtype", FLOATS, ids=_name)
def test_clamp_with_nan_operands_and_bounds(rng, dtype):
    x, lo = _all_pairs(rng, dtype)
    hi = float_data(rng, dtype)
    assert_like_xla(*run_like_xla(lambda a, b, c: lax.clamp(b, a, c), x, lo, hi))
    assert_like_xla(*run_like_xla(lambda a, b, c: lax.clamp(b, a, c), lo, x, hi))
    # Scalar bounds: XLA's NaN sign, sign of zero and denormal results here depend on how
    # it simplifies the clamp (constant bounds, broadcasts); NaN-ness and values are
    # compared, denormals as zero (README, "Deliberate differences from XLA").
    for lo_s, hi_s in [(-1.0, 1.0), (np.nan, 1.0), (-1.0, np.nan), (-0.0, 0.0), (0.0, -0.0),
                       (2.0, 1.0), (-np.inf, np.inf)]:
        bounds = jnp.asarray(lo_s, dtype), jnp.asarray(hi_s, dtype)
        assert_like_xla(*run_like_xla(lambda a: lax.clamp(bounds[0], a, bounds[1]), x),
                        nan_bits=False, flush=True)
        assert_like_xla(*run_like_xla(lambda a, b, c: lax.clamp(b, a, c), x, *bounds),
                        nan_bits=False, flush=True)


# --- argmax, argmin ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS, ids=_name)
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_extremum_takes_the_first_nan(rng, dtype, op):
    x = np.asarray(float_data(rng, dtype), np.float64)
    x[::3] = np.where(np.isnan(x[::3]), 0.5, x[::3])        # some rows without NaN
    x[1, [7, 3, 40]] = [np.nan, -np.nan, np.nan]            # several NaNs in one row
    x[2, :] = 2.0                                           # ties: the lowest index
    x = jnp.asarray(x.astype(np.float32)).astype(dtype)
    fn = getattr(jnp, op)
    for axis in (0, 1):
        assert_like_xla(*run_like_xla(lambda v: fn(v, axis=axis), x))


# --- log1p, expm1 -----------------------------------------------------------------------

# Triton's exp/log (NumPy's under the interpreter, libdevice on a GPU) are not XLA's CPU
# approximations: finite results agree within the declared units in the last place.
TRANSCENDENTAL_ULPS = manifests.XLA_DIFFERENCES["expm1"]["ulps"]
assert manifests.XLA_DIFFERENCES["log1p"]["ulps"] == TRANSCENDENTAL_ULPS

# op -> (jax function, input range) for the declared math bounds
MATH = {"exp": (jnp.exp, (-87, 88.7)), "exp2": (jnp.exp2, (-120, 120)),
        "log": (jnp.log, (1e-30, 1e30)), "log2": (jnp.log2, (1e-30, 1e30)),
        "rsqrt": (lax.rsqrt, (1e-30, 1e30)), "tanh": (jnp.tanh, (-10, 10)),
        "logistic": (jax.nn.sigmoid, (-9, 9)), "sin": (jnp.sin, (-100, 100)),
        "cos": (jnp.cos, (-100, 100)), "tan": (jnp.tan, (-1.5, 1.5)), "erf": (lax.erf, (-4, 4)),
        "atan": (jnp.arctan, (-10, 10)), "asin": (jnp.arcsin, (-1, 1)),
        "acos": (jnp.arccos, (-1, 1)), "asinh": (jnp.arcsinh, (-10, 10)),
        "acosh": (jnp.arccosh, (1, 10)), "atanh": (jnp.arctanh, (-1, 1)),
        "cbrt": (jnp.cbrt, (-100, 100)), "erf_inv": (lax.erf_inv, (-0.9999, 0.9999)),
        "sinh": (jnp.sinh, (-89, 89)), "cosh": (jnp.cosh, (-89, 89)),
        "log1p": (jnp.log1p, (-0.9, 10)), "expm1": (jnp.expm1, (-10, 10))}


def _uniform(rng, lo, hi, dtype):
    if lo > 0 and hi / lo > 1e6:                    # log-uniform over many decades
        x = np.exp(rng.uniform(np.log(lo), np.log(hi), SHAPE))
    else:
        x = rng.uniform(lo, hi, SHAPE)
    return jnp.asarray(x.astype(np.float32)).astype(dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=_name)
@pytest.mark.parametrize("op", MATH)
def test_math_within_the_declared_ulps(rng, op, dtype):
    """Every bound manifests.XLA_DIFFERENCES declares holds (and no math op differs from
    XLA without being declared there)."""
    fn, (lo, hi) = MATH[op]
    ulps = manifests.XLA_DIFFERENCES[op]["ulps"][_name(dtype)]
    assert_like_xla(*run_like_xla(fn, _uniform(rng, lo, hi, dtype)), ulps=ulps)


@pytest.mark.parametrize("op", ["sinh", "cosh"])
def test_sinh_cosh_accurate_near_zero_and_up_to_overflow(rng, op):
    """exp(x) - exp(-x) cancelled near 0 (sinh(3.1e-6) was 3.0994e-6, 170000 ULP off) and
    exp overflowed before sinh/cosh do (89.4 gives 3.35e38)."""
    x = np.concatenate([rng.uniform(-1, 1, 400) * 10.0 ** rng.integers(-7, 1, 400),
                        rng.uniform(-89.4, 89.4, 100), [89.4, -89.4, 89.5, 0.0, -0.0]])
    x = np.pad(x, (0, SHAPE[0] * SHAPE[1] - x.size)).astype(np.float32).reshape(SHAPE)
    fn, ref = getattr(jnp, op), getattr(np, op)
    got, expect = run_like_xla(fn, jnp.asarray(x))
    assert_like_xla(got, expect, ulps=manifests.XLA_DIFFERENCES[op]["ulps"]["float32"])
    exact = ref(x.astype(np.float64))
    finite = np.isfinite(exact.astype(np.float32))
    np.testing.assert_allclose(np.asarray(got)[finite], exact[finite], rtol=4e-7, atol=0)
    assert np.array_equal(np.isinf(np.asarray(got)), ~finite)
    if op == "sinh":
        assert np.signbit(np.asarray(got)[x == 0]).tolist() == np.signbit(x[x == 0]).tolist()


@pytest.mark.parametrize("dtype", FLOATS, ids=_name)
def test_log1p_expm1_at_the_edges(rng, dtype):
    x = np.asarray(float_data(rng, dtype, scale=(1e-5, 1e-2, 1.0, 20.0)), np.float64)
    big = [100.0, 88.7, 88.0, 87.0, -100.0, 3e38, -1.0, -1.5] if dtype == jnp.float32 \
        else [100.0, 88.7, 11.0, 10.5, -100.0, -1.0, -1.5]
    x[0, :len(big)] = big
    x = jnp.asarray(x.astype(np.float32)).astype(dtype)
    ulps = TRANSCENDENTAL_ULPS[_name(dtype)]
    # XLA's log1p NaN has all bits set (its log's own NaN): NaN-ness compared, not bits
    assert_like_xla(*run_like_xla(jnp.log1p, x), ulps=ulps, nan_bits=False)
    assert_like_xla(*run_like_xla(jnp.expm1, x), ulps=ulps)


def test_expm1_overflow_point():
    """expm1 is finite up to exp's own overflow: 88.7 gives 3.3e38, not inf."""
    x = jnp.asarray([88.7, 88.72, 88.73, 100.0, np.inf, -np.inf, 1.0, 1.5], jnp.float32)
    got, expect = run_like_xla(jnp.expm1, x)
    np.testing.assert_array_equal(np.isinf(got), np.isinf(expect))
    assert 3.3e38 < float(got[0]) < 3.4e38
    assert_like_xla(got, expect, ulps=TRANSCENDENTAL_ULPS["float32"])


@pytest.mark.parametrize("dtype", FLOATS, ids=_name)
def test_pow_of_two_tensors(rng, dtype):
    """16-bit pow with a tensor base crashed the interpreter (its widened base was taken
    for a literal and put in tl.full)."""
    x = jnp.asarray(rng.uniform(0, 4, SHAPE).astype(np.float32)).astype(dtype)
    y = jnp.asarray(rng.uniform(-4, 4, SHAPE).astype(np.float32)).astype(dtype)
    ulps = manifests.XLA_DIFFERENCES["pow"]["ulps"][_name(dtype)]
    assert_like_xla(*run_like_xla(lax.pow, x, y), ulps=ulps)
    assert_like_xla(*run_like_xla(lambda b: lax.pow(jnp.asarray(2.0, dtype), b), y), ulps=ulps)


@pytest.mark.parametrize("dtype", FLOATS, ids=_name)
def test_reductions_as_declared(rng, dtype):
    """max/min reductions and scans: XLA's results, NaN-ness for NaN (which NaN is
    declared as order-dependent); sums within the declared count * eps * sum(|terms|)."""
    x = float_data(rng, dtype)
    for op, fn in [("reduce_max", lambda v: jnp.max(v, axis=1)),
                   ("reduce_min", lambda v: jnp.min(v, axis=0)),
                   ("cummax", lambda v: lax.cummax(v, axis=1)),
                   ("cummin", lambda v: lax.cummin(v, axis=0, reverse=True))]:
        assert not manifests.XLA_DIFFERENCES[op]["nan_bits"]
        assert_like_xla(*run_like_xla(fn, x), nan_bits=False)
    # the sign of zero and denormals: XLA's scan starts from +0.0, its max keeps a denormal
    # (values whose sums are exact, so the order of summation does not matter)
    # (XLA's float16 scans flush float16 denormals: within the declared sum bound)
    tiny = float(jnp.finfo(dtype).smallest_subnormal) if dtype != jnp.float16 else 0.0
    zeros = rng.choice([0.0, -0.0, tiny, -tiny, 1.0, -1.0, 2.0], SHAPE)
    zeros[:4] = -0.0
    zeros = jnp.asarray(zeros.astype(np.float32)).astype(dtype)
    for fn in (lambda v: lax.cumsum(v, axis=1), lambda v: lax.cumsum(v, axis=0),
               lambda v: lax.cumprod(v[:4], axis=1), lambda v: jnp.max(v, axis=1),
               lambda v: jnp.min(v, axis=1)):
        assert_like_xla(*run_like_xla(fn, zeros), nan_bits=False)
    finite = jnp.asarray(rng.standard_normal(SHAPE).astype(np.float32)).astype(dtype)
    eps = float(jnp.finfo(dtype).eps)
    terms = np.abs(np.asarray(finite, np.float64))
    for op, fn, bound in [
            ("reduce_sum", lambda v: jnp.sum(v, axis=1), SHAPE[1] * terms.sum(1)),
            ("cumsum", lambda v: lax.cumsum(v, axis=1),
             np.arange(1, SHAPE[1] + 1) * np.cumsum(terms, axis=1))]:
        assert manifests.XLA_DIFFERENCES[op]["sum_abs_eps"]
        got, expect = (np.asarray(v, np.float64) for v in run_like_xla(fn, finite))
        assert np.all(np.abs(got - expect) <= eps * bound), op


@pytest.mark.parametrize("dtype", FLOATS, ids=_name)
@pytest.mark.parametrize("y", [3, -2])
def test_integer_pow_rounds_each_product(rng, dtype, y):
    """bfloat16 x ** 3 under the interpreter multiplied in float32 and rounded once
    (1 ULP from XLA's bfloat16 products in 283 of 2048 elements)."""
    assert_like_xla(*run_like_xla(lambda v: lax.integer_pow(v, y), float_data(rng, dtype)))


@LAX_ONE_MINUS_SQUARE
@pytest.mark.parametrize("dtype", INTS + FLOATS, ids=_name)
def test_one_minus_square(rng, dtype):
    """tanh's JVP factor: on integers it was computed in float (1.0 - x * x) and lost the
    wrapping product; on floats 1 - x * x was 300 ULP from XLA's (1 - x) * (1 + x) at
    x = 0.001."""
    if jnp.issubdtype(dtype, jnp.integer):
        info = np.iinfo(dtype)
        x = jnp.asarray(rng.integers(info.min, int(info.max) + 1, SHAPE).astype(dtype))
    else:
        x = float_data(rng, dtype, scale=(1e-3, 1.0, 30.0))
    assert_like_xla(*run_like_xla(lax.one_minus_square, x))


def test_uint64_arithmetic_shift_and_literals(rng):
    """uint64 shift_right_arithmetic came out as float64 bits (int64 >> uint64 is promoted
    to float), and a uint64 literal past int64 (the sign fill) was made a float."""
    with jax.enable_x64(True):
        x = jnp.asarray(rng.integers(0, 2 ** 64, SHAPE, dtype=np.uint64))
        y = jnp.asarray(rng.integers(0, 70, SHAPE).astype(np.uint64))
        assert_like_xla(*run_like_xla(lax.shift_right_arithmetic, x, y))
        assert_like_xla(*run_like_xla(
            lambda v: lax.shift_right_arithmetic(v, jnp.asarray(3, jnp.uint64)), x))


# --- integer scans ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", INTS, ids=_name)
@pytest.mark.parametrize("op", ["cummax", "cummin"])
def test_integer_cummax_cummin(rng, dtype, op):
    info = np.iinfo(dtype)
    x = rng.integers(info.min, int(info.max) + 1, (8, 16), dtype=np.int64)
    x.reshape(-1)[rng.choice(x.size, 6, replace=False)] = [info.min, info.max] * 3
    x = jnp.asarray(x.astype(dtype))
    fn = getattr(lax, op)
    for axis in (0, 1):
        for reverse in (False, True):
            assert_like_xla(*run_like_xla(lambda v: fn(v, axis=axis, reverse=reverse), x))


# --- bfloat16 NaN sign, debug_print -----------------------------------------------------

def test_bf16_nan_keeps_its_sign(rng):
    """Every bf16 op under the interpreter is computed in float32 and rounded back; the
    rounding keeps a NaN's sign as XLA's conversion does."""
    x, y = (float_data(rng, jnp.bfloat16) for _ in range(2))
    for fn in (lambda a, b: a + b, lambda a, b: a * b - b, lambda a, b: -a / b,
               lambda a, b: jnp.abs(a) + 0 * b, lambda a, b: a.astype(jnp.float32) + b.astype(jnp.float32)):
        assert_like_xla(*run_like_xla(fn, x, y))
    f = float_data(rng, jnp.float32)
    assert_like_xla(*run_like_xla(lambda v: v.astype(jnp.bfloat16), f))


def test_debug_print_shows_bf16_values(capfd):
    def body(x_ref, o_ref):
        pl.debug_print("bf16 value", x_ref[...])
        o_ref[...] = x_ref[...]
    x = jnp.asarray([1.5, -2.25], jnp.bfloat16)
    pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((2,), jnp.bfloat16),
                   **TRITON)(x).block_until_ready()
    out = capfd.readouterr().out
    assert "1.5" in out and "-2.25" in out and "16320" not in out, out


# --- the generated GPU source -----------------------------------------------------------

@pytest.mark.parametrize("target", [("cuda", 90), ("hip", "gfx942")], ids=str)
def test_edge_ops_compile(target):
    """The same emitters write the GPU kernel: every op above, each float type and the
    integer scans, through Triton's compiler."""
    fns = [jnp.sign, jnp.round, lambda v: lax.round(v, lax.RoundingMethod.TO_NEAREST_EVEN),
           jnp.log1p, jnp.expm1, lambda v: jnp.minimum(v, v * 2), lambda v: jnp.maximum(v, 1.0),
           lambda v: lax.clamp(v * 0.5, v, v * 2), lambda v: jnp.argmax(v, axis=1),
           lambda v: jnp.argmin(v, axis=0), jnp.sinh, jnp.cosh, lambda v: lax.pow(v, v)]
    for dtype in FLOATS:
        x = jax.ShapeDtypeStruct((8, 32), dtype)
        outs = [jax.eval_shape(f, x) for f in fns]

        def body(x_ref, *o_refs):
            for f, o in zip(fns, o_refs):
                o[...] = f(x_ref[...])
        call = pl.pallas_call(body, out_shape=outs)
        asm = pt.compile_for_target(lambda a: call(a), x, target=target)
        assert asm["ptx"] if target[0] == "cuda" else asm["hsaco"]
    for dtype in INTS:
        x = jax.ShapeDtypeStruct((8, 32), dtype)

        def scans(x_ref, a_ref, b_ref):
            a_ref[...] = lax.cummax(x_ref[...], axis=1)
            b_ref[...] = lax.cummin(x_ref[...], axis=0, reverse=True)
        call = pl.pallas_call(scans, out_shape=[x, x])
        assert pt.compile_for_target(lambda a: call(a), x, target=target)
