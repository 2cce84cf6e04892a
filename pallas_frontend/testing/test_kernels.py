"""Lowering, execution and interpret-parity layers over the conformance kernels.

Every numeric check compares with NumPy float64 on fresh random data. Stated
tolerances: float32 elementwise 1e-5 (relative and absolute); reductions
(softmax, layer norm) 1e-4; matmul accumulating over k: rtol 1e-4,
atol 1e-4 * sqrt(k), or twice the error of XLA's own jnp.dot of the same
inputs on the same device if larger (``kernels.matmul_tolerance``: a TPU's
default-precision float32 dot rounds operands to bfloat16). Parity with the interpreter: rtol/atol 1e-5, atol 1e-5 * sqrt(k)
for matmuls (two float32 sums over k in different orders).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pallas_frontend.testing import kernels as K

ELEMENTWISE = dict(rtol=1e-5, atol=1e-5)
REDUCTION = dict(rtol=1e-4, atol=1e-4)


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# (builder, builder args, operand shapes): the kernels every layer runs. Blocks
# are powers of two (Triton) and tile (8, 128) or equal the array (Mosaic TPU).
CASES = {
    "vector_add": (K.vector_add, (1024, 128), [(1024,), (1024,)]),
    "ragged_add": (K.vector_add, (1000, 128), [(1000,), (1000,)]),
    "blocked_matmul": (K.blocked_matmul, (128, 256, 384, 128, 128, 128), [(128, 384), (384, 256)]),
    "softmax": (K.softmax, (32, 64, 8), [(32, 64)]),
    "layer_norm": (K.layer_norm, (32, 64, 8, 1e-5), [(32, 64), (64,), (64,)]),
    "transpose_2d": (K.transpose_2d, (256, 384, 128, 128), [(256, 384)]),
}


@pytest.mark.lowering
@pytest.mark.parametrize("case", sorted(CASES))
def test_lowers_and_compiles(compile_kernel, case):
    builder, args, shapes = CASES[case]
    structs = [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes]
    compiled = compile_kernel(builder, *args, operands=structs)
    assert compiled is not None


@pytest.mark.execution
def test_vector_add(call_kernel, rng):
    x, y = _f32(rng, 1024), _f32(rng, 1024)
    np.testing.assert_allclose(call_kernel(K.vector_add, 1024, 128)(x, y), K.vector_add_ref(x, y),
                               **ELEMENTWISE)


@pytest.mark.execution
def test_ragged_add_grid_not_dividing(call_kernel, rng):
    x, y = _f32(rng, 1000), _f32(rng, 1000)
    np.testing.assert_allclose(call_kernel(K.vector_add, 1000, 128)(x, y), K.vector_add_ref(x, y),
                               **ELEMENTWISE)


@pytest.mark.execution
def test_blocked_matmul_accumulates_over_k(call_kernel, rng):
    a, b = _f32(rng, 128, 384), _f32(rng, 384, 256)
    got = call_kernel(K.blocked_matmul, 128, 256, 384, 128, 128, 128)(a, b)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64),
                               **K.matmul_tolerance(a, b))


@pytest.mark.execution
@pytest.mark.requires("scratch")
def test_scratch_accumulator(call_kernel, rng):
    a, b = _f32(rng, 128, 256), _f32(rng, 256, 256)
    got = call_kernel(K.scratch_matmul, 128, 256, 256, 128, 128, 128)(a, b)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64),
                               **K.matmul_tolerance(a, b))


@pytest.mark.execution
def test_softmax(call_kernel, rng):
    x = _f32(rng, 32, 64) * 4
    np.testing.assert_allclose(call_kernel(K.softmax, 32, 64, 8)(x), K.softmax_ref(x), **REDUCTION)


@pytest.mark.execution
def test_layer_norm(call_kernel, rng):
    x, w, b = _f32(rng, 32, 64), _f32(rng, 64), _f32(rng, 64)
    got = call_kernel(K.layer_norm, 32, 64, 8, 1e-5)(x, w, b)
    np.testing.assert_allclose(got, K.layer_norm_ref(x, w, b, 1e-5), **REDUCTION)


@pytest.mark.execution
def test_2d_grid_transposing_out_index_map(call_kernel, rng):
    x = _f32(rng, 256, 384)
    np.testing.assert_allclose(call_kernel(K.transpose_2d, 256, 384, 128, 128)(x),
                               x.astype(np.float64).T, **ELEMENTWISE)


@pytest.mark.execution
@pytest.mark.requires("aliasing")
def test_input_output_aliasing(call_kernel, rng):
    s, x = _f32(rng, 1), _f32(rng, 4096)
    f = jax.jit(call_kernel(K.aliased_scale, 4096, 1024), donate_argnums=1)
    expected = x.astype(np.float64) * np.float64(s[0])
    np.testing.assert_allclose(f(s, jnp.asarray(x)), expected, **ELEMENTWISE)


@pytest.mark.execution
@pytest.mark.requires("vmap")
def test_vmap_adds_a_grid_axis(call_kernel, rng):
    # (8, 128) blocks, ragged in the last dim: vmapped, (squeezed, 8, 128) on (3, 16, 1000)
    x, y = _f32(rng, 3, 16, 1000), _f32(rng, 3, 16, 1000)
    got = jax.vmap(call_kernel(K.tiled_add, 16, 1000, 8, 128))(x, y)
    np.testing.assert_allclose(got, K.vector_add_ref(x, y), **ELEMENTWISE)


@pytest.mark.execution
@pytest.mark.requires("jvp")
def test_jvp_of_softmax(call_kernel, rng):
    x, t = _f32(rng, 16, 32), _f32(rng, 16, 32)
    primal, tangent = jax.jvp(call_kernel(K.softmax, 16, 32, 8), (x,), (t,))
    s = K.softmax_ref(x)
    expected_tangent = s * (t - (s * t).sum(-1, keepdims=True))
    np.testing.assert_allclose(primal, s, **REDUCTION)
    np.testing.assert_allclose(tangent, expected_tangent, **REDUCTION)


@pytest.mark.interpret_parity
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_reference_interpreter(call_kernel, rng, case):
    builder, args, shapes = CASES[case]
    operands = [_f32(rng, *s) for s in shapes]
    got = call_kernel(builder, *args)(*operands)
    want = builder(*args, interpret=True)(*operands)
    atol = 1e-5 * np.sqrt(shapes[0][1]) if "matmul" in case else 1e-5
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=atol)
