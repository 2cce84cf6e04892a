"""Shared test set-up: several CPU devices (for shard_map) and fresh random data."""

import os
import zlib

# Must be set before JAX initialises its CPU client.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

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
