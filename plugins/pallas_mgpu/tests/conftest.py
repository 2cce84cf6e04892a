import os

# two CPU devices for the shard_map test; set before JAX starts its CPU client
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs an NVIDIA Hopper GPU (skipped without one)")
    config.addinivalue_line("markers", "cuda_aot: needs jax-cuda12-plugin/pjrt (device-less compile)")


@pytest.fixture
def rng(request):
    seed = int(np.random.SeedSequence().entropy % (2 ** 32))
    print(f"rng seed {seed}")
    return np.random.default_rng(seed)
