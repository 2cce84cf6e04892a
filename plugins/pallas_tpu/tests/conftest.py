"""Test setup for pallas_tpu: quiet libtpu, 4 host devices, AOT helpers."""

import os

# libtpu prints start-up warnings on hosts without a TPU unless both are set
# before it loads; 4 host devices are for the multi-device (remote DMA) tests.
# On a TPU host (tools/tpu_native.py sets PALLAS_TPU_NATIVE) the chip's own
# settings stand, and JAX runs on the chip.
if not os.environ.get("PALLAS_TPU_NATIVE"):
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")   # no TPU chips for its lock to guard
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                                   + " --xla_force_host_platform_device_count=4").strip()

import jax  # noqa: E402
import pytest  # noqa: E402

from pallas_tpu import aot  # noqa: E402


@pytest.fixture(scope="session")
def v5e_mesh():
    """A one-device mesh of a v5e:2x2 topology (compiles with libtpu, no TPU needed)."""
    return aot.topology_mesh("v5e:2x2")


@pytest.fixture(scope="session")
def aot_compile(v5e_mesh):
    """aot_compile(fn, *arrays) -> the compiled executable and its StableHLO text."""
    def compile_for_v5e(fn, *arrays):
        lowered = aot.lower_for_tpu(fn, *arrays, topology="v5e:2x2")
        with jax.set_mesh(v5e_mesh):
            return lowered.compile(), lowered.as_text()
    return compile_for_v5e
