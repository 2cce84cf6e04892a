"""Finding backends: entry points of group ``pallas_frontend.backends``.

Reading entry points imports nothing. A plugin's module is imported only when
selection may choose it (``Discovered.load``): ``interpret=True`` and the CPU
default import no plugin at all; compiler params import the plugin that owns
them; a non-CPU default imports the candidates for that platform in order of
the priority they declare in their metadata (``pallas_frontend.backend_info``,
see ``metadata.py``). Listing every backend (``pallas backends``) imports all.

Whatever goes wrong with one plugin (its import raises anything, SystemExit
included; its hook raises; it hands over something that is not a ``Backend``;
its api_version is missing or of another major; its name is reserved or
claimed by two distributions) is recorded as a ``LoadFailure`` naming the
distribution, warned about once, and skipped; the other backends keep
working. Using a skipped backend raises with the stored cause. An exception
whose message cannot be read (its ``__str__`` raises) is recorded by its type. A
``KeyboardInterrupt`` that the plugin's own code raises is recorded as its
failure too; a real Ctrl-C (a SIGINT while it loads, ``ctrl_c.watch``) still
interrupts.

Environment:
- ``PALLAS_FRONTEND_BACKENDS=a,b,c@dist``: load only these plugins (allow-list;
  ``name@distribution`` picks one of two distributions claiming ``name``);
  the others are recorded as filtered and never imported. Unknown names warn.
- ``PALLAS_FRONTEND_DISABLE_PLUGIN_AUTOLOAD=1``: load no plugin at all
  (the built-in interpreter and ``register_backend`` backends remain);
- ``PALLAS_FRONTEND_STRICT=1``: a load failure raises instead (for CI);
- ``PALLAS_FRONTEND_IMPORT_TIMEOUT=<seconds>`` (default 20, 0: no limit): a
  plugin whose import (or hook) has not returned by then is recorded as a load
  failure that says where it blocks; its import is left to finish in a
  background thread, so ``pallas backends`` and ``pl.backends()`` never hang.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata as metadata
import os
import sys
import traceback
import warnings
from collections.abc import Callable

from pallas_frontend import _jax_compat as jc, backend_api, ctrl_c, env_config, frames
from pallas_frontend.backend_api import Backend, BackendUnavailableError
from pallas_frontend.backend_metadata import INFO_GROUP, Declared, parse_declarations
from pallas_frontend.load_timeout import PluginImportTimeout, call_with_timeout, import_timeout

BUILTIN_ENTRY_POINT = "interpret"
BUILTIN_MODULE = "pallas_frontend.interpreter.backend"
BUILTIN_DISTRIBUTION = "pallas-frontend"
BUILTIN_DECLARED = Declared(("cpu", "cuda", "rocm", "tpu"), 0)
# Names of the backends this project ships: only their distribution may use them.
RESERVED_NAMES = {"interpret": "pallas-frontend", "triton": "pallas-triton",
                  "tpu": "pallas-tpu", "mgpu": "pallas-mgpu"}

ENV_ALLOW = env_config.ENV_ALLOW
ENV_NO_AUTOLOAD = env_config.ENV_NO_AUTOLOAD
ENV_STRICT = env_config.ENV_STRICT


class BackendLoadError(RuntimeError):
    """A plugin failed to load while ``PALLAS_FRONTEND_STRICT=1``."""


class BackendLoadWarning(RuntimeWarning):
    """A plugin failed to load and was skipped."""


class BackendConfigWarning(UserWarning):
    """The backend configuration names something that is not installed."""


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
    reason: str               # what rule it broke (may span lines: a plugin's own message)
    cause: BaseException | None = None

    def message(self) -> str:
        return f"pallas_frontend backend {self.name!r} from {self.origin} was skipped: {self.reason}"

    def error(self) -> BackendUnavailableError:
        err = BackendUnavailableError(
            f"{self.message()}. Fix or reinstall that distribution, or set "
            f"{ENV_ALLOW}=<names> to load only the backends you need.")
        err.__cause__ = self.cause
        return err


@dataclasses.dataclass(frozen=True)
class Filtered:
    """An installed plugin that the configuration kept from loading (never imported)."""
    name: str
    origin: Origin
    reason: str

    def error(self) -> BackendUnavailableError:
        return BackendUnavailableError(
            f"pallas_frontend backend {self.name!r} ({self.origin}) is installed but "
            f"{self.reason}, so it was not loaded. Change that setting to use it.")


@dataclasses.dataclass
class Candidate:
    """An entry point not imported yet."""
    name: str
    origin: Origin
    load: Callable[[], object]
    declared: Declared | None          # platforms/priority from metadata; None: undeclared

    @property
    def top_module(self) -> str:
        return self.origin.value.split(":")[0].split(".")[0]


@dataclasses.dataclass
class Discovered:
    """What is installed: loaded backends, candidates not imported yet, failures
    and filtered plugins."""
    backends: dict[str, Backend] = dataclasses.field(default_factory=dict)
    origins: dict[str, Origin] = dataclasses.field(default_factory=dict)
    failures: dict[str, LoadFailure] = dataclasses.field(default_factory=dict)
    pending: dict[str, Candidate] = dataclasses.field(default_factory=dict)
    filtered: dict[str, Filtered] = dataclasses.field(default_factory=dict)

    def load(self, name: str) -> Backend | None:
        """Imports candidate ``name`` if it is pending; the backend, or None."""
        cand = self.pending.pop(name, None)
        if cand is not None:
            _load_one(cand, self)
            report(self)
        return self.backends.get(name)

    def load_all(self) -> None:
        for name in list(self.pending):
            self.load(name)

    def failure_for(self, name: str) -> LoadFailure | None:
        if name in self.failures:
            return self.failures[name]
        return next((f for f in self.failures.values() if f.name == name), None)

    def declared(self, name: str) -> Declared | None:
        cand = self.pending.get(name)
        return cand.declared if cand is not None else None


def env_flag(name: str) -> bool:
    return env_config.flag(name)      # an unrecognized value raises, naming the variable


def allow_list() -> set[str] | None:
    raw = os.environ.get(ENV_ALLOW)
    if raw is None or not raw.strip():
        return None
    return set(env_config.allow_list_entries(raw))     # a malformed entry raises, naming it


def _entry_points() -> list[tuple[metadata.EntryPoint, str, str, dict[str, Declared]]]:
    """(entry point, distribution, version, declarations) of the group, stable order."""
    found, seen = [], set()
    for dist in metadata.distributions():
        dist_name = dist.metadata["Name"] or "?"
        eps = list(dist.entry_points)
        declared = None
        for ep in eps:
            if ep.group != backend_api.ENTRY_POINT_GROUP:
                continue
            key = (dist_name, ep.name, ep.value)
            if key in seen:     # the same dist seen twice on sys.path
                continue
            seen.add(key)
            if declared is None:
                declared = parse_declarations([e.name for e in eps if e.group == INFO_GROUP])
            found.append((ep, dist_name, dist.version, declared))
    found.sort(key=lambda t: (t[0].name != BUILTIN_ENTRY_POINT, t[0].name, t[1]))
    return found


def _validate(backend: object, origin: Origin) -> str | None:
    """Why ``backend`` cannot be used, or None."""
    if not isinstance(backend, Backend):
        return (f"its hook returned {type(backend).__name__}, not a "
                "pallas_frontend.backend_api.Backend")
    if not isinstance(backend.name, str) or not backend.name.isidentifier():
        return f"its Backend has no valid name (got {backend.name!r}; need an identifier)"
    return validate_api_version(backend) or _validate_platforms(backend)


def validate_api_version(backend: Backend) -> str | None:
    api = backend.api_version
    major, minor = backend_api.API_VERSION
    if api is None:
        return (f"its Backend declares no api_version; set api_version = ({major}, {minor}) "
                "(the backend API it was written against) on the class")
    if not (isinstance(api, tuple) and len(api) == 2 and all(isinstance(v, int) for v in api)):
        return f"its api_version {api!r} is not a (major, minor) tuple of ints"
    if api[0] != major:
        return (f"it implements backend API {api[0]}.{api[1]} but this pallas-frontend "
                f"provides {major}.{minor}; the major versions must be equal (install a "
                "matching version of one of the two)")
    if api[1] > minor:
        return (f"it needs backend API {api[0]}.{api[1]}, newer than this pallas-frontend's "
                f"{major}.{minor}; upgrade pallas-frontend")
    return None


def _validate_platforms(backend: Backend) -> str | None:
    platforms = backend.platforms
    if not isinstance(platforms, tuple) or not platforms:
        return "its Backend declares no platforms (a non-empty tuple of JAX platform names)"
    odd = [p for p in platforms if not isinstance(p, str) or not p]
    if odd:
        return (f"its Backend's platforms {platforms!r} hold {odd[0]!r}, not a platform name "
                "(platforms is a tuple of strings such as ('cuda', 'rocm'))")
    capabilities = backend.capabilities
    if isinstance(capabilities, str) or not isinstance(capabilities, (set, frozenset, tuple, list)):
        return (f"its Backend's capabilities {capabilities!r} are not a set of tag names "
                "(capabilities is a frozenset of strings such as frozenset({'grid'}))")
    odd = [c for c in capabilities if not isinstance(c, str)]
    if odd:
        return (f"its Backend's capabilities hold {odd[0]!r} ({type(odd[0]).__name__}), not a "
                "tag name (capabilities is a frozenset of strings such as frozenset({'grid'}))")
    return None


def _backends_of(plugin: object, origin: Origin) -> list[object]:
    """Calls the plugin's hook through its own plugin manager (so one plugin's
    fault cannot reach another's)."""
    import pluggy

    from pallas_frontend.hookspecs import BackendHookSpecs
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


