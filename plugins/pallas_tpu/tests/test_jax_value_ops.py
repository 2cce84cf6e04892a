"""JAX's pltpu value ops provided by pallas_tpu: ``conv``, ``pack_elementwise``,
``unpack_elementwise``, ``stochastic_round``, ``split_bits``, ``join_bits``,
``pack_fp6``, ``unpack_fp6``, ``trace_value``, ``touch``. Each runs on the
built-in interpreter and in TPU interpret mode (JAX's own functions run in
neither: their primitives have no CPU rule) against a NumPy or ``lax``
reference on fresh random data, and AOT-compiles for v5e through JAX's
lowering of the same name.

Statistical bound (stochastic_round): 6 standard deviations of the mean
(a false failure has probability < 1e-8)."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu
from tpu_window import jax_pltpu_has

INTERPRETERS = {"builtin": True, "tpu_interpret": pltpu.InterpretParams()}
SHAPE = (8, 128)


@pytest.fixture
def rng():
    return np.random.default_rng()


def _run(fn, args, out_dtypes, interpret):
    def body(*refs):
        ins, outs = refs[:len(args)], refs[len(args):]
        values = fn(*(r[...] for r in ins))
        values = values if isinstance(values, tuple) else (values,)
        for o, v in zip(outs, values):
            o[...] = v
    shapes = tuple(jax.ShapeDtypeStruct(np.shape(args[0]) if s is None else s, d)
                   for d, s in out_dtypes)
    return pl.pallas_call(body, out_shape=shapes, interpret=interpret)(*args)


def _both(fn, args, out_dtypes, chip_checks=True):
    interpreters = [True, pltpu.InterpretParams(chip_checks=chip_checks)]
    results = [_run(fn, args, out_dtypes, i) for i in interpreters]
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)
    return [np.asarray(r) for r in results[0]]


def _aot(aot_compile, fn, args, out_dtypes):
    def f(*a):
        def body(*refs):
            values = fn(*(r[...] for r in refs[:len(a)]))
            values = values if isinstance(values, tuple) else (values,)
            for o, v in zip(refs[len(a):], values):
                o[...] = v
        shapes = tuple(jax.ShapeDtypeStruct(np.shape(a[0]) if s is None else s, d)
                       for d, s in out_dtypes)
        return pl.pallas_call(body, out_shape=shapes, compiler_params=pltpu.CompilerParams())(*a)
    compiled, _ = aot_compile(f, *args)
    assert compiled is not None


# --- conv -------------------------------------------------------------------------------

CONV_CASES = {
    "same_reversed_acc": dict(dimension_numbers=("NHWC", "HWIO", "NHWC"), padding="SAME",
                              window_reversal=(True, False)),
    "valid_strided": dict(dimension_numbers=("NHWC", "HWIO", "NHWC"), padding="VALID",
                          window_strides=(2, 1)),
    "explicit_pads_dilated": dict(dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                  padding=((1, 2), (0, 1)), rhs_dilation=(2, 1)),
}


def _conv_reference(x, w, acc, params):
    """XLA's convolution on CPU at full float32 precision, the kernel flipped by NumPy."""
    dn = jax.lax.conv_dimension_numbers(x.shape, w.shape, params["dimension_numbers"])
    for d, rev in zip(dn.rhs_spec[2:], params.get("window_reversal") or ()):
        if rev:
            w = np.flip(w, d)
    out = np.asarray(jax.lax.conv_general_dilated(
        x, np.ascontiguousarray(w), params.get("window_strides") or (1, 1), params["padding"],
        rhs_dilation=params.get("rhs_dilation"), dimension_numbers=dn,
        precision="highest"), np.float64)
    return out if acc is None else out + np.asarray(acc, np.float64)


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_against_xla(case, rng):
    params = CONV_CASES[case]
    x = rng.standard_normal((2, 12, 10, 8)).astype(np.float32)
    w = rng.standard_normal((3, 3, 8, 128)).astype(np.float32)
    out_shape = jax.eval_shape(
        lambda a, b: pltpu.conv(a, b, **params), x, w).shape
    acc = rng.standard_normal(out_shape).astype(np.float32) if case.endswith("acc") else None
    args = (x, w) if acc is None else (x, w, acc)
    got, = _both(lambda *a: pltpu.conv(*a, **params), args, [(jnp.float32, out_shape)])
    np.testing.assert_allclose(got, _conv_reference(x, w, acc, params), rtol=1e-4, atol=1e-4)


