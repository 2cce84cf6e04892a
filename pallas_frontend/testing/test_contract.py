"""Contract layer: the backend's metadata and hooks, no kernel runs."""

import dataclasses
import json

import pytest

from pallas_frontend import backend_api

pytestmark = pytest.mark.contract


def test_is_a_backend_with_a_valid_name(pallas_backend):
    assert isinstance(pallas_backend, backend_api.Backend)
    assert pallas_backend.name.isidentifier()


def test_api_version_is_compatible(pallas_backend):
    major, minor = pallas_backend.api_version
    assert major == backend_api.API_VERSION[0]
    assert minor <= backend_api.API_VERSION[1]


def test_platforms_and_capabilities_are_well_formed(pallas_backend):
    assert isinstance(pallas_backend.platforms, tuple) and pallas_backend.platforms
    assert all(isinstance(p, str) for p in pallas_backend.platforms)
    assert all(isinstance(t, str) for t in pallas_backend.capabilities)


def test_params_types_are_dataclasses_that_round_trip(pallas_backend):
    for params_type in (pallas_backend.compiler_params_type, pallas_backend.interpret_params_type):
        if params_type is None:
            continue
        assert dataclasses.is_dataclass(params_type), params_type
        try:
            params = params_type()
        except TypeError:
            pytest.skip(f"{params_type.__name__} has required fields")
        assert dataclasses.replace(params) == params


def test_manifests_map_patterns_to_reasons(pallas_backend):
    for manifest in (pallas_backend.conformance_unsupported, pallas_backend.conformance_xfail):
        assert all(isinstance(k, str) and isinstance(v, str) and v for k, v in manifest.items())


def test_describe_is_json(pallas_backend):
    described = json.loads(json.dumps(pallas_backend.describe()))
    assert described["name"] == pallas_backend.name


def test_call_options_select_this_backend(pallas_backend, call_options, platform):
    from pallas_frontend import registry
    chosen = registry.select_backend(
        platform=platform, interpret=call_options.get("interpret", False),
        compiler_params=call_options.get("compiler_params"), backend=call_options.get("backend"))
    assert chosen is pallas_backend


def test_declared_metadata_covers_the_backend(pallas_backend):
    """What the distribution declares unimported (pallas_frontend.backend_info)
    must include the backend's platforms and bound its priority from above,
    or selection would skip it without importing it."""
    import importlib.metadata as md
    import warnings

    from pallas_frontend import discovery, registry
    from pallas_frontend.backend_metadata import INFO_GROUP, parse_declarations
    name, origin = pallas_backend.name, registry.origin(pallas_backend.name)
    if name == discovery.BUILTIN_ENTRY_POINT:
        declared = discovery.BUILTIN_DECLARED
    else:
        if origin is None:
            pytest.skip(f"backend {name!r} is registered in-process: it has no metadata")
        dist = md.distribution(origin.distribution)
        declared = parse_declarations(
            ep.name for ep in dist.entry_points if ep.group == INFO_GROUP).get(name)
        if declared is None:
            warnings.warn(pytest.PytestWarning(
                f"{origin.distribution} declares no platforms/priority for {name!r} in entry "
                f"point group {INFO_GROUP}: it is imported whenever a non-CPU default is "
                "chosen (see docs/backend-authors.md)"))
            return
    missing = set(pallas_backend.platforms) - set(declared.platforms)
    assert not missing, f"declared platforms {declared.platforms} lack {sorted(missing)}"
    assert declared.priority >= pallas_backend.priority, (
        f"declared priority {declared.priority} < the backend's {pallas_backend.priority}")


def test_seconds_per_call_times_a_pure_function(pallas_backend):
    # API 1.9: pl.autotune's timing hook (inherited, or the backend's own clock)
    import math

    import numpy as np
    x = np.random.default_rng(7).standard_normal((64, 64)).astype(np.float32)
    seconds = pallas_backend.seconds_per_call(lambda a: (a @ a, {"sum": a.sum()}), (x,))
    assert isinstance(seconds, float) and math.isfinite(seconds) and seconds > 0, seconds
    assert seconds < 1.0, f"{seconds} s for a 64x64 matmul: not a per-call time"
