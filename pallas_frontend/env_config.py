"""The frontend's environment variables, read with errors that name the
variable, its value, the values it takes and the fix (a typo in a variable
must not silently change what runs).

Discovery reads ``PALLAS_FRONTEND_BACKENDS``, ``..._STRICT`` and
``..._DISABLE_PLUGIN_AUTOLOAD`` (``discovery.py``), ``..._IMPORT_TIMEOUT``
(``load_timeout.py``); selection reads ``PALLAS_FRONTEND_DEFAULT_BACKEND``;
the conformance suite ``PALLAS_FRONTEND_TEST_BACKEND``; ``pl.autotune``
``PALLAS_FRONTEND_AUTOTUNE_CACHE``. Each is read where it
is used, which may be late (the default backend only when a kernel runs on a
GPU), so ``check_settings`` checks them all at once: the ``pallas`` command
runs it first (exit 2), ``import pallas_frontend`` warns (``ConfigWarning``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

PREFIX = "PALLAS_FRONTEND_"
ENV_DEFAULT_BACKEND = "PALLAS_FRONTEND_DEFAULT_BACKEND"
ENV_ALLOW = "PALLAS_FRONTEND_BACKENDS"
ENV_NO_AUTOLOAD = "PALLAS_FRONTEND_DISABLE_PLUGIN_AUTOLOAD"
ENV_STRICT = "PALLAS_FRONTEND_STRICT"
ENV_IMPORT_TIMEOUT = "PALLAS_FRONTEND_IMPORT_TIMEOUT"
ENV_TEST_BACKEND = "PALLAS_FRONTEND_TEST_BACKEND"
ENV_AUTOTUNE_CACHE = "PALLAS_FRONTEND_AUTOTUNE_CACHE"
PLATFORMS = ("cpu", "cuda", "rocm", "tpu")     # what a platform=name entry may name
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


class ConfigError(ValueError):
    """A PALLAS_FRONTEND_* variable holds a value it does not take."""


class ConfigWarning(UserWarning):
    """At import: a PALLAS_FRONTEND_* variable is unknown or holds a value it does not
    take (the variable raises ``ConfigError`` where it is used)."""


def flag(name: str) -> bool:
    """A yes/no variable; any other value is an error, not a silent "no"."""
    raw = os.environ.get(name, "")
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{name}={raw!r} is neither on nor off: set it to 1 (or true, yes, on) to "
                     f"turn it on, to 0 (or false, no, off) or unset it to turn it off")


def default_backend_error(raw: str, problem: str, known: Callable[[], list[str]],
                          cls: type[Exception] = ConfigError) -> Exception:
    return cls(
        f"{ENV_DEFAULT_BACKEND}={raw!r}: {problem}. It takes a backend name (the default on every "
        f"platform) or platform=name pairs separated by commas, platforms "
        f"{', '.join(PLATFORMS)} (e.g. {ENV_DEFAULT_BACKEND}=cuda=triton,tpu=tpu); installed "
        f"backends: {', '.join(known())}. Fix the value, or unset {ENV_DEFAULT_BACKEND} for the "
        "built-in choice.")


def parse_default_backend(raw: str, known: Callable[[], list[str]]) -> dict[str | None, str]:
    """{platform (None: every platform): backend name} of ``PALLAS_FRONTEND_DEFAULT_BACKEND``;
    ``known()`` lists the installed backends for the error message."""
    chosen: dict[str | None, str] = {}
    for item in (i.strip() for i in raw.split(",")):
        if not item:
            continue
        parts = [p.strip() for p in item.split("=")]
        if len(parts) > 2:
            raise default_backend_error(raw, f"entry {item!r} has more than one '='", known)
        platform, name = (None, parts[0]) if len(parts) == 1 else parts
        if platform is not None and platform not in PLATFORMS:
            hint = " (name the GPU platform: cuda or rocm)" if platform == "gpu" else ""
            raise default_backend_error(raw, f"{platform!r} is not a platform{hint}", known)
        if not name.isidentifier():
            raise default_backend_error(raw, f"entry {item!r} names no backend", known)
        if platform in chosen:
            what = f"platform {platform!r}" if platform else "a default for every platform"
            raise default_backend_error(raw, f"it names {what} twice", known)
        chosen[platform] = name
    return chosen


def default_backend_for(platform: str, known: Callable[[], list[str]]) -> str | None:
    """The backend ``PALLAS_FRONTEND_DEFAULT_BACKEND`` names for ``platform``, if any."""
    raw = os.environ.get(ENV_DEFAULT_BACKEND, "").strip()
    if not raw:
        return None
    chosen = parse_default_backend(raw, known)
    return chosen.get(platform, chosen.get(None))


def configured_default_error(platform: str, name: str, error: Exception, by_call: bool,
                             known: Callable[[], list[str]]) -> Exception:
    """``error`` (the configured default cannot serve ``platform``) with where it was
    configured: ``set_default_backend`` (``by_call``) or the variable."""
    cls = type(error)
    if by_call:
        return cls(f"pallas_frontend.set_default_backend({platform!r}, {name!r}) chose it: "
                   f"{str(error).rstrip('.')}. Call set_default_backend({platform!r}, None) "
                   "to go back to the built-in choice.")
    raw = os.environ.get(ENV_DEFAULT_BACKEND, "").strip()
    return default_backend_error(
        raw, f"backend {name!r} cannot be the default for platform {platform!r}: "
             f"{str(error).rstrip('.')}",
        known, cls)


def allow_list_entries(raw: str) -> list[str]:
    """The entries of ``PALLAS_FRONTEND_BACKENDS`` (``name`` or ``name@distribution``)."""
    entries = [e.strip() for e in raw.split(",") if e.strip()]
    for entry in entries:
        name, at, dist = entry.partition("@")
        if not name.isidentifier() or (at and not dist):
            raise ConfigError(
                f"{ENV_ALLOW}={raw!r}: entry {entry!r} is not a backend name: it takes backend "
                f"names separated by commas, each optionally @distribution (e.g. "
                f"{ENV_ALLOW}=interpret,triton or triton@pallas-triton). Fix the value, or "
                f"unset {ENV_ALLOW} to load every installed plugin")
    return entries


def _backend_name(name: str) -> None:
    raw = os.environ.get(name, "")
    if raw.strip() and not raw.strip().isidentifier():
        raise ConfigError(f"{name}={raw!r} is not a backend name (an identifier such as "
                          f"triton); fix it, or unset {name}")


DEFAULT_IMPORT_TIMEOUT = 20.0


def import_timeout() -> float | None:
    """Seconds a plugin's import may take (``PALLAS_FRONTEND_IMPORT_TIMEOUT``); None: no limit."""
    raw = os.environ.get(ENV_IMPORT_TIMEOUT, "").strip()
    if not raw:
        return DEFAULT_IMPORT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise ConfigError(
            f"{ENV_IMPORT_TIMEOUT}={raw!r} is not a number of seconds: set it to a "
            f"non-negative number (e.g. {ENV_IMPORT_TIMEOUT}=60; 0 means no limit), or unset "
            f"it for the default of {DEFAULT_IMPORT_TIMEOUT:g} s")
    return value or None


