"""Execution layer, semantics a wrong backend gets wrong while the simple
kernels still pass: aliasing (what no grid point writes keeps the aliased
input's values), float64 computed in float64, and the backend's non-default
compiler params. (Whether an aliased output *block* starts as the input's
block is backend-specific: Mosaic TPU does not load output blocks.)"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pallas_frontend.testing import kernels as K

pytestmark = pytest.mark.execution


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.requires("aliasing")
def test_aliased_output_keeps_what_no_grid_point_writes(call_kernel, rng):
    x = _f32(rng, 2048)
    got = np.asarray(call_kernel(K.aliased_half_update, 2048, 256)(x))
    want = x.astype(np.float64)
    want[:1024] *= 2
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.requires("float64")
def test_float64_is_computed_in_float64(call_kernel, rng):
    # Products near 1e8 plus terms near 1e-3: float32 (or any float32
    # intermediate) is off by ~1e8 * 6e-8 = 6, float64 by ~1e-8.
    with jax.enable_x64(True):
        x = 1e4 + rng.standard_normal(1024)
        y = 1e4 + rng.standard_normal(1024)
        z = rng.standard_normal(1024) * 1e-3
        got = call_kernel(K.fma_f64, 1024, 256)(x, y, z)
        assert got.dtype == jnp.float64, got.dtype
        np.testing.assert_allclose(np.asarray(got), x * y + z, rtol=1e-13, atol=0)


def test_non_default_compiler_params(pallas_backend, call_options, rng):
    variants = list(pallas_backend.conformance_compiler_params())
    if not variants:
        pytest.skip(f"backend {pallas_backend.name!r} offers no non-default compiler params "
                    "(Backend.conformance_compiler_params)")
    a, b = _f32(rng, 128, 256), _f32(rng, 256, 128)
    x, y = _f32(rng, 1000), _f32(rng, 1000)
    for params in variants:
        options = {**call_options, "compiler_params": params}
        options.pop("backend", None)
        got = K.vector_add(1000, 128, **options)(x, y)
        np.testing.assert_allclose(got, K.vector_add_ref(x, y), rtol=1e-5, atol=1e-5,
                                   err_msg=f"with {params!r}")
        got = K.blocked_matmul(128, 128, 256, 128, 128, 128, **options)(a, b)
        np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64),
                                   **K.matmul_tolerance(a, b), err_msg=f"with {params!r}")


@pytest.mark.requires("aliasing")
def test_aliased_output_keeps_the_row_blocks_no_grid_point_writes(call_kernel, rng):
    x = _f32(rng, 64, 128)
    got = np.asarray(call_kernel(K.aliased_strided_update, 64, 128, 8)(x))
    want = x.astype(np.float64)
    for start in range(0, 64, 16):
        want[start:start + 8] += 1
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.requires("float64")
def test_float64_keeps_differences_below_float32_precision(call_kernel, rng):
    # x and y differ by ~1e-10: rounded to float32 both are 1.0 and the result 0.
    with jax.enable_x64(True):
        x = 1 + rng.standard_normal(1024) * 1e-10
        y = 1 + rng.standard_normal(1024) * 1e-10
        got = call_kernel(K.f64_difference_of_squares, 1024, 256)(x, y)
        assert got.dtype == jnp.float64, got.dtype
        np.testing.assert_allclose(np.asarray(got), (x - y) * (x + y), rtol=1e-12, atol=0)


def test_input_ref_writes_carry_to_the_next_grid_point(call_kernel, rng):
    acc, x = _f32(rng, 128), _f32(rng, 1024)
    got = np.asarray(call_kernel(K.input_running_sum, 1024, 128)(acc, x))
    want = acc.astype(np.float64) + np.cumsum(x.astype(np.float64).reshape(8, 128), axis=0)
    np.testing.assert_allclose(got, want.reshape(-1), rtol=1e-5, atol=1e-5)


def test_input_ref_writes_carry_over_a_revisiting_grid_axis(call_kernel, rng):
    x = _f32(rng, 16, 128)
    got = np.asarray(call_kernel(K.input_doubling, 16, 128, 8, 3)(x))
    want = np.concatenate([x.astype(np.float64) * 2.0 ** (j + 1) for j in range(3)], axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
