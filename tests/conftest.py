"""Shared test set-up: several CPU devices (for shard_map) and fresh random data."""

import os
import zlib

# Must be set before JAX initialises its CPU client.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
# Where libtpu is installed (the tpu plugin's extra) on a host without a TPU, it
# prints start-up warnings unless told what it is not running on; these are
# the test machines' values (they have no TPU), never a real TPU host's.
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
# ... and lets parallel test processes load it (its lock guards chips there are none of).
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def rng(request):
    """A generator seeded from the test's name: fresh data per test, reproducible runs."""
    seed = zlib.crc32(request.node.nodeid.encode())
    return np.random.default_rng(seed)


def rand(rng, *shape, dtype=np.float32):
    """Standard-normal data of ``dtype`` (never zeros)."""
    return rng.standard_normal(shape).astype(dtype)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "jax_ops: JAX's shipped Pallas kernels run from JAX's files against JAX "
        "(tests/test_jax_ops.py; select with -m jax_ops)")
