"""The compile-only hooks of the backend contract and the suite's manifest matching."""

import types

import jax
import jax.numpy as jnp
import numpy as np

from pallas_frontend import backend_api
from pallas_frontend.testing import kernels as K
from pallas_frontend.testing import plugin


def test_default_compile_only_compiles_for_this_machine_without_running():
    backend = backend_api.Backend()
    assert backend.compile_platform() == jax.default_backend()
    calls = []

    def f(x):
        calls.append(1)          # traced once by lower(), never executed again
        return jnp.sin(x) * 2
    compiled = backend.compile_only(f, jax.ShapeDtypeStruct((4,), jnp.float32))
    x = np.random.default_rng().standard_normal(4).astype(np.float32)
    np.testing.assert_allclose(compiled(x), np.sin(x.astype(np.float64)) * 2, rtol=1e-6)
    assert len(calls) == 1


def test_compile_only_of_a_conformance_kernel_through_the_interpreter():
    backend = backend_api.Backend()
    fn = K.vector_add(256, 128, interpret=True)
    spec = jax.ShapeDtypeStruct((256,), jnp.float32)
    assert backend.compile_only(fn, spec, spec) is not None


def test_manifest_pattern_matches_a_parametrized_name_exactly():
    item = types.SimpleNamespace(name="test_lowers_and_compiles[softmax]",
                                 nodeid="x.py::test_lowers_and_compiles[softmax]")
    assert plugin._matches(item, "test_lowers_and_compiles[softmax]")
    assert plugin._matches(item, "test_lowers_*")
    assert not plugin._matches(item, "test_lowers_and_compiles[layer_norm]")