@jax_pltpu_has("conv")
def test_conv_aot(aot_compile, rng):
    x = rng.standard_normal((2, 16, 16, 8)).astype(np.float32)
    w = rng.standard_normal((3, 3, 8, 128)).astype(np.float32)
    params = CONV_CASES["same_reversed_acc"]
    _aot(aot_compile, lambda a, b: pltpu.conv(a, b, **params), (x, w),
         [(jnp.float32, (2, 16, 16, 128))])


# --- pack / unpack ------------------------------------------------------------------------

def test_pack_f32_into_bf16_pairs(rng):
    a, b = (rng.standard_normal(SHAPE).astype(np.float32) * 10 for _ in range(2))
    got, = _both(lambda x, y: pltpu.pack_elementwise((x, y), packed_dtype=jnp.bfloat16),
                 (a, b), [(jnp.uint32, None)])
    low = a.astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.uint32)
    high = b.astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.uint32)
    np.testing.assert_array_equal(got, low | (high << 16))


def test_pack_int8_into_int4_keeps_low_bits(rng):
    a, b = (rng.integers(-128, 128, SHAPE).astype(np.int8) for _ in range(2))
    got, = _both(lambda x, y: pltpu.pack_elementwise((x, y), packed_dtype=jnp.int4),
                 (a, b), [(jnp.uint8, None)])
    np.testing.assert_array_equal(got, (a.view(np.uint8) & 0xF) | ((b.view(np.uint8) & 0xF) << 4))


@pytest.mark.parametrize("index", [0, 1])
def test_unpack_int16_into_int8_fields_sign_extended(index, rng):
    x = rng.integers(-2**15, 2**15, SHAPE).astype(np.int16)
    got, = _both(lambda v: pltpu.unpack_elementwise(v, index=index, packed_dtype=jnp.int8,
                                                    unpacked_dtype=jnp.int16),
                 (x,), [(jnp.int16, None)])
    # JAX's docstring: the fields are the int8 view's even (index 0) / odd (1) bytes
    np.testing.assert_array_equal(got, x.view(np.int8).reshape(*SHAPE, 2)[..., index])


def test_unpack_inverts_pack_for_bf16(rng):
    a, b = (rng.standard_normal(SHAPE).astype(np.float32) for _ in range(2))

    def fn(x, y):
        packed = pltpu.pack_elementwise((x, y), packed_dtype=jnp.bfloat16)
        words = jax.lax.bitcast_convert_type(packed, jnp.int32)
        return tuple(pltpu.unpack_elementwise(words, index=i, packed_dtype=jnp.bfloat16,
                                              unpacked_dtype=jnp.float32) for i in (0, 1))
    lo, hi = _both(fn, (a, b), [(jnp.float32, None)] * 2)
    np.testing.assert_array_equal(lo, a.astype(ml_dtypes.bfloat16).astype(np.float32))
    np.testing.assert_array_equal(hi, b.astype(ml_dtypes.bfloat16).astype(np.float32))


def test_pack_unpack_bad_input_is_refused():
    x = jnp.zeros(SHAPE, jnp.float32)
    with pytest.raises(ValueError, match="give 2 arrays"):
        pltpu.pack_elementwise((x, x, x), packed_dtype=jnp.bfloat16)
    with pytest.raises(ValueError, match="float32 into bfloat16"):
        pltpu.pack_elementwise((x, x), packed_dtype=jnp.int16)
    with pytest.raises(ValueError, match="out of range"):
        pltpu.unpack_elementwise(jnp.zeros(SHAPE, jnp.int16), index=2, packed_dtype=jnp.int8,
                                 unpacked_dtype=jnp.int16)


def test_pack_unpack_aot(aot_compile, rng):
    a, b = (rng.standard_normal(SHAPE).astype(np.float32) for _ in range(2))
    _aot(aot_compile, lambda x, y: pltpu.unpack_elementwise(
        jax.lax.bitcast_convert_type(pltpu.pack_elementwise((x, y), packed_dtype=jnp.bfloat16),
                                     jnp.int32),
        index=1, packed_dtype=jnp.bfloat16, unpacked_dtype=jnp.float32),
        (a, b), [(jnp.float32, None)])


# --- stochastic_round ---------------------------------------------------------------------

FLOAT_TARGETS = [jnp.bfloat16, jnp.float8_e5m2, jnp.float8_e4m3fn, jnp.float8_e4m3b11fnuz,
                 jnp.float4_e2m1fn]


