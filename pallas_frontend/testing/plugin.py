"""pytest plugin of the conformance suite, loaded in every pytest run (pytest11).

It is a no-op unless a backend is named: ``--pallas-backend NAME`` or env
``PALLAS_FRONTEND_TEST_BACKEND``. Then it:

- skips tests whose ``@pytest.mark.requires(*tags)`` the backend lacks,
- skips tests matched by the backend's ``conformance_unsupported`` manifest,
- marks tests matched by its ``conformance_xfail`` manifest as strict xfail
  (an unexpected pass fails the run), and warns about manifest entries that
  match no test;
- fails the tests that must run or compile a kernel when the backend cannot
  here (``is_available()`` false, no platform or interpret mode, compile
  target unreachable), unless ``--pallas-allow-unavailable`` makes them skips;
- provides the fixtures ``pallas_backend``, ``call_options``, ``call_kernel``,
  ``compile_kernel`` (compile-only, for the backend's ``compile_platform()``),
  ``platform`` and ``rng``.

Run: ``pytest --pyargs pallas_frontend.testing --pallas-backend=NAME``.
Importing this module must stay cheap: pallas_frontend and JAX are imported
only when a backend is named.
"""

from __future__ import annotations

import fnmatch
import os
import warnings

import pytest

ENV_BACKEND = "PALLAS_FRONTEND_TEST_BACKEND"
SUITE_PACKAGE = "pallas_frontend.testing"
LAYERS = {
    "contract": "backend metadata and hooks (no kernel runs)",
    "lowering": "kernels lower and compile for Backend.compile_platform(), never run",
    "execution": "kernels run and match NumPy float64",
    "interpret_parity": "kernels match the built-in reference interpreter",
    "negative": "errors name the backend, the primitive and the fix",
}


def pytest_addoption(parser):
    """Adds ``--pallas-backend NAME`` and ``--pallas-allow-unavailable``."""
    group = parser.getgroup("pallas_frontend", "pallas_frontend conformance suite")
    group.addoption("--pallas-backend", dest="pallas_backend", default=None, metavar="NAME",
                    help=f"run the conformance suite ({SUITE_PACKAGE}) against backend NAME "
                         f"(default: env {ENV_BACKEND})")
    group.addoption("--pallas-allow-unavailable", dest="pallas_allow_unavailable",
                    action="store_true", default=False,
                    help="skip (instead of fail) the tests that need to run or compile a "
                         "kernel when the backend cannot do so on this machine")


def backend_name(config) -> str | None:
    """The backend under test: ``--pallas-backend``, else
    ``$PALLAS_FRONTEND_TEST_BACKEND``, else None."""
    return config.getoption("pallas_backend", None) or os.environ.get(ENV_BACKEND) or None


def pytest_configure(config):
    """Registers the layer markers and ``requires(*tags)``."""
    for layer, what in LAYERS.items():
        config.addinivalue_line("markers", f"{layer}: conformance layer: {what}")
    config.addinivalue_line("markers", "requires(*tags): backend capability tags the test needs")
    from pallas_frontend.testing import live_counts   # the test command's live counts
    live_counts.register(config)


def _in_suite(item) -> bool:
    module = getattr(item, "module", None)
    return module is not None and module.__name__.startswith(SUITE_PACKAGE + ".")


def _load_backend(config, name: str):
    from pallas_frontend import registry
    from pallas_frontend.backend_api import BackendUnavailableError
    try:
        return registry.get_backend(name)
    except BackendUnavailableError as e:
        source = ("--pallas-backend" if config.getoption("pallas_backend", None)
                  else ENV_BACKEND)
        raise pytest.UsageError(f"{source}={name}: {e}") from e


def _matches(item, pattern: str) -> bool:
    # The exact name first: fnmatch reads "[case]" of a parametrized name as a set.
    return (item.name == pattern or fnmatch.fnmatchcase(item.name, pattern)
            or fnmatch.fnmatchcase(item.nodeid, "*" + pattern))


