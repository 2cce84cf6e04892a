import os

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import pallas_frontend  # noqa: E402
import pytest  # noqa: E402

import pallas_triton  # noqa: E402

# TEMPORARY: until entry-point discovery lands in pallas_frontend.registry, register by hand.
if "triton" not in pallas_frontend.backends():
    pallas_frontend.register_backend(pallas_triton.TritonBackend())


@pytest.fixture
def rng(request):
    # fresh data each run; the seed is printed on failure through the test id
    return __import__("numpy").random.default_rng()
