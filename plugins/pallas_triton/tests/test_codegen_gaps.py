"""Each codegen gap closed, against NumPy float64 or the frontend interpreter on fresh data."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import pallas_frontend as pl
import pallas_triton as pt
from pallas_triton.errors import TritonCapabilityError

TRITON = dict(interpret=pt.InterpretParams())
REF = dict(interpret=True)


def f64(x):
    return np.asarray(x, np.float64)


def _dot_kernel(out_dtype, acc_dtype, **call):
    def body(a_ref, b_ref, o_ref):
        o_ref[...] = jnp.dot(a_ref[...], b_ref[...],
                             preferred_element_type=acc_dtype).astype(o_ref.dtype)
    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((32, 64), out_dtype), **call)


# (operand dtype, accumulator, output dtype, relative tolerance vs float64)
DOTS = [(jnp.bfloat16, jnp.float32, jnp.float32, 1e-5), (jnp.float16, jnp.float32, jnp.float32, 1e-5),
        (jnp.float16, jnp.float32, jnp.float16, 2e-3), (jnp.bfloat16, jnp.float32, jnp.bfloat16, 1.6e-2),
        (jnp.int8, jnp.int32, jnp.int32, 0)]


@pytest.mark.parametrize("dtype,acc,out,tol", DOTS, ids=lambda v: getattr(v, "__name__", str(v)))
def test_low_precision_dots(rng, dtype, acc, out, tol):
    if dtype == jnp.int8:
        a, b = rng.integers(-128, 128, (32, 64)).astype(np.int8), rng.integers(-128, 128, (64, 64)).astype(np.int8)
    else:
        a = rng.standard_normal((32, 64)).astype(dtype)
        b = rng.standard_normal((64, 64)).astype(dtype)
    want = f64(a) @ f64(b)
    got = f64(_dot_kernel(out, acc, **TRITON)(a, b))
    scale = np.abs(want).max()
    assert np.abs(got - want).max() <= tol * scale + (0 if tol == 0 else 1e-6), \
        np.abs(got - want).max() / scale
    # parity with the frontend interpreter
    np.testing.assert_allclose(got, f64(_dot_kernel(out, acc, **REF)(a, b)),
                               rtol=2 * tol, atol=2 * tol * scale)


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_atomic_xchg(rng, dtype):
    x = rng.standard_normal(64).astype(dtype) if dtype == np.float32 else rng.integers(-9, 9, 64).astype(dtype)
    v = (rng.standard_normal(64) * 10).astype(dtype)

    def body(x_ref, v_ref, o_ref, old_ref):
        old_ref[...] = pt.atomic_xchg(o_ref, (pl.ds(0, 64),), v_ref[...])
    new, old = pl.pallas_call(body, out_shape=(jax.ShapeDtypeStruct((64,), dtype),) * 2,
                              input_output_aliases={0: 0}, **TRITON)(x, v)
    np.testing.assert_array_equal(np.asarray(new), v)
    np.testing.assert_array_equal(np.asarray(old), x)


def test_cumulative_ops(rng):
    x = rng.standard_normal((8, 64)).astype(np.float32)

    def body(x_ref, s_ref, r_ref, mx_ref, mn_ref, p_ref):
        v = x_ref[...]
        s_ref[...] = jnp.cumsum(v, axis=1)
        r_ref[...] = lax.cumsum(v, axis=0, reverse=True)
        mx_ref[...] = lax.cummax(v, axis=1)
        mn_ref[...] = lax.cummin(v, axis=0)
        p_ref[...] = lax.cumprod(1.0 + 0.01 * v, axis=1)
    outs = pl.pallas_call(body, out_shape=(jax.ShapeDtypeStruct(x.shape, jnp.float32),) * 5,
                          **TRITON)(x)
    xd = f64(x)
    wants = [np.cumsum(xd, 1), np.flip(np.cumsum(np.flip(xd, 0), 0), 0),
             np.maximum.accumulate(xd, 1), np.minimum.accumulate(xd, 0),
             np.cumprod(1.0 + 0.01 * xd, 1)]
    for got, want in zip(outs, wants):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def _softmax_source():
    x = jnp.ones((8, 256), jnp.float32)

    def body(x_ref, o_ref):
        v = x_ref[...]
        e = jnp.exp(v - v.max(axis=1, keepdims=True))
        o_ref[...] = e / e.sum(axis=1, keepdims=True) + v.min(axis=1, keepdims=True)
    ir = pt.kernel_ir_of(lambda a: pl.pallas_call(
        body, out_shape=jax.ShapeDtypeStruct(a.shape, a.dtype), **TRITON)(a), x)
    return ir


def test_reductions_use_tritons_standard_combines():
    ir = _softmax_source()
    interp = pt.generate_source(ir, target="interpret").source
    assert "tl.standard._sum_combine" in interp
    assert "tl.standard._elementwise_max" in interp and "tl.standard._elementwise_min" in interp
    cuda = pt.generate_source(ir, target="cuda").source
    assert "tl.standard._sum_combine" in cuda
    assert "propagate_nan=tl.PropagateNan.ALL" in cuda      # max.NaN on the GPU


def test_reductions_propagate_nan_like_jax(rng):
    x = rng.standard_normal((4, 64)).astype(np.float32)
    x[1, 7] = np.nan

    def body(x_ref, mx_ref, mn_ref, s_ref):
        v = x_ref[...]
        mx_ref[...] = v.max(axis=1)
        mn_ref[...] = v.min(axis=1)
        s_ref[...] = v.sum(axis=1)
    outs = pl.pallas_call(body, out_shape=(jax.ShapeDtypeStruct((4,), jnp.float32),) * 3,
                          **TRITON)(x)
    xd = f64(x)
    for got, want in zip(outs, (xd.max(1), xd.min(1), xd.sum(1))):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)   # NaN == NaN


def test_run_scoped_temporaries(rng):
    x = rng.standard_normal((4, 32)).astype(np.float32)

    def body(x_ref, o_ref):
        def scoped(tmp, acc):
            tmp[...] = x_ref[...] * 2.0
            acc[...] = jnp.zeros_like(acc)

            def step(i, carry):
                acc[...] = acc[...] + tmp[...] * carry
                return carry + 1.0
            lax.fori_loop(0, 3, step, jnp.float32(1.0))
            o_ref[...] = acc[...] + 1.0
        pl.run_scoped(scoped, pl.MemorySpace.DEFAULT((4, 32), jnp.float32),
                      pl.MemorySpace.DEFAULT((4, 32), jnp.float32))
    got = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, jnp.float32), **TRITON)(x)
    np.testing.assert_allclose(np.asarray(got), f64(x) * 2 * (1 + 2 + 3) + 1, rtol=1e-6, atol=1e-6)


def test_run_scoped_sliced_access_refused_at_check(rng):
    def body(x_ref, o_ref):
        def scoped(tmp):
            tmp[pl.ds(0, 8)] = x_ref[pl.ds(0, 8)]
            o_ref[...] = x_ref[...]
        pl.run_scoped(scoped, pl.MemorySpace.DEFAULT((16,), jnp.float32))
    f = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((16,), jnp.float32), **TRITON)
    with pytest.raises(TritonCapabilityError, match="run_scoped buffer made at .*test_codegen_gaps.py"):
        f(np.ones(16, np.float32))


def test_element_padding_masked_loads(rng):
    n = 64
    x = rng.standard_normal(n).astype(np.float32)

    def build(**call):
        def body(x_ref, o_ref):
            # reads of the padding are unspecified: mask them by position
            pos = pl.program_id(0) * 8 - 4 + lax.broadcasted_iota(jnp.int32, (16,), 0)
            v = jnp.where((pos >= 0) & (pos < n), x_ref[...], 0.0)
            o_ref[...] = v[:8] + v[8:]
        return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((n,), jnp.float32), grid=(n // 8,),
                              in_specs=[pl.BlockSpec((pl.Element(16, (4, 4)),), lambda i: (i * 8,))],
                              out_specs=pl.BlockSpec((8,), lambda i: (i,)), **call)
    got = np.asarray(build(**TRITON)(x))
    padded = np.pad(f64(x), (4, 4))
    np.testing.assert_allclose(got, padded[:n] + padded[8:n + 8], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, np.asarray(build(**REF)(x)), rtol=1e-6, atol=1e-6)


def test_bounded_slice_masked_loads_and_stores(rng):
    # block i holds rows [4i, 4i + 4) in an 8-row window: the other rows are not written
    x = rng.standard_normal((14, 32)).astype(np.float32)

    def build(**call):
        def body(x_ref, o_ref):
            o_ref[...] = x_ref[...] * 2.0 + 1.0
        spec = pl.BlockSpec((pl.BoundedSlice(8), 32),
                            lambda i: (pl.ds(i * 4, jnp.minimum(4, 14 - i * 4)), 0))
        return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, jnp.float32), grid=(4,),
                              in_specs=[spec], out_specs=spec, **call)
    got = np.asarray(build(**TRITON)(x))
    np.testing.assert_allclose(got, f64(x) * 2 + 1, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, np.asarray(build(**REF)(x)), rtol=1e-6, atol=1e-6)


def test_code_cache_keys_on_index_maps(rng):
    x = rng.standard_normal(32).astype(np.float32)

    def factory(shift):
        def body(x_ref, o_ref):
            o_ref[...] = x_ref[...]
        return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((16,), jnp.float32), grid=(1,),
                              in_specs=[pl.BlockSpec((16,), lambda i: ((i + shift) % 2,))],
                              out_specs=pl.BlockSpec((16,), lambda i: (0,)), **TRITON)
    np.testing.assert_array_equal(np.asarray(factory(0)(x)), x[:16])
    np.testing.assert_array_equal(np.asarray(factory(1)(x)), x[16:])


def test_code_cache_keys_on_captured_scalars(rng):
    x = rng.standard_normal(16).astype(np.float32)

    def factory(c):
        def body(x_ref, o_ref):
            o_ref[...] = x_ref[...] * c
        return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((16,), jnp.float32), **TRITON)
    c1, c2 = (np.float32(v) for v in rng.standard_normal(2))
    np.testing.assert_allclose(np.asarray(factory(c1)(x)), f64(x) * c1, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(factory(c2)(x)), f64(x) * c2, rtol=1e-6)


HOSTILE = ['k"""; import os; os.environ["PALLAS_PWNED"] = "1"; """',
           "k'\nimport os\nos.environ['PALLAS_PWNED'] = '1'\n#", "名前²", "a\\U0001F600\\x"]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_kernel_names_never_run(rng, name, monkeypatch):
    import os
    monkeypatch.delenv("PALLAS_PWNED", raising=False)
    x = rng.standard_normal(16).astype(np.float32)

    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0
    f = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((16,), jnp.float32), name=name, **TRITON)
    np.testing.assert_allclose(np.asarray(f(x)), f64(x) + 1, rtol=1e-6)
    assert "PALLAS_PWNED" not in os.environ
    ir = pt.kernel_ir_of(lambda a: f(a), x)
    gen = pt.generate_source(ir, target="cuda")
    assert gen.name.isidentifier() and gen.name.isascii()
    compile(gen.source, "<check>", "exec")


def test_windows_source_path_is_not_a_syntax_error(rng):
    x = rng.standard_normal(16).astype(np.float32)

    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 3.0
    ir = pt.kernel_ir_of(lambda a: pl.pallas_call(
        body, out_shape=jax.ShapeDtypeStruct((16,), jnp.float32), **TRITON)(a), x)
    ir = ir.replace(source="C:\\Users\\new\\kernels\\x.py:12", name='evil"""name')
    gen = pt.generate_source(ir)
    compile(gen.source, "<check>", "exec")
    assert repr("C:\\Users\\new\\kernels\\x.py:12")[1:-1] in gen.source