def pytest_collection_modifyitems(session, config, items):
    """Marks the suite's tests: skipped without a backend, or when the backend
    lacks a capability tag they need or lists them in ``conformance_unsupported``;
    strict xfail when listed in ``conformance_xfail``."""
    suite = [it for it in items if _in_suite(it)]
    if not suite:
        return
    name = backend_name(config)
    if name is None:
        skip = pytest.mark.skip(reason=f"conformance suite: no backend named "
                                       f"(pass --pallas-backend NAME or set {ENV_BACKEND})")
        for it in suite:
            it.add_marker(skip)
        return
    backend = _load_backend(config, name)
    used: set[str] = set()
    for it in suite:
        reason = _skip_reason(it, backend, used)
        if reason is not None:
            it.add_marker(pytest.mark.skip(reason=reason))
            continue
        for pattern, why in backend.conformance_xfail.items():
            if _matches(it, pattern):
                used.add(pattern)
                it.add_marker(pytest.mark.xfail(reason=f"{name} xfail manifest: {why}",
                                                strict=True))
                break
    for pattern in {**backend.conformance_unsupported, **backend.conformance_xfail}:
        if pattern not in used:
            warnings.warn(pytest.PytestWarning(
                f"backend {name!r} manifest entry {pattern!r} matches no conformance test"))


def _skip_reason(item, backend, used: set[str]) -> str | None:
    for mark in item.iter_markers("requires"):
        missing = [t for t in mark.args if t not in backend.capabilities]
        if missing:
            return (f"backend {backend.name!r} lacks capability "
                    f"{', '.join(repr(t) for t in missing)}")
    for pattern, why in backend.conformance_unsupported.items():
        if _matches(item, pattern):
            used.add(pattern)
            return f"unsupported by {backend.name!r} (manifest): {why}"
    return None


def pytest_report_header(config):
    """Names the backend under test in pytest's header."""
    name = backend_name(config)
    if name is None:
        return None
    return f"pallas_frontend conformance backend: {name}"


@pytest.fixture(scope="session")
def pallas_backend(request):
    """The ``Backend`` under test (the suite skips without one)."""
    name = backend_name(request.config)
    if name is None:
        pytest.skip(f"no --pallas-backend given (or {ENV_BACKEND})")
    return _load_backend(request.config, name)


@pytest.fixture(scope="session")
def platform():
    """JAX's default platform in this process (``cpu``, ``cuda``, ...)."""
    import jax
    return jax.default_backend()


def unavailable(config, message: str):
    """A backend that cannot run here fails the run, unless the user said
    ``--pallas-allow-unavailable`` (then the test is skipped)."""
    if config.getoption("pallas_allow_unavailable", False):
        pytest.skip(message)
    pytest.fail(f"{message}. The conformance run cannot check it on this machine; pass "
                "--pallas-allow-unavailable to skip these tests instead", pytrace=False)


@pytest.fixture(scope="session")
def call_options(request, pallas_backend, platform):
    """The pallas_call keywords that route a kernel to the backend under test."""
    ok, why = pallas_backend.is_available()
    if not ok:
        unavailable(request.config, f"backend {pallas_backend.name!r} is unavailable here: {why}")
    if platform not in pallas_backend.platforms and pallas_backend.interpret_params_type is None:
        unavailable(request.config, f"backend {pallas_backend.name!r} does not serve platform "
                                    f"{platform!r} and has no interpret mode")
    return pallas_backend.call_options(platform)


@pytest.fixture
def call_kernel(call_options):
    """``call_kernel(builder, *args)`` -> the kernel built for the backend under test."""
    def build(builder, *args, **kwargs):
        return builder(*args, **kwargs, **call_options)
    return build


@pytest.fixture(scope="session")
def compile_options(pallas_backend):
    """(platform, pallas_call keywords) for compile-only checks: the backend's
    ``compile_platform()``, which need not be this machine's."""
    platform = pallas_backend.compile_platform()
    return platform, pallas_backend.call_options(platform)


@pytest.fixture
def compile_kernel(request, pallas_backend, compile_options):
    """``compile_kernel(builder, *args, operands=[ShapeDtypeStruct, ...])`` ->
    the kernel built for ``compile_platform()`` and compiled by the backend's
    ``compile_only`` (never run)."""
    from pallas_frontend.backend_api import BackendUnavailableError
    platform, options = compile_options

    def build(builder, *args, operands):
        fn = builder(*args, **options)
        try:
            return pallas_backend.compile_only(fn, *operands)
        except BackendUnavailableError as e:
            unavailable(request.config, f"backend {pallas_backend.name!r} cannot compile for "
                                        f"{platform!r} here: {e}")
    return build


@pytest.fixture
def rng(request):
    """Fresh random data each run; the seed is in the test report on failure."""
    import numpy as np
    seed = int(np.random.SeedSequence().entropy % (2 ** 32))
    request.node.user_properties.append(("seed", seed))
    print(f"rng seed {seed}")
    return np.random.default_rng(seed)
