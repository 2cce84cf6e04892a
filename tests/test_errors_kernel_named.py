"""Issue 24 #13: an error raised while choosing or lowering a kernel's backend
names the kernel and its line (JAX's ``name for kernel function f at
file:line``), keeps its type, and is not prefixed twice."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
from pallas_frontend import backend_api, registry


def scale_rows(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def _call(**kw):
    return pl.pallas_call(scale_rows, out_shape=jax.ShapeDtypeStruct((8,), jnp.float32), **kw)


def _x():
    return jnp.asarray(np.random.default_rng(7).standard_normal(8), jnp.float32)


def test_unknown_backend_names_the_kernel():
    with pytest.raises(backend_api.BackendUnavailableError) as err:
        _call(backend="no_such_backend")(_x())
    msg = str(err.value)
    assert msg.startswith("Kernel scale_rows at ") and "test_errors_kernel_named.py:" in msg
    assert "no_such_backend" in msg and msg.count("scale_rows") == 1


class _Refusing:
    name, version = "refusing", "0"

    def __init__(self, exc):
        self.exc = exc

    def check(self, kernel):
        raise self.exc


@pytest.mark.parametrize("exc", [NotImplementedError("no vector unit for this op"),
                                 KeyError("missing rule"),
                                 backend_api.BackendCapabilityError("lacks capability 'x'")])
def test_lowering_error_keeps_its_type_and_names_the_kernel(monkeypatch, exc):
    monkeypatch.setattr(registry, "select_backend", lambda **kw: _Refusing(exc))
    with pytest.raises(type(exc)) as err:
        _call(name="scaler")(_x())
    assert err.value is exc
    assert str(exc.args[0]).startswith("Kernel scaler for kernel function scale_rows at ")


def test_a_message_that_already_names_the_kernel_is_left_alone(monkeypatch):
    exc = ValueError("Kernel 'scale_rows': already said")
    monkeypatch.setattr(registry, "select_backend", lambda **kw: _Refusing(exc))
    with pytest.raises(ValueError) as err:
        _call()(_x())
    assert err.value.args == ("Kernel 'scale_rows': already said",)


def test_the_kernel_still_runs():
    x = _x()
    np.testing.assert_allclose(np.asarray(_call()(x)), np.asarray(x, np.float64) * 2.0, rtol=1e-6)


class _OneCore:           # a mesh is anything with a ``shape`` mapping (as JAX's)
    shape = {"c": 1}


def test_a_core_map_body_is_named_at_the_users_line(monkeypatch):
    exc = NotImplementedError("no vector unit for this op")
    monkeypatch.setattr(registry, "select_backend", lambda **kw: _Refusing(exc))
    ref = jax.new_ref(_x())

    def doubled():
        ref[...] = ref[...] * 2.0
    with pytest.warns(DeprecationWarning):
        core_map = pl.core_map
    with pytest.raises(NotImplementedError) as err:
        core_map(_OneCore())(doubled)
    where = f"{__file__}:{doubled.__code__.co_firstlineno}"
    assert str(err.value).startswith("Kernel doubled at " + where), str(err.value)
