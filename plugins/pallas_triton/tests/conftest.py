import os

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def rng(request):
    # fresh data each run; the seed is printed so that a failure can be replayed
    seed = int(np.random.SeedSequence().entropy % (2 ** 32))
    print(f"rng seed {seed}")
    return np.random.default_rng(seed)


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA/ROCm GPU; skipped without one")
    config.addinivalue_line("markers", "cuda_aot: needs jax-cuda12-plugin/pjrt (device-less compile)")
    config.addinivalue_line("markers", "amd: compiles to HSACO for AMD GPUs (tox -e triton-amd)")