def _load_one(cand: Candidate, found: Discovered) -> None:
    name, origin = cand.name, cand.origin

    def load():
        return _backends_of(cand.load(), origin)
    limit = import_timeout()      # a malformed setting raises here, naming the variable
    with ctrl_c.watch() as interrupt:
        try:
            # A module already (being) imported cannot block again, and its import
            # lock may be this thread's: load it here.
            if name == BUILTIN_ENTRY_POINT or cand.top_module in sys.modules:
                candidates = load()
            else:
                candidates = call_with_timeout(load, "its import", limit,
                                               label=f"loading {name} ({origin.distribution})")
        except PluginImportTimeout as e:
            found.failures[name] = LoadFailure(name, origin, str(e).split("\n")[0], e)
            return
        except BaseException as e:  # an arbitrary plugin: anything, sys.exit included
            if isinstance(e, KeyboardInterrupt) and interrupt.pressed:
                raise                   # the user's Ctrl-C
            kind = ("import of its module failed" if isinstance(e, ImportError)
                    else "loading it raised")
            why = f"{kind}: {exception_text(e)}"
            if isinstance(e, KeyboardInterrupt):
                why += " (raised by the plugin's own code, not a Ctrl-C)"
            found.failures[name] = LoadFailure(name, origin, why, e)
            return
    try:
        _keep_valid(candidates, name, origin, found)
    except Exception as e:  # noqa: BLE001 - a Backend whose attributes raise
        found.failures[name] = LoadFailure(
            name, origin, f"reading its Backend's attributes raised {exception_text(e)}", e)


