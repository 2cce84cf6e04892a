"""The lax primitives JAX's Triton lowering handles that this backend lacked (issue 23),
and rev (issue 32).

Each under Triton's interpreter vs NumPy float64 on fresh data, and every one in one
kernel compiled for sm_90 and gfx942. Before: "no code generator for primitive ...".
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import pallas_frontend as pl
import pallas_triton as pt

TRITON = dict(interpret=pt.InterpretParams())

# name -> (jax fn, NumPy reference, input range)
UNARY = {
    "log2": (jnp.log2, np.log2, (0.1, 5)),
    "asin": (jnp.arcsin, np.arcsin, (-0.99, 0.99)),
    "acos": (jnp.arccos, np.arccos, (-0.99, 0.99)),
    "atan": (jnp.arctan, np.arctan, (-5, 5)),
    "asinh": (jnp.arcsinh, np.arcsinh, (-5, 5)),
    "acosh": (jnp.arccosh, np.arccosh, (1.01, 5)),
    "atanh": (jnp.arctanh, np.arctanh, (-0.99, 0.99)),
    "cbrt": (jnp.cbrt, np.cbrt, (-8, 8)),
    "erf_inv": (lax.erf_inv, None, (-0.99, 0.99)),
}


def _map(fn, out_dtype=None, **call):
    def body(*refs):
        *ins, o = refs
        o[...] = fn(*(r[...] for r in ins))
    def run(*xs):
        return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(
            np.shape(xs[0]), out_dtype or xs[0].dtype), **call)(*xs)
    return run


@pytest.mark.parametrize("op", UNARY)
def test_unary_float(rng, op):
    fn, ref, (lo, hi) = UNARY[op]
    x = rng.uniform(lo, hi, (16, 32)).astype(np.float32)
    out = np.asarray(_map(fn, **TRITON)(x), np.float64)
    if op == "erf_inv":     # no NumPy erfinv: check erf(out) == x instead
        np.testing.assert_allclose(np.vectorize(math.erf)(out), x, rtol=1e-5, atol=1e-6)
        return
    np.testing.assert_allclose(out, ref(np.asarray(x, np.float64)), rtol=1e-5, atol=1e-6)


def test_atan2_nextafter_is_finite(rng):
    x, y = (rng.standard_normal((16, 32)).astype(np.float32) for _ in range(2))
    y[0, :3] = [np.inf, np.nan, -np.inf]
    np.testing.assert_allclose(np.asarray(_map(jnp.arctan2, **TRITON)(x, y)),
                               np.arctan2(x.astype(np.float64), y), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(_map(jnp.nextafter, **TRITON)(x, y)),
                                  np.nextafter(x, y))
    np.testing.assert_array_equal(np.asarray(_map(jnp.isfinite, jnp.bool_, **TRITON)(y)),
                                  np.isfinite(y))


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint32, np.uint8])
@pytest.mark.parametrize("op", ["population_count", "clz"])
def test_bit_counts(rng, op, dtype):
    info = np.iinfo(dtype)
    x = rng.integers(info.min, int(info.max) + 1, (16, 32), dtype=np.int64).astype(dtype)
    x.reshape(-1)[:3] = [0, info.max, info.min]
    bits = np.dtype(dtype).itemsize * 8
    u = x.view(f"uint{bits}").astype(np.uint64)
    lengths = np.array([int(v).bit_length() for v in u.reshape(-1)]).reshape(u.shape)
    ones = np.array([bin(int(v)).count("1") for v in u.reshape(-1)]).reshape(u.shape)
    ref = (ones if op == "population_count" else bits - lengths).astype(dtype)
    out = _map(getattr(lax, op), **TRITON)(jnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(out), ref)


def test_concatenate_stack_split_unstack(rng):
    def body(a_ref, b_ref, c_ref, cat_ref, cat1_ref, st_ref, sp_ref, un_ref):
        a, b, c = a_ref[...], b_ref[...], c_ref[...]
        cat_ref[...] = jnp.concatenate([a, b, c], axis=0)            # 8 + 4 + 4 rows
        cat1_ref[...] = jnp.concatenate([a[:4], b], axis=1)          # 16 + 16 columns
        st_ref[...] = jnp.stack([b, c], axis=2)                       # lax's stack
        lo, hi = jnp.split(a, [3], axis=0)                         # 3 + 5 rows
        sp_ref[...] = jnp.concatenate([hi, lo], axis=0)
        p, q = jnp.unstack(st_ref[...], axis=2)                       # lax's unstack
        un_ref[...] = p - 2 * q
    a = rng.standard_normal((8, 16)).astype(np.float32)
    b, c = (rng.standard_normal((4, 16)).astype(np.float32) for _ in range(2))
    f32 = jnp.float32
    outs = pl.pallas_call(body, out_shape=[jax.ShapeDtypeStruct((16, 16), f32),
                                           jax.ShapeDtypeStruct((4, 32), f32),
                                           jax.ShapeDtypeStruct((4, 16, 2), f32),
                                           jax.ShapeDtypeStruct((8, 16), f32),
                                           jax.ShapeDtypeStruct((4, 16), f32)], **TRITON)(a, b, c)
    cat, cat1, st, sp, un = (np.asarray(o) for o in outs)
    np.testing.assert_array_equal(cat, np.concatenate([a, b, c], 0))
    np.testing.assert_array_equal(cat1, np.concatenate([a[:4], b], 1))
    np.testing.assert_array_equal(st, np.stack([b, c], 2))
    np.testing.assert_array_equal(sp, np.concatenate([a[3:], a[:3]], 0))
    np.testing.assert_allclose(un, b - 2 * c, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape, dims", [((8, 16), (0,)), ((8, 16), (0, 1)), ((3, 5), (1,)),
                                         ((7,), (0,)), ((1, 33), (0, 1))])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.int8, jnp.uint32, jnp.bool_],
                         ids=lambda d: np.dtype(d).name)
def test_rev(rng, shape, dims, dtype):
    """lax.rev (x[::-1]), also over padded dims (3, 5, 7, 33 lanes); was "no code
    generator for primitive 'rev'"."""
    x = np.asarray(rng.standard_normal(shape) * 50).astype(dtype)
    out = _map(lambda v: lax.rev(v, dims), **TRITON)(jnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(out), np.flip(x, dims))
    with_rev = jax.ShapeDtypeStruct(shape, dtype)
    call = pl.pallas_call(lambda x_ref, o_ref: o_ref.__setitem__(..., lax.rev(x_ref[...], dims)),
                          out_shape=with_rev)
    assert pt.compile_for_target(lambda a: call(a), with_rev, target=("cuda", 90))["ptx"]


