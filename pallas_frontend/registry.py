"""Which backends exist, and which one runs a given kernel.

Backends come from ``discovery`` (entry points, read on first need; a plugin
is imported only when selection may choose it) and from ``register_backend``
(in-process). Selection, first match wins:
1. ``interpret=True`` -> the built-in interpreter (another backend's compiler
   params are checked and ignored, as in JAX; ``backend=`` naming another
   backend is an error); a backend's interpret-params object -> that backend;
2. ``compiler_params`` of a backend's type -> that backend;
3. an explicit ``backend=`` name;
4. the platform's default: the configured one (``set_default_backend`` or
   ``PALLAS_FRONTEND_DEFAULT_BACKEND``), else on CPU the interpreter, else the
   available backend of highest priority that serves the platform.
"""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, Any

from pallas_frontend import env_config, install_hints, params_fields
from pallas_frontend.backend_api import Backend, BackendUnavailableError

if TYPE_CHECKING:
    from pallas_frontend import discovery

INTERPRETER = "interpret"
ENV_DEFAULT = env_config.ENV_DEFAULT_BACKEND   # "name" or "platform=name,platform=name"

_lock = threading.RLock()
_found: discovery.Discovered | None = None
_registered: dict[str, Backend] = {}      # register_backend: in-process, wins over discovery
_defaults: dict[str, str] = {}             # set_default_backend: platform -> name


def _discovered() -> discovery.Discovered:
    global _found
    with _lock:
        if _found is None:
            from pallas_frontend import discovery   # lazily: it reads installed metadata
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
    from pallas_frontend import discovery
    why = discovery.validate_api_version(backend)
    if why is not None:
        raise ValueError(f"register_backend({type(backend).__name__}): {why}")
    with _lock:
        _registered[backend.name] = backend
    return backend


def unregister_backend(name: str) -> None:
    with _lock:
        _registered.pop(name, None)


def backends() -> dict[str, Backend]:
    """Every usable backend by name (imports every plugin the configuration allows)."""
    with _lock:
        found = _discovered()
        found.load_all()
        return {**found.backends, **_registered}


def _loaded() -> dict[str, Backend]:
    """The backends imported so far (no import)."""
    return {**_discovered().backends, **_registered}


def load_failures() -> dict[str, discovery.LoadFailure]:
    """Every plugin that failed to load (imports every allowed plugin first)."""
    with _lock:
        found = _discovered()
        found.load_all()
        return dict(found.failures)


def filtered() -> dict[str, discovery.Filtered]:
    """Installed plugins that the configuration kept from loading (not imported)."""
    return dict(_discovered().filtered)


def origin(name: str) -> discovery.Origin | None:
    return _discovered().origins.get(name)


SHIPPED = install_hints.SHIPPED    # the distributions this project ships


def install_hint(name: str, params: Any = None) -> str:
    """How to get backend ``name``: a command that installs it from where this
    pallas-frontend came from (a clone, a wheelhouse, an index), when known."""
    if name in SHIPPED:
        return install_hints.backend_install_command(name)
    if params is not None:
        top = type(params).__module__.split(".")[0]
        try:
            import importlib.metadata as md
            dists = md.packages_distributions().get(top, [])
        except Exception:   # metadata of other packages is not ours to trust
            dists = []
        if dists:
            return (f"{type(params).__module__}.{type(params).__qualname__} comes from "
                    f"distribution {dists[0]}, which registers no backend {name!r} in entry "
                    "point group pallas_frontend.backends; reinstall or upgrade it")
    return (f"install the distribution that provides backend {name!r} (it registers entry "
            "point group pallas_frontend.backends)")


def get_backend(name: str) -> Backend:
    """The backend ``name``, importing only that plugin."""
    with _lock:
        if name in _registered:
            return _registered[name]
        found = _discovered()
        b = found.load(name)
        if b is not None:
            return b
        failure = found.failure_for(name)
        if failure is not None:
            raise failure.error()
        skipped = next((f for f in found.filtered.values() if f.name == name), None)
        if skipped is not None:
            raise skipped.error()
        known = sorted({*found.backends, *found.pending, *_registered})
    raise BackendUnavailableError(
        f"No pallas_frontend backend named {name!r} is installed (installed: "
        f"{', '.join(known)}). To get it: {install_hint(name)}")


def set_default_backend(platform: str, name: str | None) -> None:
    """Makes ``name`` the default backend for ``platform`` (None: back to the rule)."""
    with _lock:
        if name is None:
            _defaults.pop(platform, None)
        else:
            _defaults[platform] = name


def _known_names() -> list[str]:
    found = _discovered()
    return sorted({*found.backends, *found.pending, *_registered})


def configured_default(platform: str) -> str | None:
    if platform in _defaults:
        return _defaults[platform]
    return env_config.default_backend_for(platform, _known_names)


