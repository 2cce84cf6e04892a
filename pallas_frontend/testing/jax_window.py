"""Test markers for the JAX window (jax 0.10 to 0.12): a test of something
that an older JAX itself cannot do is skipped there with the reason, so that
a suite's counts say what ran on each JAX."""

from __future__ import annotations

import pytest

from pallas_frontend.jax_window import JAX_VERSION


def needs_jax(minimum: str, why: str):
    """Skips a test under a JAX older than ``minimum`` ("0.12"), saying ``why``:
    what that JAX lacks (checked by running JAX's own API, not ours)."""
    wanted = tuple(int(p) for p in minimum.split("."))
    return pytest.mark.skipif(JAX_VERSION < wanted, reason=f"needs JAX >= {minimum}: {why}")
