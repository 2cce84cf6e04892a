"""The float8 types pallas_tpu takes are those Mosaic takes: casts to and from
float32 (VMEM and SMEM) and a bfloat16 x float8 dot with a float32 result, on
the built-in interpreter and in TPU interpret mode against ml_dtypes and
NumPy float64 on fresh random data, compiled device-less for a v5e; and a
float8 type is refused before lowering exactly when JAX's own pallas_call of
the same kernel does not compile for a v5e (libtpu 0.0.42.1 under JAX 0.10,
0.0.50 under JAX 0.12)."""

import importlib.util

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu
from pallas_frontend.backend_api import BackendCapabilityError
from pallas_tpu import aot

ACCEPTED = ["float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e5m2"]
# every float8 type this JAX has; the agreement test below covers them all
FLOAT8 = [n for n in dir(jnp) if n.startswith("float8_")]
M, K, N = 64, 128, 128


def _kernel(x_ref, w_ref, a_ref, x8_ref, w32_ref, dot_ref):
    x8_ref[...] = x_ref[...].astype(x8_ref.dtype)
    w32_ref[...] = w_ref[...].astype(jnp.float32)
    dot_ref[...] = jax.lax.dot_general(a_ref[...], w_ref[...], (((1,), (0,)), ((), ())),
                                       preferred_element_type=jnp.float32)


def _scalar_kernel(x_ref, o_ref):
    for i in range(x_ref.shape[0]):
        o_ref[i] = x_ref[i].astype(jnp.float32)


def _call(dtype, interpret=False, compiler_params=None):
    out = (jax.ShapeDtypeStruct((M, K), dtype), jax.ShapeDtypeStruct((K, N), jnp.float32),
           jax.ShapeDtypeStruct((M, N), jnp.float32))
    return pl.pallas_call(_kernel, out_shape=out, interpret=interpret,
                          compiler_params=compiler_params)


def _scalar_call(dtype, n, interpret=False, compiler_params=None):
    smem = pl.BlockSpec(memory_space=pltpu.SMEM)
    return pl.pallas_call(_scalar_kernel, out_shape=jax.ShapeDtypeStruct((n,), jnp.float32),
                          in_specs=[smem], out_specs=smem, interpret=interpret,
                          compiler_params=compiler_params)


def _operands(name, rng):
    """f32 values inside the type's finite range (and signed zeros and values
    that round to zero: the fnuz types have no -0, their 0x80 is NaN), float8
    weights with a NaN column (the dot must carry it), bfloat16 activations."""
    ml = getattr(ml_dtypes, name)
    info = ml_dtypes.finfo(ml)
    x = rng.uniform(-float(info.max) / 2, float(info.max) / 2, (M, K)).astype(np.float32)
    tiny = float(info.smallest_subnormal) / 4
    x[0, :6] = (0.0, -0.0, tiny, -tiny, float(info.smallest_subnormal), -float(info.max))
    w = (rng.standard_normal((K, N)) * 4).astype(ml)
    w[:, 5] = np.nan
    a = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    return x, w, a


@pytest.mark.parametrize("interpret", [True, pltpu.InterpretParams()],
                         ids=["builtin", "tpu_interpret"])