def test_checkpoint_inside_a_kernel(rng):
    x = rng.standard_normal((8, 16)).astype(np.float32)
    out = _map(jax.checkpoint(lambda v: jnp.sin(v) * 2), **TRITON)(x)
    np.testing.assert_allclose(np.asarray(out), np.sin(x.astype(np.float64)) * 2, rtol=1e-6,
                               atol=1e-6)


@pytest.mark.parametrize("target", [("cuda", 90), ("hip", "gfx942")], ids=str)
def test_all_compile(target):
    fns = [UNARY[op][0] for op in UNARY]

    def body(x_ref, y_ref, i_ref, *outs):
        x, y, i = x_ref[...], y_ref[...], i_ref[...]
        for fn, o in zip(fns, outs):
            o[...] = fn(x)
        outs[len(fns)][...] = jnp.arctan2(x, y) + jnp.nextafter(x, y)
        outs[len(fns) + 1][...] = lax.population_count(i) + lax.clz(i.astype(jnp.uint8)).astype(
            jnp.int32)
        outs[len(fns) + 2][...] = jnp.concatenate([x[:4], y[4:]], axis=0)
    f = jax.ShapeDtypeStruct((8, 32), jnp.float32)
    i = jax.ShapeDtypeStruct((8, 32), jnp.int32)
    call = pl.pallas_call(body, out_shape=[f] * (len(fns) + 1) + [i, f])
    asm = pt.compile_for_target(lambda a, b, c: call(a, b, c), f, f, i, target=target)
    assert asm["ptx" if target[0] == "cuda" else "amdgcn"]


def test_gathered_load_from_a_plain_ref(rng):
    """JAX's paged attention reads ``k_pages_ref[block_tables]``: an integer array over
    the first dim of a plain Ref, the other dims whole."""
    def body(pages_ref, table_ref, o_ref):
        o_ref[...] = pages_ref[table_ref[...]].reshape(4 * 8, 16) * 2
    pages = rng.standard_normal((10, 8, 16)).astype(np.float32)
    table = rng.permutation(10)[:4].astype(np.int32)
    ref = pages[table].reshape(32, 16) * 2
    for call in (TRITON, dict(interpret=True)):
        out = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((32, 16), jnp.float32),
                             **call)(pages, table)
        np.testing.assert_array_equal(np.asarray(out), ref)
    f = jax.ShapeDtypeStruct
    asm = pt.compile_for_target(lambda p, t: pl.pallas_call(
        body, out_shape=f((32, 16), jnp.float32))(p, t), f((10, 8, 16), jnp.float32),
        f((4,), jnp.int32), target=("cuda", 90))
    assert asm["ptx"]


