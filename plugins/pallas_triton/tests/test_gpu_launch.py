"""GPU-only: kernels launched through XLA's Triton custom call, checked for numerics.

Skips cleanly without a CUDA/ROCm device (there is none where CI runs); on one, run
``pytest plugins/pallas_triton/tests/test_gpu_launch.py`` or
``python benchmarks/gpu_triton.py``. Every comparison is against the frontend's reference
interpreter, NumPy float64 or XLA on fresh random data.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gpu_kernels as G
import kernels as K
import pallas_triton as pt
from pallas_frontend.testing import kernels as CK

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    jax.default_backend() != "gpu", reason="needs a CUDA/ROCm GPU (launches the kernels)")]

GPU = dict(compiler_params=pt.CompilerParams(num_warps=4, num_stages=2))
REF = dict(interpret=True)

# the conformance kernels: (builder, args, operand shapes)
CONFORMANCE = {
    "vector_add": (CK.vector_add, (1024, 128), [(1024,), (1024,)]),
    "ragged_add": (CK.vector_add, (1000, 128), [(1000,), (1000,)]),
    "blocked_matmul": (CK.blocked_matmul, (128, 256, 384, 128, 128, 128), [(128, 384), (384, 256)]),
    "scratch_matmul": (CK.scratch_matmul, (128, 256, 384, 64, 128, 128), [(128, 384), (384, 256)]),
    "softmax": (CK.softmax, (32, 64, 8), [(32, 64)]),
    "layer_norm": (CK.layer_norm, (32, 64, 8, 1e-5), [(32, 64), (64,), (64,)]),
    "transpose_2d": (CK.transpose_2d, (256, 384, 128, 128), [(256, 384)]),
    "aliased_scale": (CK.aliased_scale, (1024, 256), [(1,), (1024,)]),
}


def test_runs_on_the_gpu_backend():
    assert pt.TritonBackend().call_options("gpu")["compiler_params"] is not None
    import pallas_frontend as pl
    assert pl.which_backend().name == "triton"


@pytest.mark.parametrize("case", sorted(CONFORMANCE))
def test_conformance_kernel_matches_interpreter(rng, case):
    builder, args, shapes = CONFORMANCE[case]
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    got = jax.jit(builder(*args, **GPU))(*xs)
    want = builder(*args, **REF)(*xs)
    # tf32 is the default dot precision on the GPU: matmuls compare at tf32 tolerance
    tol = 2e-3 * np.sqrt(shapes[0][-1]) if "matmul" in case else 1e-5
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=tol, atol=tol)


def test_matmul_bf16_matches_xla(rng):
    a = jnp.asarray(rng.standard_normal((512, 256)), jnp.bfloat16)
    b = jnp.asarray(rng.standard_normal((256, 384)), jnp.bfloat16)
    got = jax.jit(lambda a, b: K.matmul(a, b, bm=64, bn=64, bk=32, **GPU))(a, b)
    want = jnp.dot(a, b, preferred_element_type=jnp.float32)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-2, atol=1e-2)


def test_softmax_matches_xla(rng):
    x = jnp.asarray(rng.standard_normal((256, 1000)), jnp.float32)
    got = jax.jit(lambda x: K.softmax(x, **GPU))(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(jax.nn.softmax(x, axis=-1)),
                               rtol=1e-5, atol=1e-6)


def test_gpu_style_kernels_match_numpy(rng):
    q, k, v = (rng.standard_normal((1, 64, 2, 32)).astype(np.float32) for _ in range(3))
    o, _ = jax.jit(lambda q, k, v: G.flash_attention_fwd(q, k, v, bq=32, bk=32, **GPU))(q, k, v)
    np.testing.assert_allclose(np.asarray(o), G.attention_ref(q, k, v)[0], rtol=2e-2, atol=2e-2)
    x = rng.standard_normal((16, 300)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(jax.jit(lambda x: G.softmax(x, **GPU))(x)),
                               G.softmax_ref(x), rtol=1e-5, atol=1e-6)