def autotune_cache_path() -> Path | None:
    """The autotune cache file (``PALLAS_FRONTEND_AUTOTUNE_CACHE``: a ``.json`` path,
    or ``off`` for memory only); unset: ``$XDG_CACHE_HOME/pallas_frontend/autotune.json``
    or ``~/.cache/pallas_frontend/autotune.json``."""
    raw = os.environ.get(ENV_AUTOTUNE_CACHE, "")
    value = raw.strip()
    if value.lower() in ("off", "0", "false", "no", "none"):
        return None
    if not value:
        base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join("~", ".cache")
        return Path(base).expanduser() / "pallas_frontend" / "autotune.json"
    path = Path(value).expanduser()
    try:
        problem = ("is a directory" if path.is_dir() else
                   "does not name a .json file" if path.suffix != ".json" else
                   # a FIFO or a device: opening one to read it could wait forever
                   "names a special file (a FIFO or a device), not a regular file"
                   if path.exists() and not path.is_file() else None)
    except PermissionError:
        problem = None       # a place this user cannot look into: reads and writes warn
    except (OSError, ValueError) as e:   # a name too long, a NUL byte: no file can have it
        problem = f"cannot name a file ({getattr(e, 'strerror', None) or e})"
    if problem:
        raise ConfigError(
            f"{ENV_AUTOTUNE_CACHE}={raw!r} {problem}; it takes the path of the autotune cache "
            f"file (e.g. {ENV_AUTOTUNE_CACHE}=/tmp/autotune.json), or off to keep choices in "
            "memory only. Fix the value, or unset it for the default under "
            "~/.cache/pallas_frontend.")
    return path


def _known_backends() -> list[str]:
    """Installed backend names, from the entry points (nothing imported); for messages."""
    from importlib import metadata
    try:
        names = {ep.name for ep in metadata.entry_points(group="pallas_frontend.backends")}
    except Exception:   # other distributions' metadata: never let it break a message
        names = set()
    return sorted(names | {"interpret"})


#: every PALLAS_FRONTEND_* variable the project reads -> its check (raises ConfigError)
SETTINGS: dict[str, Callable[[], object]] = {
    ENV_ALLOW: lambda: allow_list_entries(os.environ.get(ENV_ALLOW, "")),
    ENV_NO_AUTOLOAD: lambda: flag(ENV_NO_AUTOLOAD),
    ENV_STRICT: lambda: flag(ENV_STRICT),
    ENV_IMPORT_TIMEOUT: import_timeout,
    ENV_DEFAULT_BACKEND: lambda: parse_default_backend(
        os.environ.get(ENV_DEFAULT_BACKEND, "").strip(), _known_backends),
    ENV_TEST_BACKEND: lambda: _backend_name(ENV_TEST_BACKEND),
    ENV_AUTOTUNE_CACHE: autotune_cache_path,
}


def unknown_settings() -> list[str]:
    """Set PALLAS_FRONTEND_* variables that nothing reads (a typo, most likely)."""
    return sorted(k for k in os.environ if k.startswith(PREFIX) and k not in SETTINGS)


def unknown_message(names: list[str]) -> str:
    return (f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} set but pallas_frontend "
            f"reads no such variable (a typo?); it reads {', '.join(sorted(SETTINGS))}")


def check_settings() -> None:
    """Raises ``ConfigError`` for the first PALLAS_FRONTEND_* variable whose value it
    does not take."""
    for name, check in SETTINGS.items():
        if os.environ.get(name, "").strip():
            check()


def warn_on_bad_settings() -> None:
    """At import: a ``ConfigWarning`` per bad or unknown variable (never raises: the
    variable raises where it is used)."""
    import sys
    import warnings
    if "pallas_frontend.cli" in sys.orig_argv[1:3] or os.path.basename(sys.argv[0]) == "pallas":
        return     # the pallas command checks them itself, and exits 2
    for name, check in SETTINGS.items():
        if not os.environ.get(name, "").strip():
            continue
        try:
            check()
        except ConfigError as e:
            warnings.warn(str(e), ConfigWarning, stacklevel=3)
    unknown = unknown_settings()
    if unknown:
        warnings.warn(unknown_message(unknown), ConfigWarning, stacklevel=3)
