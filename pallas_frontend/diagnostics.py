"""What is installed and whether it works: the data behind ``pallas backends``,
``pallas doctor`` and ``pallas_frontend.print_backend_info()``."""

from __future__ import annotations

import dataclasses
import re
import sys
import warnings

from pallas_frontend import (backend_needs, discovery, install_hints, load_timeout, plain_text,
                             registry)

COLUMNS = ("name", "distribution", "version", "api", "platforms", "capabilities", "available",
           "load error")


@dataclasses.dataclass
class SmokeResult:
    backend: str
    mode: str            # the pallas_call keywords used
    passed: bool | None  # None: skipped
    detail: str


def availability(b, platform: str) -> str:
    """How ``b`` can be used on this machine: natively, interpret-only,
    compile-only (naming what a shipped backend lacks for it and the install
    that provides it), or "no: <why>" (a raising ``is_available`` included)."""
    try:   # a probe that blocks (a driver waiting on a device) must not hang the listing
        ok, why = load_timeout.call_with_timeout(b.is_available, "is_available()",
                                                 load_timeout.import_timeout())
    except load_timeout.PluginImportTimeout as e:
        return f"no: {str(e).splitlines()[0]}"
    except Exception as e:  # a plugin's probe: report it in its row, keep listing
        return f"no: is_available() raised {type(e).__name__}: {e}"
    if not ok:
        return f"no: {why}"
    if platform in b.platforms:
        return f"yes, natively ({platform})"
    modes = []
    if b.interpret_params_type is not None:
        modes.append("yes, interpret-only")
    try:
        target = b.compile_platform()
    except Exception:   # same: a plugin's own code
        target = platform
    lacking = backend_needs.missing(b)
    if target != platform and target in b.platforms:
        modes.append(f"compile-only ({target})"
                     + (f": {backend_needs.describe(lacking)}" if lacking else ""))
    elif lacking:
        modes.append(f"compile-only ({lacking[0].target}) unavailable: "
                     f"{backend_needs.describe(lacking)}")
    if not modes:
        return f"no: it serves {', '.join(b.platforms)}, this machine is {platform}"
    modes.append(f"to run natively: a {' or '.join(b.platforms)} device")
    return "; ".join(modes)


def backend_rows(platform: str | None = None) -> list[dict[str, str]]:
    """One row per discovered backend, per load failure and per filtered plugin
    (imports every plugin the configuration allows)."""
    if platform is None:
        import jax
        platform = jax.default_backend()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", discovery.BackendLoadWarning)
        found = registry.backends()
        failures = registry.load_failures()
    rows = []
    for name in sorted(found):
        b = found[name]
        o = registry.origin(name)
        distribution = o.distribution if o else (b.distribution or "(registered in-process)")
        version = o.version if o else str(b.version)
        try:
            rows.append({
                "name": name, "distribution": distribution, "version": version,
                "api": "%d.%d" % tuple(b.api_version),
                "platforms": ",".join(b.platforms),
                "capabilities": ",".join(sorted(b.capabilities)) or "-",
                "available": availability(b, platform),
                "load error": "-",
            })
        except Exception as e:  # a Backend registered in-process skips load-time validation
            rows.append({"name": name, "distribution": distribution, "version": version,
                         "api": "?", "platforms": "?", "capabilities": "?",
                         "available": "no: cannot be listed",
                         "load error": f"its Backend's attributes cannot be read: "
                                       f"{type(e).__name__}: {e}"})
    for key in sorted(failures):
        f = failures[key]
        rows.append({"name": f.name, "distribution": f.origin.distribution,
                     "version": f.origin.version, "api": "?", "platforms": "?",
                     "capabilities": "?", "available": "no: failed to load",
                     "load error": f.reason})
    skipped = registry.filtered()
    for key in sorted(skipped):
        f = skipped[key]
        rows.append({"name": f.name, "distribution": f.origin.distribution,
                     "version": f.origin.version, "api": "?", "platforms": "?",
                     "capabilities": "?", "available": f"filtered out: {f.reason}",
                     "load error": "-"})
    listed = {r["name"] for r in rows}
    for name, dist in sorted(install_hints.SHIPPED.items()):
        if name not in listed:     # a first-party backend this machine could have
            rows.append({"name": name, "distribution": dist, "version": "-", "api": "-",
                         "platforms": "-", "capabilities": "-",
                         "available": f"not installed: {install_hints.install_command(dist)}",
                         "load error": "-"})
    # every cell may hold a plugin's text: escape what a terminal would obey
    return [{k: plain_text.printable(v) for k, v in r.items()} for r in rows]


