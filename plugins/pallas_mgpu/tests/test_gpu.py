"""On an NVIDIA Hopper GPU only: launch and numerics against interpret mode
and NumPy, and the matmul's TFLOP/s next to XLA's (printed, not asserted).
Skipped without a GPU (this project's CI has none; see the README)."""

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_mgpu as plgpu
from pallas_frontend.testing import kernels as K


def _hopper():
    try:
        gpus = [d for d in jax.devices() if d.platform == "gpu"]
    except RuntimeError:
        gpus = []
    if not gpus or "H100" not in gpus[0].device_kind and "H200" not in gpus[0].device_kind:
        pytest.skip("needs an NVIDIA H100/H200 GPU")
    return gpus[0]


pytestmark = pytest.mark.gpu


def test_launch_matches_interpret_and_numpy(rng):
    _hopper()
    x = rng.standard_normal((256, 512)).astype(np.float16)
    y = rng.standard_normal((512, 256)).astype(np.float16)
    gpu = np.asarray(K.blocked_matmul(256, 256, 512, 64, 128, 64,
                                      compiler_params=plgpu.CompilerParams())(x, y))
    interp = np.asarray(K.blocked_matmul(256, 256, 512, 64, 128, 64,
                                         interpret=plgpu.InterpretParams())(x, y))
    ref = x.astype(np.float64) @ y
    np.testing.assert_allclose(gpu, ref, rtol=1e-3, atol=1e-2)
    np.testing.assert_allclose(gpu, interp, rtol=1e-3, atol=1e-2)


def test_matmul_tflops_vs_xla(rng):
    _hopper()
    m = n = k = 4096
    x = jnp.asarray(rng.standard_normal((m, k)), jnp.float16)
    y = jnp.asarray(rng.standard_normal((k, n)), jnp.float16)
    ours = jax.jit(K.blocked_matmul(m, n, k, 64, 128, 64, compiler_params=plgpu.CompilerParams()))
    xla = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32))
    for name, f in (("pallas_mgpu", ours), ("xla", xla)):
        f(x, y).block_until_ready()
        t = time.perf_counter()
        for _ in range(10):
            out = f(x, y)
        out.block_until_ready()
        print(f"{name}: {2 * m * n * k * 10 / (time.perf_counter() - t) / 1e12:.1f} TFLOP/s")
