"""Without libtpu, compiling for a TPU topology says how to get it with a command
that works wherever pallas-tpu came from (issue 34): JAX's own tpu extra at the
installed JAX's version, which PyPI has ("pallas-tpu[libtpu]" resolves from no
index yet) and which picks the libtpu that JAX was built with (issue 41)."""

import importlib.util

import jax

import pytest

from pallas_frontend.backend_api import BackendUnavailableError
from pallas_tpu import aot


def test_missing_libtpu_names_the_pinned_requirement(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "libtpu" else real(name, *a))
    aot.topology_mesh.cache_clear()
    try:
        with pytest.raises(BackendUnavailableError) as info:
            aot.topology_mesh("v5e:1x1")
    finally:
        aot.topology_mesh.cache_clear()
    assert f"pip install 'jax[tpu]=={jax.__version__}'" in str(info.value), str(info.value)
    assert "pallas-tpu[" not in str(info.value)
