"""lax.polynomial rounded as XLA on CPU rounds it, bit for bit under Triton's interpreter:
float32/float64 Horner steps fused (fma), float16 an fma in float32 rounded to float16 per
step, bfloat16 each multiply and add rounded (from JAX 0.12.1, which lowers each step as
fmuladd, bfloat16 as float16). Before (issue 32) plain multiply-then-add steps were 11-66
ULP from XLA near the polynomial's roots."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import pallas_frontend as pl
import pallas_triton as pt
from jax_window import LAX_POLYNOMIAL

pytestmark = LAX_POLYNOMIAL

COEFFS = [0.5, -1.25, 2.0, 0.75]


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16, jnp.bfloat16, jnp.float64,
                                   jnp.int32])
def test_polynomial_as_xla(dtype):
    with jax.enable_x64(dtype == jnp.float64):
        rng = np.random.default_rng(7)
        x = rng.standard_normal((64, 128)) * 3
        x.reshape(-1)[:6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30]
        x = jnp.asarray(x if dtype != jnp.int32 else np.nan_to_num(x).clip(-50, 50)).astype(dtype)
        coeffs = [3, -2, 1, 4] if dtype == jnp.int32 else COEFFS
        fn = lambda v: lax.polynomial(v, coeffs)  # noqa: E731

        def body(x_ref, o_ref):
            o_ref[...] = fn(x_ref[...])
        got = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                             interpret=pt.InterpretParams())(x)
        want = jax.jit(fn)(x)
    width = f"uint{np.dtype(dtype).itemsize * 8}"
    np.testing.assert_array_equal(np.asarray(got).view(width), np.asarray(want).view(width))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16, jnp.bfloat16])
def test_generated_source_compiles_for_sm90(dtype):
    def kernel(x):
        def body(x_ref, o_ref):
            o_ref[...] = lax.polynomial(x_ref[...], COEFFS)
        return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              interpret=pt.InterpretParams())(x)
    ir = pt.kernel_ir_of(kernel, jax.ShapeDtypeStruct((64, 64), dtype))
    asm = pt.compile_for_target(ir, target=("cuda", 90), params=pt.CompilerParams(num_warps=4))
    assert "fma.rn" in asm["ptx"]
