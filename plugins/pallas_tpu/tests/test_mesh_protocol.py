"""A mesh that only speaks JAX's mesh protocol (axis names and sizes, core
type, dimension semantics, default memory space: what JAX's own tests give
``pl.kernel`` as a mock) goes to the backend those values belong to, and on CPU
without interpret params fails as JAX's does (ValueError, "Only interpret mode
is supported on CPU") instead of a TypeError about the mock's params.
JAX's tpu_sparsecore_pallas_test.py test_sparsecore_availability_check."""

from unittest import mock

import jax
import jax.numpy as jnp
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu
from pallas_frontend import registry
from pallas_frontend.backend_api import BackendUnavailableError


def _protocol_mesh():
    mesh = mock.MagicMock()       # every other attribute a MagicMock, as in JAX's test
    mesh.axis_names = ("x",)
    mesh.axis_sizes = {"x": 1}
    mesh.shape = {"x": 1}
    mesh.core_type = pltpu.CoreType.SC_SCALAR_SUBCORE
    mesh.dimension_semantics = [pltpu.GridDimensionSemantics.PARALLEL]
    mesh.default_memory_space = pltpu.SMEM
    return mesh


def test_a_protocol_mesh_names_the_backend_its_values_belong_to():
    params = registry.params_of_mesh(_protocol_mesh())
    assert isinstance(params, pltpu.CompilerParams)
    real = pltpu.CompilerParams(dimension_semantics=("parallel",))
    assert registry.params_of_mesh(mock.Mock(compiler_params=real)) is real


def test_on_cpu_without_interpret_it_fails_as_jaxs_does():
    @jax.jit
    @pl.kernel(out_type=jax.ShapeDtypeStruct((8,), jnp.float32), mesh=_protocol_mesh())
    def kernel(o_hbm_ref):
        del o_hbm_ref
    with pytest.raises(ValueError, match="Only interpret mode is supported on CPU") as caught:
        kernel.lower().compile()
    assert isinstance(caught.value, BackendUnavailableError)