def check_interpret_arguments(interpret, compiler_params, backend: str | None) -> None:
    """``interpret=True`` runs the built-in interpreter. Another backend's
    ``compiler_params`` are hardware hints there (as in JAX, whose GPU kernels
    pass both): their type and fields are checked, then they are not used.
    ``backend=`` naming another backend contradicts it and is refused."""
    if interpret is not True:
        return
    if backend is not None and backend != INTERPRETER:
        raise ValueError(
            f"interpret=True runs the built-in interpreter, but backend={backend!r} names "
            f"another backend. Pass one of the two (to interpret with {backend!r}, pass its "
            "interpret params as interpret=..., if it has any).")
    owner = _declared_owner(compiler_params)
    if owner is None or owner == INTERPRETER:
        return
    b = _backend_of_params(compiler_params, "compiler_params_type")
    if b is None and owner in _loaded():
        _raise_if_other_type(owner, compiler_params, "compiler_params_type")
    params_fields.check_params_fields(compiler_params)


def select_backend(*, platform: str, interpret, compiler_params, backend: str | None) -> Backend:
    """The backend that lowers a kernel on ``platform``; imports only what it may choose."""
    check_interpret_arguments(interpret, compiler_params, backend)
    if interpret is True:
        return get_backend(INTERPRETER)
    if interpret not in (False, None):
        b = _backend_of_params(interpret, "interpret_params_type")
        if b is not None:
            return b
        owner = _owner_of(interpret)
        _raise_if_skipped(owner, interpret)
        _raise_if_other_type(owner, interpret, "interpret_params_type")
        raise BackendUnavailableError(
            f"interpret={interpret!r} is an interpret-params object of backend {owner!r}, which "
            f"is not installed (platform {platform!r}). To get it: "
            f"{install_hint(owner, interpret)}; or pass interpret=True for the built-in "
            "interpreter.")
    if compiler_params is not None:
        b = _backend_of_params(compiler_params, "compiler_params_type")
        if b is not None:
            if backend is not None and backend != b.name:
                raise BackendUnavailableError(
                    f"backend={backend!r} contradicts compiler_params of type "
                    f"{type(compiler_params).__qualname__}, which select backend {b.name!r}. "
                    "Pass one or the other.")
            return _serving(b, platform)
        owner = _owner_of(compiler_params)
        _raise_if_skipped(owner, compiler_params)
        _raise_if_other_type(owner, compiler_params, "compiler_params_type")
        raise BackendUnavailableError(
            f"compiler_params of type {type(compiler_params).__qualname__} belong to backend "
            f"{owner!r}, which is not installed (platform {platform!r}). To get it: "
            f"{install_hint(owner, compiler_params)}")
    if backend is not None:
        return _serving(get_backend(backend), platform)
    configured = configured_default(platform)
    if configured is not None:
        try:
            return _serving(get_backend(configured), platform)
        except BackendUnavailableError as e:   # say where the choice was made
            raise env_config.configured_default_error(
                platform, configured, e, platform in _defaults, _known_names) from e
    if platform == "cpu":
        return get_backend(INTERPRETER)
    return _platform_default(platform)


def _platform_default(platform: str) -> Backend:
    """The available backend of highest priority serving ``platform``. Candidates
    are imported one at a time, highest declared priority first; a plugin that
    declares nothing in its metadata must be imported to be ranked."""
    with _lock:
        found = _discovered()
        for name, cand in list(found.pending.items()):
            if cand.declared is None:
                found.load(name)
        ruled_out: set[str] = set()
        while True:
            pool = []
            for name, b in _loaded().items():
                if name not in ruled_out and platform in b.platforms:
                    pool.append((b.priority, name != INTERPRETER, name))
            for name, cand in found.pending.items():
                if name not in ruled_out and platform in cand.declared.platforms:
                    pool.append((cand.declared.priority, name != INTERPRETER, name))
            if not pool:
                break
            _, _, name = max(pool)
            b = _registered.get(name) or found.load(name)
            if b is None or platform not in b.platforms:
                ruled_out.add(name)
                continue
            try:
                ok = bool(b.is_available()[0])
            except Exception:   # a plugin's probe: treat a crash as "not here"
                ok = False
            if ok:
                return b
            ruled_out.add(name)
        known = sorted({*found.backends, *found.pending, *_registered})
    raise BackendUnavailableError(
        f"No installed pallas_frontend backend serves platform {platform!r}. Installed: "
        f"{', '.join(known)}. Pass interpret=True, or install a backend for it, "
        f"e.g. {install_hint('triton')}")


def _declared_owner(params) -> str | None:
    """The backend a params object names in its ``BACKEND`` class attribute, if any."""
    if params is None:
        return None
    owner = getattr(type(params), "BACKEND", None)
    return owner if isinstance(owner, str) and owner else None


def _owner_of(params) -> str:
    owner = getattr(params, "BACKEND", None) or getattr(type(params), "BACKEND", None)
    if isinstance(owner, str) and owner:
        return owner
    return type(params).__module__.split(".")[0].removeprefix("pallas_")


