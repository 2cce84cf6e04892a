"""Finding backends: entry points of group ``pallas_frontend.backends``.

Each entry point is loaded in isolation. Whatever goes wrong with one plugin
(its import fails, its hook raises, it hands over something that is not a
``Backend``, its major api_version differs, or its name is already taken by
another distribution) is recorded as a ``LoadFailure`` with the
distribution's name and version, warned about once, and skipped; the other
backends keep working. Using a skipped backend raises with the stored cause.

Environment:
- ``PALLAS_FRONTEND_BACKENDS=a,b``: load only these entry points (allow-list);
- ``PALLAS_FRONTEND_DISABLE_PLUGIN_AUTOLOAD=1``: load no entry point at all
  (only the built-in interpreter and ``register_backend`` backends remain);
- ``PALLAS_FRONTEND_STRICT=1``: a load failure raises instead (for CI).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata as metadata
import os
import traceback
import warnings

import pluggy

from pallas_frontend import backend_api
from pallas_frontend.backend_api import Backend, BackendUnavailableError
from pallas_frontend.hookspecs import BackendHookSpecs

BUILTIN_ENTRY_POINT = "interpret"
BUILTIN_MODULE = "pallas_frontend.interpreter.backend"
BUILTIN_DISTRIBUTION = "pallas-frontend"

ENV_ALLOW = "PALLAS_FRONTEND_BACKENDS"
ENV_NO_AUTOLOAD = "PALLAS_FRONTEND_DISABLE_PLUGIN_AUTOLOAD"
ENV_STRICT = "PALLAS_FRONTEND_STRICT"


class BackendLoadError(RuntimeError):
    """A plugin failed to load while ``PALLAS_FRONTEND_STRICT=1``."""


class BackendLoadWarning(RuntimeWarning):
    """A plugin failed to load and was skipped."""


@dataclasses.dataclass(frozen=True)
class Origin:
    """Where a backend came from: the entry point and its distribution."""
    entry_point: str
    value: str
    distribution: str
    version: str

    def __str__(self):
        return f"{self.distribution} {self.version} (entry point {self.entry_point} = {self.value})"


@dataclasses.dataclass(frozen=True)
class LoadFailure:
    """A plugin that was skipped, and why."""
    name: str                 # the backend name if known, else the entry point name
    origin: Origin
    reason: str               # one line: what rule it broke
    cause: BaseException | None = None

    def message(self) -> str:
        return f"pallas_frontend backend {self.name!r} from {self.origin} was skipped: {self.reason}"

    def error(self) -> BackendUnavailableError:
        err = BackendUnavailableError(
            f"{self.message()}. Fix or reinstall that distribution, or set "
            f"{ENV_ALLOW}=<names> to load only the backends you need.")
        err.__cause__ = self.cause
        return err


@dataclasses.dataclass
class Discovered:
    """The result of one discovery pass."""
    backends: dict[str, Backend] = dataclasses.field(default_factory=dict)
    origins: dict[str, Origin] = dataclasses.field(default_factory=dict)
    failures: dict[str, LoadFailure] = dataclasses.field(default_factory=dict)


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def allow_list() -> set[str] | None:
    raw = os.environ.get(ENV_ALLOW)
    if raw is None or not raw.strip():
        return None
    return {n.strip() for n in raw.split(",") if n.strip()}


def _entry_points() -> list[tuple[metadata.EntryPoint, str, str]]:
    """(entry point, distribution name, version) of the group, in a stable order."""
    found, seen = [], set()
    for dist in metadata.distributions():
        dist_name = dist.metadata["Name"] or "?"
        for ep in dist.entry_points:
            if ep.group != backend_api.ENTRY_POINT_GROUP:
                continue
            key = (dist_name, ep.name, ep.value)
            if key in seen:     # the same dist seen twice on sys.path
                continue
            seen.add(key)
            found.append((ep, dist_name, dist.version))
    # The built-in first, then by name: the result must not depend on sys.path order.
    found.sort(key=lambda t: (t[0].name != BUILTIN_ENTRY_POINT, t[0].name, t[1]))
    return found


def _validate(backend: object, origin: Origin) -> str | None:
    """Why ``backend`` cannot be used, or None."""
    if not isinstance(backend, Backend):
        return (f"its hook returned {type(backend).__name__}, not a "
                "pallas_frontend.backend_api.Backend")
    if not isinstance(backend.name, str) or not backend.name.isidentifier():
        return f"its Backend has no valid name (got {backend.name!r}; need an identifier)"
    api = backend.api_version
    if not (isinstance(api, tuple) and len(api) == 2 and all(isinstance(v, int) for v in api)):
        return f"its api_version {api!r} is not a (major, minor) tuple of ints"
    if api[0] != backend_api.API_VERSION[0]:
        return (f"it implements backend API {api[0]}.{api[1]} but this pallas-frontend "
                f"provides {backend_api.API_VERSION[0]}.{backend_api.API_VERSION[1]}; the major "
                "versions must be equal (install a matching version of one of the two)")
    if api[1] > backend_api.API_VERSION[1]:
        return (f"it needs backend API {api[0]}.{api[1]}, newer than this pallas-frontend's "
                f"{backend_api.API_VERSION[0]}.{backend_api.API_VERSION[1]}; upgrade pallas-frontend")
    if not isinstance(backend.platforms, tuple) or not backend.platforms:
        return "its Backend declares no platforms (a non-empty tuple of JAX platform names)"
    return None


def _backends_of(plugin: object, origin: Origin) -> list[object]:
    """Calls the plugin's hook through its own plugin manager (so one plugin's
    fault cannot reach another's)."""
    pm = pluggy.PluginManager(backend_api.PROJECT_NAME)
    pm.add_hookspecs(BackendHookSpecs)
    pm.register(plugin, name=origin.entry_point)
    pm.check_pending()
    results = pm.hook.pallas_frontend_backend()
    if not results:
        raise LookupError("it implements no pallas_frontend_backend hook (mark the function "
                          "with pallas_frontend.backend_api.hookimpl)")
    out = []
    for r in results:
        out.extend(r if isinstance(r, (list, tuple)) else [r])
    return out


