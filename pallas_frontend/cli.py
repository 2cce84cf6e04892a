"""The ``pallas`` command: ``pallas backends`` and ``pallas doctor``.

Every PALLAS_FRONTEND_* setting is checked first (a bad one: exit status 2).
Text that plugins provide (names, versions, exception messages, tracebacks)
is printed with terminal control sequences escaped (``plain_text``). With
``--json`` stdout carries the JSON alone: what plugins print while loading is
moved to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile

from pallas_frontend.plain_text import printable


@contextlib.contextmanager
def _stdout_for_json():
    """Yields the stream for the JSON. Meanwhile anything else written to stdout
    (a plugin's print on import, C code writing to file descriptor 1) is caught
    and then shown on stderr; afterwards stdout writes of threads still running
    (an abandoned import) go to stderr too."""
    out = sys.stdout
    out.flush()
    try:
        whole_process = out is sys.__stdout__ and out.fileno() == 1
    except (AttributeError, OSError, ValueError):     # a replaced stream (tests)
        whole_process = False
    caught = tempfile.TemporaryFile(buffering=0)     # unbuffered: kept in the order written
    saved = os.dup(1) if whole_process else None
    if whole_process:
        os.dup2(caught.fileno(), 1)
    sys.stdout = io.TextIOWrapper(caught, encoding="utf-8", errors="replace",
                                  write_through=True)
    json_out = os.fdopen(saved, "w") if whole_process else out
    try:
        yield json_out
    finally:
        sys.stdout.flush()
        sys.stdout.detach()
        if whole_process:
            os.dup2(2, 1)         # late writers: stderr, never the JSON
            sys.stdout = sys.stderr
        else:
            sys.stdout = out
        caught.seek(0)
        text = caught.read().decode("utf-8", "replace")
        caught.close()
        if text.strip():
            print("pallas: the plugins printed this on stdout while loading; it is shown here "
                  "so that stdout holds only the JSON:\n" + printable(text).rstrip(),
                  file=sys.stderr)
        json_out.flush()


def _backends(args) -> int:
    from pallas_frontend import diagnostics, discovery, registry
    if args.json:
        with _stdout_for_json() as out:
            rows = diagnostics.backend_rows()
            failures = registry.load_failures()
            print(json.dumps(rows, indent=2), file=out)
    else:
        diagnostics.print_backend_info()
        failures = registry.load_failures()
    if args.verbose:
        stream = sys.stderr if args.json else sys.stdout
        for f in failures.values():
            print(printable(f"\n--- {f.name} ({f.origin}) ---\n{discovery.format_cause(f)}"),
                  file=stream)
    if failures and not args.allow_load_errors:
        if not args.json:
            print(f"\n{len(failures)} backend plugin(s) failed to load (exit status 1; "
                  "--verbose shows the tracebacks, --allow-load-errors exits 0).",
                  file=sys.stderr)
        return 1
    return 0


def _version_text() -> str:
    import importlib.metadata as md

    from pallas_frontend import __version__
    from pallas_frontend.backend_api import API_VERSION
    try:
        jax_version = md.version("jax")
    except md.PackageNotFoundError:
        jax_version = "not installed"
    return (f"pallas-frontend {__version__} (backend API {API_VERSION[0]}.{API_VERSION[1]}), "
            f"jax {jax_version}")


def _doctor(args) -> int:
    import jax
    from pallas_frontend import diagnostics
    platform = jax.default_backend()
    diagnostics.print_backend_info()
    print(f"\nsmoke test (blocked add of 1000 float32 vs NumPy float64) on platform {platform}:")
    results = diagnostics.smoke_test_all(platform)
    failed = 0
    for r in results:
        status = {True: "PASS", False: "FAIL", None: "SKIP"}[r.passed]
        failed += r.passed is False
        print(printable(f"  {status}  {r.backend:<16} {r.mode:<32} {r.detail}"))
    from pallas_frontend import registry
    broken = registry.load_failures()
    if broken:
        print(f"  {len(broken)} backend(s) failed to load; see the table above "
              "(pallas backends --verbose shows the tracebacks).")
    print("doctor:", "FAILED" if failed or broken else "all available backends pass")
    return 1 if failed or broken else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pallas", description="pallas_frontend backend tools")
    parser.add_argument("--version", action="version", version=_version_text())
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("backends", help="list discovered backends and load errors "
                                        "(exit status 1 when a plugin failed to load)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--verbose", "-v", action="store_true", help="print load tracebacks")
    p.add_argument("--allow-load-errors", action="store_true",
                   help="exit 0 even when a plugin failed to load")
    p.set_defaults(run=_backends)
    p = sub.add_parser("doctor", help="run a smoke kernel on every available backend")
    p.set_defaults(run=_doctor)
    return parser


def main(argv=None) -> int:
    from pallas_frontend import env_config
    args = build_parser().parse_args(argv)
    try:
        env_config.check_settings()     # every setting now, not only those this run reads
        unknown = env_config.unknown_settings()
        if unknown:
            print(f"pallas: warning: {env_config.unknown_message(unknown)}", file=sys.stderr)
        status = args.run(args)
        sys.stdout.flush()      # a reader that left shows here, not in the exit's flush (120)
        return status
    except env_config.ConfigError as e:   # a PALLAS_FRONTEND_* setting: the message says all
        print(f"pallas: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:    # the reader left (pallas backends | head): no traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())   # the exit's flush must not raise again
        return 141                              # as a shell reports SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
