"""The autotune cache: which candidate won for a kernel on a device, kept in a JSON file.

One file holds every entry, keyed by ``cache_key(name, signature, device_kind,
backend)``. An entry is plain JSON, so measurements made elsewhere (a script on
a TPU host without this project, an export-and-run route) can fill the same
file: ``config_label`` names a candidate, ``choose_winner`` picks from a
``{label: seconds}`` table, ``make_entry`` and ``write_entry`` store it::

    {"format": "pallas_frontend.autotune/1",
     "entries": {"<key>": {"winner": "<label>", "seconds": {"<label>": 1.2e-3, ...},
                           "errors": {"<label>": "why it was dropped"}, ...}}}

Where the file is: ``$PALLAS_FRONTEND_AUTOTUNE_CACHE`` (a file path; ``off`` keeps
choices in memory only), else ``$XDG_CACHE_HOME/pallas_frontend/autotune.json``,
else ``~/.cache/pallas_frontend/autotune.json``. Writes are atomic (a temporary
file renamed over the old one); a file that cannot be read or parsed is
ignored with a warning, never an error.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pallas_frontend import env_config

ENV_CACHE = env_config.ENV_AUTOTUNE_CACHE
FORMAT = "pallas_frontend.autotune/1"


def default_cache_path() -> Path | None:
    """The cache file the environment names; None when ``PALLAS_FRONTEND_AUTOTUNE_CACHE=off``.
    A directory or a path not ending in ``.json`` raises ``ConfigError``."""
    return env_config.autotune_cache_path()


def config_label(config: Mapping[str, Any]) -> str:
    """The stable name of a candidate: its keyword arguments sorted by name, each
    by ``repr`` (e.g. ``"block_shape=(512, 512), block_k=1024"``)."""
    return ", ".join(f"{k}={v!r}" for k, v in sorted(config.items()))


def cache_key(name: str, signature: str, device_kind: str, backend: str | None) -> str:
    """The key of one choice: what is tuned, for which arguments, on which device and backend."""
    return json.dumps({"name": name, "signature": signature, "device_kind": device_kind,
                       "backend": backend}, sort_keys=True)


def choose_winner(seconds: Mapping[str, float | None]) -> str:
    """The label with the fewest seconds; ``None`` (or a non-finite time) marks a
    candidate that did not run. Ties go to the earlier label. Raises ValueError
    when no candidate has a time."""
    timed = [(s, i, label) for i, (label, s) in enumerate(seconds.items())
             if s is not None and math.isfinite(s) and s >= 0]
    if not timed:
        raise ValueError(f"no candidate has a time to choose from: {dict(seconds)}")
    return min(timed)[2]


def make_entry(seconds: Mapping[str, float | None], *, errors: Mapping[str, str] | None = None,
               **info: Any) -> dict[str, Any]:
    """A cache entry from a ``{label: seconds}`` table: the winner, every time,
    why candidates were dropped, and any other JSON-ready ``info`` (e.g. the
    device kind, the JAX version, when it was measured)."""
    return {**info, "winner": choose_winner(seconds), "seconds": dict(seconds),
            "errors": dict(errors or {})}


def read_entries(path: Path | str) -> dict[str, dict[str, Any]]:
    """Every entry of the cache file at ``path``; empty when it does not exist, or
    (with a warning) when it cannot be read or is not a cache file."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as e:
        warnings.warn(f"autotune cache {path} cannot be read ({e}); ignoring it", stacklevel=3)
        return {}
    try:
        data = json.loads(text)
    except ValueError as e:
        warnings.warn(f"autotune cache {path} is not valid JSON ({e}); ignoring it. Delete the "
                      "file to start a new one.", stacklevel=3)
        return {}
    entries = data.get("entries") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(entries, dict):
        warnings.warn(f"autotune cache {path} is not a {FORMAT} file; ignoring it. Delete the "
                      "file to start a new one.", stacklevel=3)
        return {}
    return {k: e for k, e in entries.items()
            if isinstance(e, dict) and isinstance(e.get("winner"), str)}


def read_entry(path: Path | str, key: str) -> dict[str, Any] | None:
    """The entry stored under ``key``, or None."""
    return read_entries(path).get(key)


def write_entry(path: Path | str, key: str, entry: Mapping[str, Any]) -> bool:
    """Stores ``entry`` under ``key`` (other entries kept), atomically. Returns
    False, with a warning, when the file cannot be written."""
    path = Path(path)
    entries = read_entries(path)
    entries[key] = dict(entry)
    text = json.dumps({"format": FORMAT, "entries": entries}, indent=1, sort_keys=True)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text + "\n")
            os.replace(tmp, path)       # readers see the old file or the new one, never half
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as e:
        warnings.warn(f"autotune cache {path} cannot be written ({e}); the choice is kept in "
                      f"memory only. Point {ENV_CACHE} at a writable file.", stacklevel=3)
        return False
    return True
