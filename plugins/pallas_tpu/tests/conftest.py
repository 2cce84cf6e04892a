"""Test setup for pallas_tpu: quiet libtpu, 4 host devices, AOT helpers."""

import os

# libtpu prints start-up warnings on hosts without a TPU unless both are set
# before it loads; 4 host devices are for the multi-device (remote DMA) tests.
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_force_host_platform_device_count=4").strip()

import jax  # noqa: E402
import pytest  # noqa: E402

import pallas_frontend as pf  # noqa: E402
import pallas_tpu  # noqa: E402

# TEMPORARY: until entry-point discovery lands in the frontend, register by hand.
if "tpu" not in pf.backends():
    pf.register_backend(pallas_tpu.TpuBackend())


@pytest.fixture(scope="session")
def v5e_mesh():
    """A one-device mesh of a v5e:2x2 topology (compiles with libtpu, no TPU needed)."""
    from jax.experimental import topologies
    topo = topologies.get_topology_desc(topology_name="v5e:2x2", platform="tpu")
    return jax.sharding.Mesh(topo.devices[:1], ("x",))


@pytest.fixture(scope="session")
def aot_compile(v5e_mesh):
    """aot_compile(fn, *arrays) -> the compiled executable and its StableHLO text."""
    from jax.sharding import NamedSharding, PartitionSpec as P

    def compile_for_v5e(fn, *arrays):
        specs = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=NamedSharding(v5e_mesh, P()))
                 for a in arrays]
        with jax.set_mesh(v5e_mesh):
            lowered = jax.jit(fn).trace(*specs).lower()
            return lowered.compile(), lowered.as_text()
    return compile_for_v5e
