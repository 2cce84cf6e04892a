"""The ``pallas`` command: ``pallas backends`` and ``pallas doctor``."""

from __future__ import annotations

import argparse
import json
import sys


def _backends(args) -> int:
    from pallas_frontend import diagnostics, discovery, registry
    if args.json:
        print(json.dumps(diagnostics.backend_rows(), indent=2))
    else:
        diagnostics.print_backend_info()
    failures = registry.load_failures()
    if args.verbose:
        for f in failures.values():
            print(f"\n--- {f.name} ({f.origin}) ---\n{discovery.format_cause(f)}")
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
        print(f"  {status}  {r.backend:<16} {r.mode:<32} {r.detail}")
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
    from pallas_frontend.env_config import ConfigError
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except ConfigError as e:     # a PALLAS_FRONTEND_* setting: its message is the whole story
        print(f"pallas: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
