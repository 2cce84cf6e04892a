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
