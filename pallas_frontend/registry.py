"""Which backends exist, and which one runs a given kernel.

Backends come from ``discovery`` (entry points, read on first need) and from
``register_backend`` (in-process). Selection, first match wins:
1. ``interpret=True`` -> the built-in interpreter; a backend's interpret-params
   object -> that backend;
2. ``compiler_params`` of a backend's type -> that backend;
3. an explicit ``backend=`` name;
4. the platform's default: the configured one (``set_default_backend`` or
   ``PALLAS_FRONTEND_DEFAULT_BACKEND``), else on CPU the interpreter, else the
   available backend of highest priority that serves the platform.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from pallas_frontend.backend_api import Backend, BackendUnavailableError

if TYPE_CHECKING:
    from pallas_frontend import discovery

INTERPRETER = "interpret"
ENV_DEFAULT = "PALLAS_FRONTEND_DEFAULT_BACKEND"   # "name" or "platform=name,platform=name"

_lock = threading.RLock()
_found: discovery.Discovered | None = None
_registered: dict[str, Backend] = {}      # register_backend: in-process, wins over discovery
_defaults: dict[str, str] = {}             # set_default_backend: platform -> name


def _discovered() -> discovery.Discovered:
    global _found
    with _lock:
        if _found is None:
            from pallas_frontend import discovery   # lazily: it imports pluggy and metadata
            _found = discovery.discover()
        return _found


def reload() -> None:
    """Forgets what was discovered (tests, or after installing a plugin in-process)."""
    global _found
    with _lock:
        _found = None


def register_backend(backend: Backend) -> Backend:
    """Adds a backend in-process (for authors, before they package it)."""
    if not isinstance(backend, Backend):
        raise TypeError(f"register_backend takes a pallas_frontend.backend_api.Backend, "
                        f"got {type(backend).__name__}")
    with _lock:
        _registered[backend.name] = backend
    return backend


def unregister_backend(name: str) -> None:
    with _lock:
        _registered.pop(name, None)


def backends() -> dict[str, Backend]:
    """Every usable backend by name."""
    return {**_discovered().backends, **_registered}


def load_failures() -> dict[str, discovery.LoadFailure]:
    return dict(_discovered().failures)


def origin(name: str) -> discovery.Origin | None:
    return _discovered().origins.get(name)


def pip_hint(name: str) -> str:
    return f'pip install "pallas-frontend[{name}]"'


def get_backend(name: str) -> Backend:
    found = backends()
    if name in found:
        return found[name]
    failure = _discovered().failures.get(name)
    if failure is not None:
        raise failure.error()
    raise BackendUnavailableError(
        f"No pallas_frontend backend named {name!r} is installed (installed: "
        f"{', '.join(sorted(found))}). Install it with: {pip_hint(name)}")


def set_default_backend(platform: str, name: str | None) -> None:
    """Makes ``name`` the default backend for ``platform`` (None: back to the rule)."""
    with _lock:
        if name is None:
            _defaults.pop(platform, None)
        else:
            _defaults[platform] = name


def configured_default(platform: str) -> str | None:
    if platform in _defaults:
        return _defaults[platform]
    raw = os.environ.get(ENV_DEFAULT, "").strip()
    if not raw:
        return None
    for item in raw.split(","):
        item = item.strip()
        if "=" in item:
            p, n = (s.strip() for s in item.split("=", 1))
            if p == platform:
                return n
        elif item:
            return item
    return None


def select_backend(*, platform: str, interpret, compiler_params, backend: str | None) -> Backend:
    found = backends()
    if interpret is True:
        return get_backend(INTERPRETER)
    if interpret not in (False, None):
        b = _backend_of(found, interpret, "interpret_params_type")
        if b is not None:
            return b
        owner = _owner_of(interpret)
        raise BackendUnavailableError(
            f"interpret={interpret!r} is an interpret-params object of backend {owner!r}, which "
            f"is not installed (platform {platform!r}). Install it with: {pip_hint(owner)}, or "
            "pass interpret=True for the built-in interpreter.")
    if compiler_params is not None:
        b = _backend_of(found, compiler_params, "compiler_params_type")
        if b is not None:
            if backend is not None and backend != b.name:
                raise BackendUnavailableError(
                    f"backend={backend!r} contradicts compiler_params of type "
                    f"{type(compiler_params).__qualname__}, which select backend {b.name!r}. "
                    "Pass one or the other.")
            return _serving(b, platform)
        owner = _owner_of(compiler_params)
        failure = _discovered().failures.get(owner)
        if failure is not None:
            raise failure.error()
        raise BackendUnavailableError(
            f"compiler_params of type {type(compiler_params).__qualname__} belong to backend "
            f"{owner!r}, which is not installed (platform {platform!r}). Install it with: "
            f"{pip_hint(owner)}")
    if backend is not None:
        return _serving(get_backend(backend), platform)
    configured = configured_default(platform)
    if configured is not None:
        return _serving(get_backend(configured), platform)
    if platform == "cpu" and INTERPRETER in found:
        return found[INTERPRETER]
    candidates = [b for b in found.values() if platform in b.platforms and b.is_available()[0]]
    if not candidates:
        raise BackendUnavailableError(
            f"No installed pallas_frontend backend serves platform {platform!r}. Installed: "
            f"{', '.join(sorted(found))}. Pass interpret=True, or install a backend for it, "
            f"e.g. {pip_hint('triton')}")
    return max(candidates, key=lambda b: (b.priority, b.name != INTERPRETER))


# JAX's own Pallas params types live in these jax modules; ours in these plugins.
_JAX_PALLAS_HOMES = (
    ("jax._src.pallas.mosaic_gpu", "jax.experimental.pallas.mosaic_gpu", "pallas_mgpu", "mgpu"),
    ("jax._src.pallas.mosaic", "jax.experimental.pallas.tpu", "pallas_tpu", "tpu"),
    ("jax._src.pallas.triton", "jax.experimental.pallas.triton", "pallas_triton", "triton"),
)


def check_params_objects(interpret, compiler_params) -> None:
    """Refuses, before anything is traced, an ``interpret=`` that is neither a
    bool nor a params object, and JAX's own Pallas params objects (which look
    like ours but belong to ``jax.experimental.pallas``)."""
    if not (interpret is None or isinstance(interpret, bool)
            or hasattr(interpret, "__dataclass_fields__")):
        raise TypeError(
            f"interpret={interpret!r} ({type(interpret).__name__}) is not a mode: pass "
            "interpret=True for the built-in interpreter, interpret=False (the default) to "
            "choose a backend, or a backend's interpret-params object such as "
            "pallas_tpu.InterpretParams().")
    for what, obj in (("interpret", interpret), ("compiler_params", compiler_params)):
        module = type(obj).__module__ or ""
        for jax_module, public, ours, extra in _JAX_PALLAS_HOMES:
            if module.startswith(jax_module):
                name = type(obj).__name__
                raise TypeError(
                    f"{what}={name}(...) is JAX's own {public}.{name}, a jax.experimental.pallas "
                    f"object that pallas_frontend does not read. Use {ours}.{name} instead "
                    f"(the same fields where it supports them; pip install "
                    f"\"pallas-frontend[{extra}]\"){' or interpret=True' if what == 'interpret' else ''}.")
        if module.startswith("jax.") and "pallas" in module:
            raise TypeError(f"{what}={type(obj).__name__}(...) is a jax.experimental.pallas "
                            "object; pallas_frontend takes its own backends' params types "
                            "(e.g. pallas_triton.CompilerParams, pallas_tpu.InterpretParams).")


def _owner_of(params) -> str:
    owner = getattr(params, "BACKEND", None) or getattr(type(params), "BACKEND", None)
    if isinstance(owner, str) and owner:
        return owner
    return type(params).__module__.split(".")[0].removeprefix("pallas_")


def backend_for_params(*, interpret, compiler_params) -> Backend | None:
    """The backend whose interpret params or compiler params these are, if any
    (platform-independent; used to ask a backend for its launch effects)."""
    if interpret not in (None, True, False):
        return _backend_of(backends(), interpret, "interpret_params_type")
    return _backend_of(backends(), compiler_params, "compiler_params_type")


def effective_interpret(interpret, compiler_params):
    """``interpret`` as the call will use it: when the call passes none and its
    compiler params belong to a backend whose own interpret mode is on (its
    ``forced_interpret_params``), that backend's interpret params."""
    if interpret not in (None, False) or compiler_params is None:
        return interpret
    b = _backend_of(backends(), compiler_params, "compiler_params_type")
    forced = b.forced_interpret_params() if b is not None else None
    return interpret if forced is None else forced


