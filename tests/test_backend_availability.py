"""The "available" column of `pallas backends` names what a shipped backend
lacks on this machine and the install that provides it (issue 27): a `[tpu]`
install without libtpu is not "compile-only (tpu)" (its compile would fail
with "needs libtpu")."""

import dataclasses
import importlib.util

import pytest

from pallas_frontend import backend_api, backend_needs, diagnostics, install_hints


@dataclasses.dataclass(frozen=True)
class _Interpret:
    pass


def _shipped(name, dist, platforms, compile_platform):
    class Shipped(backend_api.Backend):
        api_version = backend_api.API_VERSION
        interpret_params_type = _Interpret

        def compile_platform(self):
            return compile_platform
    b = Shipped()
    b.name, b.distribution, b.platforms = name, dist, platforms
    return b


@pytest.fixture
def absent(monkeypatch):
    """``absent(*modules)``: find_spec finds none of them (the others as usual)."""
    def hide(*names):
        real = importlib.util.find_spec

        def find_spec(name, *args, **kwargs):
            return None if name in names else real(name, *args, **kwargs)
        monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    return hide


def test_tpu_without_libtpu_names_libtpu_and_its_extra(absent):
    tpu = _shipped("tpu", "pallas-tpu", ("tpu",), "tpu")
    absent("libtpu")
    assert diagnostics.availability(tpu, "cpu") == (
        "yes, interpret-only; compile-only (tpu): missing libtpu "
        f"({install_hints.extra_command('pallas-tpu', 'libtpu')}); to run natively: a tpu device")


def test_tpu_with_libtpu_is_compile_only(monkeypatch):
    tpu = _shipped("tpu", "pallas-tpu", ("tpu",), "tpu")
    needs = [dataclasses.replace(n, present=lambda: True) for n in backend_needs.NEEDS["tpu"]]
    monkeypatch.setitem(backend_needs.NEEDS, "tpu", tuple(needs))
    assert diagnostics.availability(tpu, "cpu") == \
        "yes, interpret-only; compile-only (tpu); to run natively: a tpu device"


def test_gpu_backends_name_the_cuda_plugin(absent):
    absent("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_plugins.xla_cuda12")
    mgpu = _shipped("mgpu", "pallas-mgpu", ("cuda",), "cuda")
    row = diagnostics.availability(mgpu, "cpu")
    assert "compile-only (cuda): missing the CUDA PJRT plugin jax-cuda12-plugin " \
           f"({install_hints.extra_command('pallas-mgpu', 'cuda')})" in row, row
    # Triton's compile target falls back to this machine without the XLA:GPU compiler
    triton = _shipped("triton", "pallas-triton", ("cuda", "rocm"), "cpu")
    row = diagnostics.availability(triton, "cpu")
    assert "compile-only (cuda) unavailable: missing the XLA:GPU compiler jax-cuda12-plugin " \
           f"({install_hints.pip_install()} jax-cuda12-plugin==" in row, row
    assert row.endswith("to run natively: a cuda or rocm device"), row


def test_a_third_party_backend_of_a_shipped_name_gets_no_hint(absent):
    absent("libtpu")
    fork = _shipped("tpu", "someone-elses-tpu", ("tpu",), "tpu")
    assert "libtpu" not in diagnostics.availability(fork, "cpu")


def test_native_platform_needs_nothing_more(absent):
    absent("libtpu")
    tpu = _shipped("tpu", "pallas-tpu", ("tpu",), "tpu")
    assert diagnostics.availability(tpu, "tpu") == "yes, natively (tpu)"
