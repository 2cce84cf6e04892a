"""Conformance manifests of backend ``mgpu``: permanent gaps (skipped) and
known failures (strict xfail), each with its reason."""

UNSUPPORTED: dict[str, str] = {}

XFAIL: dict[str, str] = {}