def exception_text(e: BaseException) -> str:
    """``Type: message`` of a plugin's exception; its type alone, saying so, when
    ``str()`` of it raises (a broken ``__str__`` must not take the caller down)."""
    try:
        text = str(e)
    except BaseException as err:  # noqa: BLE001 - whatever a plugin's __str__ raises
        return (f"{type(e).__name__} (its message cannot be shown: str() of it raised "
                f"{type(err).__name__})")
    return f"{type(e).__name__}: {text}"


def _keep_valid(candidates: list, name: str, origin: Origin, found: Discovered) -> None:
    for b in candidates:
        why = _validate(b, origin)
        if why is None and b.name != name:
            why = (f"its Backend is named {b.name!r} but its entry point is {name!r}; they must "
                   "be equal (selection finds a backend by its entry point name, unimported)")
        if why is None and name in found.backends:
            other = found.origins[name]
            why = (f"backend name {name!r} is already provided by {other.distribution} "
                   f"{other.version}; uninstall one of the two")
        if why is not None:
            key = name if name not in found.failures and name not in found.backends \
                else f"{name}@{origin.distribution}"
            found.failures[key] = LoadFailure(name, origin, why, None)
            continue
        if b.distribution is None:
            b.distribution = origin.distribution
        frames.hide_package(type(b).__module__)   # its frames are not the user's line
        found.backends[name] = b
        found.origins[name] = origin


