import os
import sys

import numpy as np
import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs an NVIDIA Hopper GPU (skipped without one)")
    config.addinivalue_line("markers", "cuda_aot: needs jax-cuda12-plugin/pjrt (device-less compile)")


@pytest.fixture
def rng(request):
    seed = int(np.random.SeedSequence().entropy % (2 ** 32))
    print(f"rng seed {seed}")
    return np.random.default_rng(seed)


@pytest.fixture(scope="session")
def cuda_python():
    """A Python with jax-cuda12-plugin for device-less compiles: this one, else
    ``$PALLAS_MGPU_CUDA_PYTHON``; the test is skipped without either."""
    from pallas_mgpu import aot
    if aot.has_cuda_plugin():
        return sys.executable
    other = os.environ.get("PALLAS_MGPU_CUDA_PYTHON")
    if other:
        return other
    pytest.skip("no jax-cuda12-plugin here (tox -e mgpu-cuda-aot, or set PALLAS_MGPU_CUDA_PYTHON)")