def _neighbours(x, target):
    """The target values just below and above each x (float64), by enumerating
    the target's finite values."""
    width = jax.dtypes.itemsize_bits(jnp.dtype(target))
    if target == jnp.int4:
        values = np.arange(-8, 8, dtype=np.float64)
    else:
        codes = np.arange(2 ** width, dtype=np.uint8 if width <= 8 else np.uint16)
        values = codes.view(jnp.dtype(target)) if width >= 8 else \
            np.asarray(jnp.asarray(codes).astype(jnp.uint4).view(target))
        with np.errstate(invalid="ignore"):
            values = np.asarray(values, np.float64)
        values = np.unique(values[np.isfinite(values)])
    x64 = np.asarray(x, np.float64)
    hi_i = np.clip(np.searchsorted(values, x64, side="left"), 0, values.size - 1)
    lo_i = np.clip(np.searchsorted(values, x64, side="right") - 1, 0, values.size - 1)
    return values[lo_i], values[hi_i]


@pytest.mark.parametrize("target", FLOAT_TARGETS + [jnp.int4], ids=lambda t: jnp.dtype(t).name)
def test_stochastic_round_lands_on_a_neighbour_and_keeps_exact_values(target, rng):
    scale = 4.0 if target in (jnp.float4_e2m1fn, jnp.int4) else 30.0
    x = (rng.standard_normal(SHAPE) * scale).astype(np.float32)
    # edge values: exact target values, zero, signs
    lo, hi = _neighbours(x, target)
    x[0, :16] = lo[0, :16]
    x[1, :4] = (0.0, -0.0, 0.5, -0.5)
    bits = rng.integers(0, 2**32, SHAPE, dtype=np.uint32)
    # the interpreters' rounding is compared for every target, also those a v5e's
    # Mosaic refuses ('Unsupported dtype for stochastic convert': float4_e2m1fn)
    got, = _both(lambda v, b: pltpu.stochastic_round(v, b, target_dtype=target).astype(jnp.float32),
                 (x, bits), [(jnp.float32, None)], chip_checks=False)
    lo, hi = _neighbours(x, target)
    largest = float(_neighbours(np.float32(np.inf), target)[0])
    smallest = float(_neighbours(np.float32(-np.inf), target)[1])
    inside = (x >= smallest) & (x <= largest)
    assert np.all(((got == lo) | (got == hi))[inside])
    exact = inside & (lo == hi)
    np.testing.assert_array_equal(got[exact], x[exact].astype(np.float64))
    # beyond the finite range: saturated
    np.testing.assert_array_equal(got[~inside], np.where(x > 0, largest, smallest)[~inside])


@pytest.mark.parametrize("target", [jnp.bfloat16, jnp.float8_e4m3fn, jnp.int4],
                         ids=lambda t: jnp.dtype(t).name)
def test_stochastic_round_is_unbiased(target, rng):
    # one value per row, each repeated over 128 * 64 random draws
    rows = 8
    values = rng.uniform(-3.0, 3.0, rows).astype(np.float32)
    x = np.repeat(values[:, None], 128 * 64, axis=1).reshape(rows * 64, 128)
    bits = rng.integers(0, 2**32, x.shape, dtype=np.uint32)
    # a v5e's Mosaic refuses int4 ('Unsupported dtype for stochastic convert'): as above
    got, = _both(lambda v, b: pltpu.stochastic_round(v, b, target_dtype=target).astype(jnp.float32),
                 (x, bits), [(jnp.float32, None)], chip_checks=False)
    got = got.reshape(rows, -1)
    lo, hi = _neighbours(values, target)
    p = (values - lo) / np.where(hi > lo, hi - lo, 1.0)
    n = got.shape[1]
    sigma = (hi - lo) * np.sqrt(p * (1 - p) / n)
    assert np.all(np.abs(got.mean(axis=1) - values) <= 6 * sigma + 1e-7)


def test_stochastic_round_refuses_bad_input():
    x = jnp.zeros(SHAPE, jnp.float32)
    with pytest.raises(ValueError, match="uint32"):
        pltpu.stochastic_round(x, jnp.zeros(SHAPE, jnp.int32), target_dtype=jnp.bfloat16)
    with pytest.raises(ValueError, match="target_dtype"):
        pltpu.stochastic_round(x, jnp.zeros(SHAPE, jnp.uint32), target_dtype=jnp.float16)


def test_stochastic_round_aot(aot_compile, rng):
    x = rng.standard_normal(SHAPE).astype(np.float32)
    bits = rng.integers(0, 2**32, SHAPE, dtype=np.uint32)
    _aot(aot_compile, lambda v, b: pltpu.stochastic_round(v, b, target_dtype=jnp.bfloat16),
         (x, bits), [(jnp.bfloat16, None)])


# --- sub-byte helpers ----------------------------------------------------------------------

def _int_field(x8, offset, width):
    """Bits [offset, offset + width) of int8 x8, sign-extended (NumPy)."""
    field = (x8.view(np.uint8).astype(np.int16) >> offset) & ((1 << width) - 1)
    return np.where(field >= 1 << (width - 1), field - (1 << width), field).astype(np.int8)