def _builtin_candidate(origin: Origin | None = None) -> Candidate:
    if origin is None:
        from pallas_frontend import __version__
        origin = Origin(BUILTIN_ENTRY_POINT, BUILTIN_MODULE, BUILTIN_DISTRIBUTION, __version__)
    return Candidate(BUILTIN_ENTRY_POINT, origin, lambda: importlib.import_module(BUILTIN_MODULE),
                     BUILTIN_DECLARED)


def discover() -> Discovered:
    """Reads the entry points (importing none); never raises unless strict."""
    found = Discovered()
    allowed = allow_list()
    autoload = not env_flag(ENV_NO_AUTOLOAD)
    by_name: dict[str, list[Candidate]] = {}
    builtin = None
    for ep, dist_name, dist_version, declared in _entry_points():
        origin = Origin(ep.name, ep.value, dist_name, dist_version)
        if ep.name == BUILTIN_ENTRY_POINT and dist_name == BUILTIN_DISTRIBUTION:
            builtin = _builtin_candidate(origin)     # the built-in is not a plugin: never filtered
            continue
        owner = RESERVED_NAMES.get(ep.name)
        if owner is not None and owner != dist_name:
            found.failures[f"{ep.name}@{dist_name}"] = LoadFailure(
                ep.name, origin, f"the backend name {ep.name!r} is reserved for {owner}; "
                "a third-party backend must choose another name")
            continue
        if not autoload:
            found.filtered[f"{ep.name}@{dist_name}"] = Filtered(
                ep.name, origin, f"{ENV_NO_AUTOLOAD}=1 is set")
            continue
        if allowed is not None and ep.name not in allowed and f"{ep.name}@{dist_name}" not in allowed:
            found.filtered[f"{ep.name}@{dist_name}"] = Filtered(
                ep.name, origin, f"it is not in {ENV_ALLOW}={os.environ.get(ENV_ALLOW, '')}")
            continue
        by_name.setdefault(ep.name, []).append(
            Candidate(ep.name, origin, ep.load, declared.get(ep.name)))
    found.pending[BUILTIN_ENTRY_POINT] = builtin or _builtin_candidate()
    for name, cands in by_name.items():
        if allowed is not None and name not in allowed:     # picked by name@distribution
            cands = [c for c in cands if f"{name}@{c.origin.distribution}" in allowed]
        if len(cands) == 1:
            found.pending[name] = cands[0]
            continue
        dists = " and ".join(f"{c.origin.distribution} {c.origin.version}" for c in cands)
        for i, c in enumerate(cands):
            found.failures[name if i == 0 else f"{name}@{c.origin.distribution}"] = LoadFailure(
                name, c.origin,
                f"the backend name {name!r} is claimed by both {dists}; uninstall one, or pick "
                f"one with {ENV_ALLOW}={name}@{c.origin.distribution}")
    _warn_unknown_allowed(allowed, found)
    report(found)
    return found


def _warn_unknown_allowed(allowed: set[str] | None, found: Discovered) -> None:
    if allowed is None:
        return
    known = {BUILTIN_ENTRY_POINT, *found.pending}
    for c in (*found.pending.values(), *found.failures.values()):
        known.add(f"{c.name}@{c.origin.distribution}")
        known.add(c.name)
    unknown = sorted(allowed - known)
    if unknown:
        installed = sorted(known - {n for n in known if "@" in n})
        warnings.warn(f"{ENV_ALLOW} names {', '.join(map(repr, unknown))}, which no installed "
                      f"distribution provides (installed backends: {', '.join(installed)})",
                      BackendConfigWarning, stacklevel=4)


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