def _raise_if_skipped(owner: str, params) -> None:
    """A plugin that owns ``params`` but failed to load or was filtered: say so."""
    found = _discovered()
    top = type(params).__module__.split(".")[0]
    failure = found.failure_for(owner)
    if failure is None:
        failure = next((f for f in found.failures.values()
                        if f.origin.value.split(".")[0].split(":")[0] == top), None)
    if failure is not None:
        raise failure.error()
    skipped = next((f for f in found.filtered.values()
                    if f.name == owner or f.origin.value.split(".")[0].split(":")[0] == top), None)
    if skipped is not None:
        raise skipped.error()


def _raise_if_other_type(owner: str, params, type_attr: str) -> None:
    """The owner named by ``params`` is installed but takes another params type."""
    b = _loaded().get(owner)
    if b is None:
        return
    want = getattr(b, type_attr)
    takes = f"{want.__module__}.{want.__qualname__}" if want is not None else "none"
    raise BackendUnavailableError(
        f"{type(params).__module__}.{type(params).__qualname__} names backend {owner!r} "
        f"(its BACKEND), but backend {owner!r} ({b.distribution} {b.version}) takes "
        f"{type_attr.removesuffix('_type').replace('_', ' ')} of type {takes}. Pass those.")


def backend_for_params(*, interpret, compiler_params) -> Backend | None:
    """The backend whose interpret params or compiler params these are, if any
    (platform-independent; used to ask a backend for its launch effects).
    ``interpret=True`` runs the built-in interpreter: no backend's params apply."""
    if interpret not in (None, True, False):
        return _backend_of_params(interpret, "interpret_params_type")
    if interpret is True or compiler_params is None:
        return None
    return _backend_of_params(compiler_params, "compiler_params_type")


def effective_interpret(interpret, compiler_params):
    """``interpret`` as the call will use it: without one, the interpret params of a
    backend whose own interpret mode is on (``forced_interpret_params``): the owner
    of ``compiler_params``, or without those the one loaded backend that has it on
    (JAX's forced TPU interpret mode reaches every kernel)."""
    if interpret not in (None, False):
        return interpret
    if compiler_params is None:
        with _lock:
            # plugins the user imported count (pallas_tpu.set_tpu_interpret_mode before
            # any kernel named the backend): loading them costs no import
            found = _discovered()
            for name in [n for n, c in found.pending.items() if c.top_module in sys.modules]:
                found.load(name)
            forced = [p for p in (b.forced_interpret_params() for b in _loaded().values())
                      if p is not None]
        return forced[0] if len(forced) == 1 else interpret
    b = _backend_of_params(compiler_params, "compiler_params_type")
    forced = b.forced_interpret_params() if b is not None else None
    return interpret if forced is None else forced


def params_of_mesh(mesh: Any) -> Any:
    """The compiler params a mesh names (``mesh.compiler_params``), if a backend
    owns them; else, for a mesh that only speaks JAX's protocol (``core_type``,
    ``default_memory_space``, ``dimension_semantics``; e.g. a test's mock), the
    default params of the backend those values belong to, so that the kernel
    goes where JAX's would and fails there as JAX's does."""
    params = getattr(mesh, "compiler_params", None)
    if params is None or _backend_of_params(params, "compiler_params_type") is not None:
        return params
    described = [getattr(mesh, "core_type", None), getattr(mesh, "default_memory_space", None),
                 *(getattr(mesh, "dimension_semantics", None) or ())]
    for value in described:
        owner = _owner_of(value) if value is not None else None
        if owner in _known_names():
            params_type = getattr(get_backend(owner), "compiler_params_type", None)
            if isinstance(params_type, type):
                return params_type()
    return params


def _backend_of_params(params, type_attr: str) -> Backend | None:
    """The backend whose ``type_attr`` ``params`` is an instance of. Imports only
    plugins that may own it: named by its ``BACKEND``, or from its package."""
    with _lock:
        b = _backend_of(_loaded(), params, type_attr)
        if b is not None:
            return b
        found = _discovered()
        owner, top = _owner_of(params), type(params).__module__.split(".")[0]
        for name, cand in list(found.pending.items()):
            if name == owner or cand.top_module == top:
                found.load(name)
        return _backend_of(_loaded(), params, type_attr)


def _backend_of(found: dict[str, Backend], params, type_attr: str) -> Backend | None:
    """The backend whose ``type_attr`` (a params type) ``params`` is an instance of."""
    for b in found.values():
        params_type = getattr(b, type_attr)
        if params_type is not None and isinstance(params, params_type):
            return b
    return None


class PlatformNotServedError(BackendUnavailableError, ValueError):
    """The chosen backend compiles for other platforms (a ValueError too, as JAX's is)."""


def _serving(b: Backend, platform: str) -> Backend:
    if platform not in b.platforms:
        interpreter = getattr(b, "interpret_params_type", None)
        # JAX's words (and its ValueError) where its TPU kernels meet a CPU
        lead = (f"Only interpret mode is supported on {platform.upper()} for this kernel: "
                if isinstance(interpreter, type) else "")
        raise PlatformNotServedError(
            f"{lead}Backend {b.name!r} does not serve platform {platform!r} (it serves "
            f"{', '.join(b.platforms)}). Run on one of those, pass its interpret params "
            f"if it has any, or pass interpret=True for the reference interpreter.")
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