@pytest.mark.parametrize("name", ACCEPTED)
def test_casts_and_mixed_dot_match_ml_dtypes(name, interpret):
    rng = np.random.default_rng()
    x, w, a = _operands(name, rng)
    x8, w32, dot = _call(jnp.dtype(name), interpret)(x, w, a)
    ml = getattr(ml_dtypes, name)
    # ml_dtypes rounds float32 to the nearest float8, ties to even
    np.testing.assert_array_equal(np.asarray(x8).view(np.uint8), x.astype(ml).view(np.uint8))
    np.testing.assert_array_equal(np.asarray(w32), w.astype(np.float64))
    want = a.astype(np.float64) @ w.astype(np.float64)
    got = np.asarray(dot, np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(want[:, 5]).all()
    scale = np.abs(a.astype(np.float64)) @ np.nan_to_num(np.abs(w.astype(np.float64)))
    finite = ~np.isnan(want)
    np.testing.assert_array_less(np.abs(got - want)[finite], 1e-6 * scale[finite] + 1e-30)


@pytest.mark.parametrize("interpret", [True, pltpu.InterpretParams()],
                         ids=["builtin", "tpu_interpret"])
@pytest.mark.parametrize("name", ACCEPTED)
def test_smem_scalar_cast_matches_ml_dtypes(name, interpret):
    rng = np.random.default_rng()
    ml = getattr(ml_dtypes, name)
    x = (rng.standard_normal(8) * 3).astype(ml)
    got = _scalar_call(jnp.dtype(name), x.size, interpret)(x)
    np.testing.assert_array_equal(np.asarray(got), x.astype(np.float64))


@pytest.mark.parametrize("name", ACCEPTED)
def test_compiles_for_v5e(aot_compile, name):
    dtype = jnp.dtype(name)
    params = pltpu.CompilerParams()
    _, text = aot_compile(_call(dtype, compiler_params=params), *_specs(dtype))
    assert "tpu_custom_call" in text
    _, text = aot_compile(_scalar_call(dtype, 8, compiler_params=params),
                          jax.ShapeDtypeStruct((8,), dtype))
    assert "tpu_custom_call" in text


def _theirs_compile(aot_compile, dtype) -> bool:
    """Whether JAX's own pallas_call of the same kernel compiles for a v5e."""
    from jax.experimental import pallas as jpl
    out = (jax.ShapeDtypeStruct((M, K), dtype), jax.ShapeDtypeStruct((K, N), jnp.float32),
           jax.ShapeDtypeStruct((M, N), jnp.float32))
    try:
        aot_compile(jpl.pallas_call(_kernel, out_shape=out), *_specs(dtype))
    except Exception as e:   # noqa: BLE001 - only Mosaic's own refusal may count
        assert "Mosaic failed to compile" in str(e), str(e)[:400]
        return False
    return True


def _specs(dtype):
    return (jax.ShapeDtypeStruct((M, K), jnp.float32), jax.ShapeDtypeStruct((K, N), dtype),
            jax.ShapeDtypeStruct((M, K), jnp.bfloat16))


@pytest.mark.parametrize("name", FLOAT8)
def test_float8_verdict_agrees_with_mosaic(aot_compile, name):
    """Accepted exactly when Mosaic compiles the cast-and-dot kernel: the three
    of ACCEPTED; the others (e4m3fnuz, e5m2fnuz, e4m3, e3m4: no load; e8m0fnu:
    no cast from float32, no dot) are refused before lowering, naming the operand."""
    dtype = jnp.dtype(name)
    chip_ok = _theirs_compile(aot_compile, dtype)
    try:
        aot.lower_for_tpu(_call(dtype, compiler_params=pltpu.CompilerParams()), *_specs(dtype))
        ours_ok = True
    except BackendCapabilityError as e:
        assert f"dtype {name} of args[1]" in str(e) and "Supported:" in str(e)
        ours_ok = False
    assert ours_ok == chip_ok, (name, ours_ok, chip_ok)
    assert chip_ok == (name in ACCEPTED)


def _dot_call(api, widen_first, float8_on_left):
    """bf16 x float8 -> f32, the float8 operand on either side; ``widen_first``:
    the kernel itself widens it to bfloat16 before the dot."""
    def kernel(a_ref, w_ref, o_ref):
        a, w = a_ref[...], w_ref[...]
        if widen_first:
            w = w.astype(jnp.bfloat16)
        if float8_on_left:
            o_ref[...] = jax.lax.dot_general(w, a, (((0,), (1,)), ((), ())),
                                             preferred_element_type=jnp.float32)
        else:
            o_ref[...] = jax.lax.dot_general(a, w, (((1,), (0,)), ((), ())),
                                             preferred_element_type=jnp.float32)
    shape = (N, M) if float8_on_left else (M, N)
    return api.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(shape, jnp.float32))


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="needs libtpu")
@pytest.mark.parametrize("float8_on_left", [False, True], ids=["rhs", "lhs"])
@pytest.mark.parametrize("name", ACCEPTED)
def test_e4m3fn_dot_is_widened_for_the_chip(name, float8_on_left):
    """Compiled for a v5e, ours' bf16 x float8_e4m3fn dot is exactly JAX's kernel
    that widens the float8 operand to bfloat16 first: measured on the chip,
    Mosaic's native mixed dot reads e4m3fn NaN as a finite number, the widened
    one keeps it and equals the native dot's bits elsewhere (pallas_tpu.float8_dot).
    The other float8 types compile as JAX's kernel does, unchanged."""
    import sys
    from pathlib import Path

    from jax.experimental import pallas as jpl
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))
    import sc_mosaic_text

    def modules(fn):
        specs = (jax.ShapeDtypeStruct((M, K), jnp.bfloat16), jax.ShapeDtypeStruct((K, N), name))
        return sc_mosaic_text.mosaic_modules(aot.lower_for_tpu(fn, *specs, topology="v5e:2x2")
                                             .as_text())
    ours = modules(_dot_call(pl, False, float8_on_left))
    theirs_native = modules(_dot_call(jpl, False, float8_on_left))
    theirs_widened = modules(_dot_call(jpl, True, float8_on_left))
    assert theirs_native != theirs_widened
    want = theirs_widened if name == "float8_e4m3fn" else theirs_native
    assert ours == want, sc_mosaic_text.first_difference(want[0], ours[0])
