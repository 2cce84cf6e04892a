"""What is installed and whether it works: the data behind ``pallas backends``,
``pallas doctor`` and ``pallas_frontend.print_backend_info()``."""

from __future__ import annotations

import dataclasses
import sys
import warnings

from pallas_frontend import discovery, registry

COLUMNS = ("name", "distribution", "version", "api", "platforms", "capabilities", "available",
           "load error")


@dataclasses.dataclass
class SmokeResult:
    backend: str
    mode: str            # the pallas_call keywords used
    passed: bool | None  # None: skipped
    detail: str


def backend_rows() -> list[dict[str, str]]:
    """One row per discovered backend and per load failure."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", discovery.BackendLoadWarning)
        found = registry.backends()
        failures = registry.load_failures()
    rows = []
    for name in sorted(found):
        b = found[name]
        o = registry.origin(name)
        ok, why = b.is_available()
        rows.append({
            "name": name,
            "distribution": o.distribution if o else (b.distribution or "(registered in-process)"),
            "version": o.version if o else str(b.version),
            "api": "%d.%d" % tuple(b.api_version),
            "platforms": ",".join(b.platforms),
            "capabilities": ",".join(sorted(b.capabilities)) or "-",
            # an available backend may say how (e.g. "compile-only: no GPU here")
            "available": (f"yes ({why})" if why else "yes") if ok else f"no: {why}",
            "load error": "-",
        })
    for key in sorted(failures):
        f = failures[key]
        rows.append({"name": f.name, "distribution": f.origin.distribution,
                     "version": f.origin.version, "api": "?", "platforms": "?",
                     "capabilities": "?", "available": "no", "load error": f.reason})
    return rows


def format_table(rows: list[dict[str, str]], columns=COLUMNS, max_width: int = 48) -> str:
    def cut(s):
        return s if len(s) <= max_width else s[:max_width - 3] + "..."
    cells = [[cut(r[c]) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


def print_backend_info(file=None) -> None:
    """Prints the frontend version, the JAX platform and every discovered backend."""
    import jax
    from pallas_frontend import __version__
    from pallas_frontend.backend_api import API_VERSION
    out = file or sys.stdout
    print(f"pallas-frontend {__version__} (backend API {API_VERSION[0]}.{API_VERSION[1]}), "
          f"jax {jax.__version__}, platform {jax.default_backend()}", file=out)
    print(format_table(backend_rows()), file=out)


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
        ok, why = b.is_available()
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
