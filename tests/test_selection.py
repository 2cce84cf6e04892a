"""Selection rules (DESIGN.md "Selection") and the capability check before lowering."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
from pallas_frontend import backend_api, registry
from pallas_frontend.backend_api import BackendCapabilityError, BackendUnavailableError


@dataclasses.dataclass(frozen=True)
class AccelParams(pl.CompilerParams):
    BACKEND = "accel"


@dataclasses.dataclass(frozen=True)
class AccelInterpretParams:
    pass


@dataclasses.dataclass(frozen=True)
class MissingParams(pl.CompilerParams):
    BACKEND = "triton"


class Recording(backend_api.Backend):
    """Delegates to the interpreter and records that it lowered."""
    api_version = backend_api.API_VERSION
    def __init__(self, name, platforms, priority=0, params=None, interpret_params=None,
                 capabilities=frozenset()):
        self.name, self.platforms, self.priority = name, platforms, priority
        self.compiler_params_type, self.interpret_params_type = params, interpret_params
        self.capabilities = capabilities
        self.lowered = 0

    def lower(self, kernel, ctx, *args):
        self.lowered += 1
        return registry.get_backend("interpret").lower(kernel, ctx, *args)


@pytest.fixture
def accel():
    b = registry.register_backend(Recording("accel", ("cpu", "cuda"), priority=1000,
                                            params=AccelParams,
                                            interpret_params=AccelInterpretParams))
    yield b
    registry.unregister_backend("accel")


def select(platform="cpu", interpret=False, compiler_params=None, backend=None):
    return registry.select_backend(platform=platform, interpret=interpret,
                                   compiler_params=compiler_params, backend=backend)


def test_interpret_true_selects_the_interpreter(accel):
    assert select("cuda", interpret=True).name == "interpret"


def test_interpret_params_select_their_backend(accel):
    assert select("tpu", interpret=AccelInterpretParams()) is accel


def test_compiler_params_select_their_backend(accel):
    assert select("cpu", compiler_params=AccelParams()) is accel


def test_explicit_backend_name(accel):
    assert select("cpu", backend="accel") is accel


def test_cpu_default_is_the_interpreter_even_with_a_higher_priority_backend(accel):
    assert select("cpu").name == "interpret"


def test_other_platforms_default_to_highest_priority(accel):
    assert select("cuda") is accel


def test_configured_default_overrides(accel, monkeypatch):
    pl.set_default_backend("cpu", "accel")
    try:
        assert select("cpu") is accel
    finally:
        pl.set_default_backend("cpu", None)
    monkeypatch.setenv("PALLAS_FRONTEND_DEFAULT_BACKEND", "cuda=interpret,cpu=accel")
    assert select("cpu") is accel and select("cuda").name == "interpret"


@dataclasses.dataclass(frozen=True)
class VendorParams(pl.CompilerParams):
    BACKEND = "vendorq"


def test_missing_backend_of_compiler_params_names_the_distribution():
    with pytest.raises(BackendUnavailableError) as info:
        select("cuda", compiler_params=MissingParams())
    msg = str(info.value)
    assert "'triton'" in msg and "pallas-frontend[" not in msg
    # installed here or not: either the distribution to install, or the type it takes
    assert "pallas-triton" in msg or "pallas_triton" in msg
    # from a clone the hint installs the plugin's folder (no index has pallas-triton yet)
    from pallas_frontend import install_hints
    assert registry.install_hint("triton") == install_hints.install_command("pallas-triton")
    assert registry.install_hint("triton").endswith(" install -e plugins/pallas_triton") or \
        registry.install_hint("triton").endswith("/plugins/pallas_triton")


def test_third_party_params_get_no_pallas_frontend_extra_hint():
    with pytest.raises(BackendUnavailableError) as info:
        select("cuda", compiler_params=VendorParams())
    msg = str(info.value)
    assert "'vendorq'" in msg and "'cuda'" in msg and "pallas-frontend[" not in msg
    assert "install the distribution that provides backend 'vendorq'" in msg


def test_backend_not_serving_the_platform_is_named(accel):
    with pytest.raises(BackendUnavailableError, match="does not serve platform 'tpu'") as info:
        select("tpu", compiler_params=AccelParams())
    assert "'accel'" in str(info.value) and "pallas-frontend[" not in str(info.value)


def test_backend_argument_contradicting_params_is_an_error(accel):
    with pytest.raises(BackendUnavailableError, match="contradicts compiler_params"):
        select("cpu", compiler_params=AccelParams(), backend="interpret")


def _add(**call):
    return pl.pallas_call(lambda x, y, o: o.__setitem__(..., x[...] + y[...]),
                          jax.ShapeDtypeStruct((256,), jnp.float32), grid=(4,),
                          in_specs=[pl.BlockSpec((64,), lambda i: (i,))] * 2,
                          out_specs=pl.BlockSpec((64,), lambda i: (i,)), **call)


def test_pallas_call_routes_by_compiler_params(accel):
    rng = np.random.default_rng()
    x, y = (rng.standard_normal(256).astype(np.float32) for _ in range(2))
    got = _add(compiler_params=AccelParams())(x, y)
    np.testing.assert_allclose(got, x.astype(np.float64) + y, rtol=1e-6, atol=1e-6)
    assert accel.lowered == 1


def test_capability_check_runs_before_lowering():
    picky = registry.register_backend(Recording("picky", ("cpu",), capabilities=frozenset({"grid"})))
    try:
        def body(x, o, acc):
            acc[...] = x[...] * 2
            o[...] = acc[...]
        f = pl.pallas_call(body, jax.ShapeDtypeStruct((8,), jnp.float32), backend="picky",
                           scratch_shapes=[pl.MemorySpace.ANY((8,), jnp.float32)])
        with pytest.raises(BackendCapabilityError) as info:
            f(np.ones(8, np.float32))
        msg = str(info.value)
        assert "'picky'" in msg and "capability 'scratch'" in msg and "test_selection.py:" in msg
        assert picky.lowered == 0
    finally:
        registry.unregister_backend("picky")


@dataclasses.dataclass(frozen=True)
class ModalParams(pl.CompilerParams):
    BACKEND = "modal"


class Modal(Recording):
    """A backend with its own interpret mode, as pallas_tpu.force_tpu_interpret_mode."""
    forced = None

    def forced_interpret_params(self):
        return self.forced


def test_backend_interpret_mode_applies_to_its_compiler_params():
    b = registry.register_backend(Modal("modal", ("tpu",), params=ModalParams,
                                        interpret_params=AccelInterpretParams))
    try:
        x = jnp.asarray(np.random.default_rng(7).standard_normal(256), jnp.float32)

        def k(x_ref, o_ref):
            o_ref[...] = x_ref[...] * 2.0

        f = pl.pallas_call(k, out_shape=jax.ShapeDtypeStruct((256,), jnp.float32),
                           compiler_params=ModalParams())
        with pytest.raises(BackendUnavailableError, match="does not serve platform 'cpu'"):
            f(x)
        b.forced = AccelInterpretParams()
        np.testing.assert_allclose(np.asarray(f(x)), 2.0 * np.asarray(x, np.float64), rtol=1e-6)
        assert b.lowered == 1
        b.forced = None       # switched off again: the trace cache must not keep the old mode
        with pytest.raises(BackendUnavailableError, match="does not serve platform 'cpu'"):
            f(x)
    finally:
        registry.unregister_backend("modal")


def test_interpret_true_with_another_backend_name_is_an_error(accel):
    with pytest.raises(ValueError, match="interpret=True runs the built-in interpreter, but "
                                         "backend='accel' names another backend"):
        _add(interpret=True, backend="accel")
    _add(interpret=True, backend="interpret")      # naming the interpreter itself is fine


def test_interpret_true_with_a_vendors_compiler_params_interprets(accel):
    # as in JAX (its GPU kernels pass both): the params are hardware hints
    rng = np.random.default_rng()
    x, y = (rng.standard_normal(256).astype(np.float32) for _ in range(2))
    got = _add(interpret=True, compiler_params=AccelParams())(x, y)
    np.testing.assert_allclose(got, x.astype(np.float64) + y, rtol=1e-6, atol=1e-6)
    # frontend-generic params carry no backend: the interpreter honours them
    got = _add(interpret=True, compiler_params=pl.CompilerParams())(x, y)
    np.testing.assert_allclose(got, x.astype(np.float64) + y, rtol=1e-6, atol=1e-6)
    assert accel.lowered == 0
