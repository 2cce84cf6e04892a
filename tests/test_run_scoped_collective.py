"""run_scoped(collective_axes=...) reaches the backend as a ScopedAllocation;
the built-in interpreter (no 'collective_run_scoped' capability) refuses it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
from pallas_frontend import backend_api


def _kernel(axes):
    def body(x, o):
        def scope(buf):
            buf[...] = x[...] * 2.0
            o[...] = buf[...]
        pl.run_scoped(scope, pl.MemorySpace.DEFAULT((128,), jnp.float32), collective_axes=axes)
    return body


def test_collective_axes_travel_in_the_kernel_jaxpr():
    seen = []

    class Recorder(backend_api.Backend):
        name = "recorder_collective"
        api_version = backend_api.API_VERSION
        platforms = ("cpu",)

        def check(self, kernel):
            seen.extend(backend_api.scoped_allocation_of(e) for e in kernel.iter_equations()
                        if backend_api.scoped_allocation_of(e) is not None)
            raise backend_api.BackendCapabilityError("recorded")
    from pallas_frontend import registry
    pl.register_backend(Recorder())
    try:
        f = pl.pallas_call(_kernel(("wg",)), jax.ShapeDtypeStruct((128,), jnp.float32),
                           backend="recorder_collective")
        with pytest.raises(NotImplementedError, match="recorded"):
            f(np.ones(128, np.float32))
    finally:     # other tests list the registered backends
        registry.unregister_backend("recorder_collective")
    (alloc,) = seen
    assert alloc.collective_axes == ("wg",) and alloc.memory_space is pl.MemorySpace.DEFAULT


def test_interpreter_refuses_collective_allocations_and_runs_plain_ones():
    f = pl.pallas_call(_kernel("wg"), jax.ShapeDtypeStruct((128,), jnp.float32), interpret=True)
    with pytest.raises(NotImplementedError, match="collective_run_scoped.*test_run_scoped_collective"):
        f(np.ones(128, np.float32))
    x = np.random.default_rng().standard_normal(128).astype(np.float32)
    g = pl.pallas_call(_kernel(()), jax.ShapeDtypeStruct((128,), jnp.float32), interpret=True)
    np.testing.assert_allclose(g(x), 2 * x.astype(np.float64), rtol=1e-6)


def test_collective_axes_must_be_names():
    f = pl.pallas_call(_kernel((0,)), jax.ShapeDtypeStruct((128,), jnp.float32), interpret=True)
    with pytest.raises(TypeError, match="collective_axes must be axis names"):
        f(np.ones(128, np.float32))