def _backend_of(found: dict[str, Backend], params, type_attr: str) -> Backend | None:
    """The backend whose ``type_attr`` (a params type) ``params`` is an instance of."""
    for b in found.values():
        params_type = getattr(b, type_attr)
        if params_type is not None and isinstance(params, params_type):
            return b
    return None


def _serving(b: Backend, platform: str) -> Backend:
    if platform not in b.platforms:
        raise BackendUnavailableError(
            f"Backend {b.name!r} does not serve platform {platform!r} (it serves "
            f"{', '.join(b.platforms)}). Run on one of those, pass its interpret params "
            f"if it has any, or pass interpret=True for the reference interpreter. "
            f"(Backend {b.name!r} is installed by {pip_hint(b.pip_extra or b.name)}.)")
    ok, why = b.is_available()
    if not ok:
        raise BackendUnavailableError(
            f"Backend {b.name!r} cannot run on this machine (platform {platform!r}): {why}")
    return b


def which_backend(*, platform: str | None = None, interpret=False, compiler_params=None,
                  backend: str | None = None) -> Backend:
    """The backend a pallas_call with these arguments would use on ``platform``
    (default: JAX's default backend)."""
    import jax
    return select_backend(platform=platform or jax.default_backend(), interpret=interpret,
                          compiler_params=compiler_params, backend=backend)