def test_split_bits_and_pack_fp6(rng):
    x = rng.integers(-128, 128, SHAPE).astype(np.int8)
    fours, twos, two_fp6, four_fp6 = _both(
        lambda v: tuple(f.astype(jnp.int8) for f in (*pltpu.split_bits(v, (4, 2)),
                                                     *pltpu.pack_fp6(v))),
        (x,), [(jnp.int8, None)] * 4)
    np.testing.assert_array_equal(fours, _int_field(x, 0, 4))
    np.testing.assert_array_equal(twos, _int_field(x, 4, 2))
    np.testing.assert_array_equal(two_fp6, twos)
    np.testing.assert_array_equal(four_fp6, fours)


def test_split_bits_two_bit_fields_at_odd_offsets(rng):
    x = rng.integers(-128, 128, SHAPE).astype(np.int8)
    fields = _both(lambda v: tuple(f.astype(jnp.int8) for f in pltpu.split_bits(v, (2, 2, 4))),
                   (x,), [(jnp.int8, None)] * 3)
    for got, (offset, width) in zip(fields, [(0, 2), (2, 2), (4, 4)]):
        np.testing.assert_array_equal(got, _int_field(x, offset, width))


def test_join_bits_and_unpack_fp6(rng):
    x = rng.integers(-128, 128, SHAPE).astype(np.int8)
    y = rng.integers(-128, 128, SHAPE).astype(np.int8)
    both, four_only, two_only, fp6 = _both(
        lambda a, b: (pltpu.join_bits(two_bits=b.astype(jnp.int2), four_bits=a.astype(jnp.int4)),
                      pltpu.join_bits(four_bits=a.astype(jnp.int4)),
                      pltpu.join_bits(two_bits=b.astype(jnp.int2)),
                      pltpu.unpack_fp6(b.astype(jnp.int2), a.astype(jnp.int4))),
        (x, y), [(jnp.int8, None)] * 4)
    low, high = x.view(np.uint8) & 0xF, y.view(np.uint8) & 0x3
    np.testing.assert_array_equal(both.view(np.uint8), low | (high << 4))
    np.testing.assert_array_equal(four_only.view(np.uint8), low)
    np.testing.assert_array_equal(two_only.view(np.uint8), high)
    np.testing.assert_array_equal(fp6, both)


def test_sub_byte_helpers_aot(aot_compile, rng):
    x = rng.integers(-128, 128, SHAPE).astype(np.int8)
    _aot(aot_compile, lambda v: pltpu.unpack_fp6(*pltpu.pack_fp6(v)), (x,), [(jnp.int8, None)])


# --- trace_value, touch ----------------------------------------------------------------------

def _hinted(x_ref, o_ref):
    pltpu.touch(x_ref)
    pltpu.touch((o_ref.at[0:4], x_ref))
    pltpu.trace_value("sum", jnp.sum(x_ref[...]))
    pltpu.trace_value("first", x_ref[0, 0].astype(jnp.int32))
    o_ref[...] = x_ref[...] * 2.0


@pytest.mark.parametrize("interpreter", INTERPRETERS)
def test_trace_value_and_touch_change_nothing(interpreter, rng):
    x = rng.standard_normal(SHAPE).astype(np.float32)
    got = pl.pallas_call(_hinted, out_shape=jax.ShapeDtypeStruct(SHAPE, jnp.float32),
                         interpret=INTERPRETERS[interpreter])(x)
    np.testing.assert_array_equal(got, x * 2.0)


def test_trace_value_and_touch_aot(aot_compile, rng):
    x = rng.standard_normal(SHAPE).astype(np.float32)
    compiled, _ = aot_compile(
        lambda a: pl.pallas_call(_hinted, out_shape=jax.ShapeDtypeStruct(SHAPE, jnp.float32),
                                 compiler_params=pltpu.CompilerParams())(a), x)
    assert compiled is not None


def test_trace_value_and_touch_refuse_bad_operands():
    def bad_value(x_ref, o_ref):
        pltpu.trace_value("v", x_ref[...])
    def bad_ref(x_ref, o_ref):
        pltpu.touch(x_ref[...])
    out = jax.ShapeDtypeStruct(SHAPE, jnp.float32)
    with pytest.raises(TypeError, match="scalar"):
        pl.pallas_call(bad_value, out_shape=out, interpret=True)(jnp.zeros(SHAPE))
    with pytest.raises(TypeError, match="expected Refs"):
        pl.pallas_call(bad_ref, out_shape=out, interpret=True)(jnp.zeros(SHAPE))
