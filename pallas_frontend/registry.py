"""Which backends exist, and which one runs a given kernel.

Backends arrive through the pluggy hook ``pallas_frontend_backend``: the
built-in interpreter is registered through it like any plugin. Selection:
1. ``interpret=True`` -> the interpreter; a backend's interpret params object
   -> that backend;
2. ``compiler_params`` of a backend's type -> that backend;
3. an explicit ``backend=`` name;
4. the platform's default: the available backend of highest priority that
   serves the platform (on CPU, the interpreter).
"""

from __future__ import annotations

import threading

import pluggy

from pallas_frontend import backend_api
from pallas_frontend.backend_api import Backend, BackendUnavailableError

_lock = threading.RLock()
_backends: dict[str, Backend] = {}
_loaded = False


def _plugin_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(backend_api.PROJECT_NAME)
    pm.add_hookspecs(backend_api.BackendHookSpecs)
    return pm


def _ensure_loaded() -> None:
    global _loaded
    with _lock:
        if _loaded:
            return
        _loaded = True
        from pallas_frontend.interpreter import backend as interpreter_backend
        pm = _plugin_manager()
        pm.register(interpreter_backend, name="interpret")
        for result in pm.hook.pallas_frontend_backend():
            for b in (result if isinstance(result, (list, tuple)) else [result]):
                _backends.setdefault(b.name, b)


def register_backend(backend: Backend) -> Backend:
    """Adds a backend in-process (for authors, before they package it)."""
    if not isinstance(backend, Backend):
        raise TypeError(f"register_backend takes a pallas_frontend.backend_api.Backend, "
                        f"got {type(backend).__name__}")
    _ensure_loaded()
    with _lock:
        _backends[backend.name] = backend
    return backend


def backends() -> dict[str, Backend]:
    _ensure_loaded()
    return dict(_backends)


def get_backend(name: str) -> Backend:
    _ensure_loaded()
    try:
        return _backends[name]
    except KeyError:
        raise BackendUnavailableError(
            f"No pallas_frontend backend named {name!r} is installed (installed: "
            f"{sorted(_backends)}). Install it, e.g. pip install \"pallas-frontend[{name}]\".") from None


def select_backend(*, platform: str, interpret, compiler_params, backend: str | None) -> Backend:
    _ensure_loaded()
    if interpret is True:
        return get_backend("interpret")
    if interpret not in (False, None):
        for b in _backends.values():
            if b.interpret_params_type is not None and isinstance(interpret, b.interpret_params_type):
                return b
        raise BackendUnavailableError(
            f"interpret={interpret!r} is not an interpret-params object of any installed "
            "backend. Pass interpret=True for the built-in interpreter.")
    if compiler_params is not None:
        for b in _backends.values():
            if b.compiler_params_type is not None and isinstance(compiler_params, b.compiler_params_type):
                return _serving(b, platform)
        owner = getattr(type(compiler_params), "BACKEND", None) or type(compiler_params).__module__
        raise BackendUnavailableError(
            f"compiler_params of type {type(compiler_params).__qualname__} belong to backend "
            f"{owner!r}, which is not installed. Install it with: pip install "
            f"\"pallas-frontend[{owner}]\".")
    if backend is not None:
        return _serving(get_backend(backend), platform)
    candidates = [b for b in _backends.values() if platform in b.platforms and b.is_available()[0]]
    if not candidates:
        raise BackendUnavailableError(
            f"No installed pallas_frontend backend serves platform {platform!r}. Installed: "
            f"{sorted(_backends)}.")
    return max(candidates, key=lambda b: b.priority)


def backend_for_params(*, interpret, compiler_params) -> Backend | None:
    """The backend whose interpret params or compiler params these are, if any
    (platform-independent; used to ask a backend for its launch effects)."""
    _ensure_loaded()
    for b in _backends.values():
        if interpret not in (None, True, False):
            if b.interpret_params_type is not None and isinstance(interpret, b.interpret_params_type):
                return b
        elif b.compiler_params_type is not None and isinstance(compiler_params, b.compiler_params_type):
            return b
    return None


def _serving(b: Backend, platform: str) -> Backend:
    if platform not in b.platforms:
        raise BackendUnavailableError(
            f"Backend {b.name!r} does not serve platform {platform!r} (it serves "
            f"{', '.join(b.platforms)}). Run on one of those, or pass interpret=True to run the "
            "kernel in the reference interpreter.")
    return b


def which_backend(*, platform: str | None = None, interpret=False, compiler_params=None,
                  backend: str | None = None) -> Backend:
    """The backend a pallas_call with these arguments would use on ``platform``
    (default: JAX's default backend)."""
    import jax
    return select_backend(platform=platform or jax.default_backend(), interpret=interpret,
                          compiler_params=compiler_params, backend=backend)