def _load_one(ep_name: str, value: str, load, origin: Origin, found: Discovered) -> None:
    try:
        candidates = _backends_of(load(), origin)
    except Exception as e:  # an arbitrary plugin: anything may go wrong
        kind = "import of its module failed" if isinstance(e, ImportError) else "loading it raised"
        found.failures[ep_name] = LoadFailure(
            ep_name, origin, f"{kind}: {type(e).__name__}: {e}", e)
        return
    for b in candidates:
        why = _validate(b, origin)
        name = getattr(b, "name", None) if why is None or isinstance(b, Backend) else None
        name = name if isinstance(name, str) and name else ep_name
        if why is None and name in found.backends:
            other = found.origins[name]
            why = (f"backend name {name!r} is already provided by {other.distribution} "
                   f"{other.version}; uninstall one of the two")
        if why is not None:
            key = name if name not in found.failures else f"{name}@{origin.distribution}"
            found.failures[key] = LoadFailure(name, origin, why, None)
            continue
        if b.distribution is None:
            b.distribution = origin.distribution
        found.backends[name] = b
        found.origins[name] = origin


def discover() -> Discovered:
    """Loads every allowed entry point of the group; never raises unless strict."""
    found = Discovered()
    allowed = allow_list()
    eps = [] if env_flag(ENV_NO_AUTOLOAD) else _entry_points()
    have_builtin = False
    for ep, dist_name, dist_version in eps:
        if ep.name == BUILTIN_ENTRY_POINT and dist_name == BUILTIN_DISTRIBUTION:
            have_builtin = True
        if allowed is not None and ep.name not in allowed and ep.name != BUILTIN_ENTRY_POINT:
            continue
        origin = Origin(ep.name, ep.value, dist_name, dist_version)
        _load_one(ep.name, ep.value, ep.load, origin, found)
    if not have_builtin:
        # Running from a source tree without installed metadata, or with
        # autoload disabled: the reference interpreter must still be there.
        from pallas_frontend import __version__
        origin = Origin(BUILTIN_ENTRY_POINT, BUILTIN_MODULE, BUILTIN_DISTRIBUTION, __version__)
        _load_one(BUILTIN_ENTRY_POINT, BUILTIN_MODULE,
                  lambda: importlib.import_module(BUILTIN_MODULE), origin, found)
    report(found)
    return found


_warned: set[tuple[str, str]] = set()


def report(found: Discovered) -> None:
    """Warns once per failure (or raises them all in strict mode)."""
    if not found.failures:
        return
    if env_flag(ENV_STRICT):
        lines = "\n".join("  - " + f.message() for f in found.failures.values())
        first = next(iter(found.failures.values()))
        raise BackendLoadError(f"{ENV_STRICT}=1 and {len(found.failures)} backend plugin(s) "
                               f"failed to load:\n{lines}") from first.cause
    for f in found.failures.values():
        key = (f.name, str(f.origin))
        if key in _warned:
            continue
        _warned.add(key)
        warnings.warn(f.message(), BackendLoadWarning, stacklevel=4)


def format_cause(failure: LoadFailure) -> str:
    """The stored traceback of a failure, for ``pallas backends --verbose``."""
    if failure.cause is None:
        return failure.reason
    return "".join(traceback.format_exception(failure.cause))
