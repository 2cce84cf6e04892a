"""The frontend's environment variables, read with errors that name the
variable, its value, the values it takes and the fix (a typo in a variable
must not silently change what runs).

Discovery reads ``PALLAS_FRONTEND_BACKENDS``, ``..._STRICT`` and
``..._DISABLE_PLUGIN_AUTOLOAD`` (``discovery.py``), ``..._IMPORT_TIMEOUT``
(``load_timeout.py``); selection reads ``PALLAS_FRONTEND_DEFAULT_BACKEND``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

ENV_DEFAULT_BACKEND = "PALLAS_FRONTEND_DEFAULT_BACKEND"
PLATFORMS = ("cpu", "cuda", "rocm", "tpu")     # what a platform=name entry may name
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


class ConfigError(ValueError):
    """A PALLAS_FRONTEND_* variable holds a value it does not take."""


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