@pytest.mark.parametrize("method", [lax.RoundingMethod.AWAY_FROM_ZERO,
                                    lax.RoundingMethod.TO_NEAREST_EVEN])
def test_round(rng, method):
    x = (rng.standard_normal((16, 32)) * 4).astype(np.float32)
    x.reshape(-1)[:8] = [0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, np.inf, np.nan]
    out = _map(lambda v: lax.round(v, method), **TRITON)(x)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(jax.jit(
        lambda v: lax.round(v, method))(x)))


def test_pow_negative_bases_and_zeros(rng):
    """lax.pow is C's pow (as XLA): negative bases with integral exponents are defined.
    Before: exp2(y * log2(x)), NaN for every x < 0."""
    x = rng.uniform(-3, 3, (16, 32)).astype(np.float32)
    y = rng.integers(-3, 4, (16, 32)).astype(np.float32)
    y[1] = rng.uniform(-2, 2, 32)                    # non-integral: NaN for x < 0, as C
    x[0, :4], y[0, :4] = [0.0, 0.0, -0.0, np.inf], [0.0, -1.0, 3.0, -2.0]
    got = np.asarray(_map(lax.pow, **TRITON)(x, y))
    np.testing.assert_allclose(got, np.power(x.astype(np.float64), y), rtol=1e-5, atol=1e-6)
    yi = jnp.asarray(y[2:].astype(np.int32))         # an int32 exponent
    got = np.asarray(_map(lax.pow, **TRITON)(x[2:], yi))
    np.testing.assert_allclose(got, np.power(x[2:].astype(np.float64), y[2:]), rtol=1e-5)
    f, i = jax.ShapeDtypeStruct((16, 32), jnp.float32), jax.ShapeDtypeStruct((16, 32), jnp.int32)
    for target in [("cuda", 90), ("hip", "gfx942")]:
        for ys in (f, i):
            asm = pt.compile_for_target(_map(lax.pow), f, ys, target=target)
            assert asm["ttir"]


def test_where_between_two_python_numbers(rng):
    """jnp.where(mask, 1.0, 0.0): the broadcast of a folded constant was emitted as
    tl.broadcast_to(1.0, ...), which Triton refuses (a float is not a tensor)."""
    def body(x_ref, o_ref):
        o_ref[...] = jnp.where(jnp.all(x_ref[...] > -1, axis=1, keepdims=True), 1.0, 0.0)
    x = rng.standard_normal((8, 100)).astype(np.float32)
    out = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((8, 1), jnp.float32), **TRITON)(x)
    np.testing.assert_array_equal(np.asarray(out)[:, 0], (x > -1).all(1).astype(np.float32))


def test_debug_print(rng, capfd):
    """tl.device_print with the format's text as its prefix (JAX's Triton lowering prints
    the same way); the value printed under the interpreter, vprintf in the PTX."""
    def body(x_ref, o_ref):
        pl.debug_print("first={}", x_ref[0])
        o_ref[...] = x_ref[...] * 2
    x = rng.integers(100, 1000, 16).astype(np.int32)
    call = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((16,), jnp.int32))
    out = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((16,), jnp.int32), **TRITON)(x)
    jax.block_until_ready(out)
    printed = capfd.readouterr().out
    assert "first=" in printed and str(x[0]) in printed, printed
    np.testing.assert_array_equal(np.asarray(out), x * 2)
    asm = pt.compile_for_target(lambda v: call(v), jax.ShapeDtypeStruct((16,), jnp.int32),
                                target=("cuda", 90))
    assert "vprintf" in asm["ptx"]


def test_tanh_near_zero_is_accurate(rng):
    """tanh was (1 - e^-2|x|) / (1 + e^-2|x|): 1.6e-4 relative error at |x| = 0.02
    (found by tests/test_differential.py, seed 7). Now libdevice/ocml, NumPy here."""
    x = (rng.standard_normal((16, 64)) * rng.choice([1e-6, 1e-3, 0.02, 1.0, 30.0],
                                                     (16, 64))).astype(np.float32)
    out = np.asarray(_map(jnp.tanh, **TRITON)(x), np.float64)
    np.testing.assert_allclose(out, np.tanh(x.astype(np.float64)), rtol=2e-7, atol=0)