# Every elementwise primitive the backend emits, through its JVP (a generated kernel too).
JVP_FUNCS = {
    "exp": jnp.exp, "exp2": jnp.exp2, "log": lambda x: jnp.log(jnp.abs(x) + 0.5),
    "sqrt": lambda x: jnp.sqrt(jnp.abs(x) + 0.5), "rsqrt": lambda x: lax.rsqrt(jnp.abs(x) + 0.5),
    "sin": jnp.sin, "cos": jnp.cos, "tan": lambda x: jnp.tan(0.5 * x), "abs": jnp.abs,
    "tanh": jnp.tanh, "logistic": jax.nn.sigmoid, "log1p": lambda x: jnp.log1p(jnp.abs(x)),
    "expm1": jnp.expm1, "erf": lax.erf, "sinh": jnp.sinh, "cosh": jnp.cosh,
    "square": jnp.square, "integer_pow": lambda x: x ** 3,
    "pow": lambda x: jnp.power(jnp.abs(x) + 0.5, 1.7), "max": lambda x: jnp.maximum(x, 0.1),
    "min": lambda x: jnp.minimum(x, 0.1), "div": lambda x: 1.0 / (jnp.abs(x) + 0.5),
    "clamp": lambda x: jnp.clip(x, -0.5, 0.5), "sign": lambda x: jnp.sign(x) * x,
    "neg": lambda x: -x, "select_n": lambda x: jnp.where(x > 0, x * 2, x * x),
    "floor": lambda x: jnp.floor(x) + x, "ceil": lambda x: jnp.ceil(x) * x,
    "gelu": jax.nn.gelu, "softplus": jax.nn.softplus, "silu": jax.nn.silu,
    "log_softmax": jax.nn.log_softmax, "approx_tanh": pt.approx_tanh,
}


@pytest.mark.parametrize("name", sorted(JVP_FUNCS))
def test_jvp_of_elementwise(rng, name):
    fn = JVP_FUNCS[name]
    x = (rng.standard_normal(128) * 0.9).astype(np.float32)
    t = rng.standard_normal(128).astype(np.float32)

    def body(x_ref, o_ref):
        o_ref[...] = fn(x_ref[...])
    f = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((128,), jnp.float32), **TRITON)
    primal, tangent = jax.jvp(f, (x,), (t,))
    with jax.enable_x64(True):
        ref_fn = jnp.tanh if name == "approx_tanh" else fn
        want_p, want_t = jax.jvp(ref_fn, (f64(x),), (f64(t),))
    np.testing.assert_allclose(np.asarray(primal), np.asarray(want_p), rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(np.asarray(tangent), np.asarray(want_t), rtol=2e-5, atol=2e-5)