def _wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width``, broken after commas and spaces."""
    text = " ".join(text.split("\n"))
    if len(text) <= width:
        return [text]
    lines, line = [], ""
    for piece in re.findall(r"[^,\s]+,?\s*|\s+", text):
        if line and len(line) + len(piece.rstrip()) > width:
            lines.append(line.rstrip())
            line = ""
        while len(piece) > width:      # one word longer than the column
            lines.append(piece[:width])
            piece = piece[width:]
        line += piece.lstrip() if not line else piece
    if line.strip():
        lines.append(line.rstrip())
    return lines


def format_table(rows: list[dict[str, str]], columns=COLUMNS, max_width: int = 40) -> str:
    """A text table whose long cells wrap onto more lines (nothing is cut)."""
    cells = [[_wrap(r[c], max_width if c != "load error" else 2 * max_width) for c in columns]
             for r in rows]
    widths = [max([len(c)] + [len(ln) for row in cells for ln in row[i]])
              for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    for row in cells:
        for k in range(max(len(cell) for cell in row)):
            lines.append("  ".join((cell[k] if k < len(cell) else "").ljust(w)
                                   for cell, w in zip(row, widths)).rstrip())
    return "\n".join(lines)


def print_backend_info(file=None) -> None:
    """Prints the frontend version, the JAX platform and every discovered backend."""
    import jax
    from pallas_frontend import __version__
    from pallas_frontend.backend_api import API_VERSION
    out = file or sys.stdout
    print(f"pallas-frontend {__version__} (backend API {API_VERSION[0]}.{API_VERSION[1]}), "
          f"jax {jax.__version__}, platform {jax.default_backend()}", file=out)
    print(_encodable(format_table(backend_rows(jax.default_backend())), out), file=out)


def _encodable(text: str, out) -> str:
    """``text`` as ``out`` can encode it (a plugin's error may hold characters an ASCII
    terminal cannot show: escaped, never a UnicodeEncodeError)."""
    encoding = getattr(out, "encoding", None) or "utf-8"
    try:
        text.encode(encoding)
        return text
    except (UnicodeEncodeError, LookupError):
        return text.encode(encoding, "backslashreplace").decode(encoding, "replace")


def smoke_test_all(platform: str | None = None) -> list[SmokeResult]:
    """Runs the smoke kernel on every available backend that can run here."""
    import jax
    from pallas_frontend.testing.kernels import smoke_check
    platform = platform or jax.default_backend()
    results = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", discovery.BackendLoadWarning)
        found = registry.backends()
    for name in sorted(found):
        b = found[name]
        try:
            ok, why = b.is_available()
        except Exception as e:  # a plugin's probe: report, keep checking the others
            ok, why = False, f"is_available() raised {type(e).__name__}: {e}"
        if not ok:
            results.append(SmokeResult(name, "-", None, f"unavailable: {why}"))
            continue
        if platform not in b.platforms and b.interpret_params_type is None:
            results.append(SmokeResult(name, "-", None, f"does not serve platform {platform!r} "
                                                         "and has no interpret mode"))
            continue
        options = b.call_options(platform)
        mode = ", ".join(f"{k}={type(v).__name__ if k != 'backend' else v}"
                         for k, v in options.items())
        try:
            err = smoke_check(options)
        except Exception as e:  # report every failure, keep checking the others
            results.append(SmokeResult(name, mode, False, f"{type(e).__name__}: {e}"))
        else:
            results.append(SmokeResult(name, mode, True, f"max abs error {err:.1e}"))
    return results
