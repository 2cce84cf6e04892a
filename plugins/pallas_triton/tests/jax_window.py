"""Skip markers for tests of what an older JAX of the window (0.10-0.12) lacks: each
feature probed once, the reason naming the JAX release that has it (one line, as
pallas_triton itself says it)."""

import pytest
from jax import lax
from jax.experimental.pallas import triton as jax_triton

from pallas_triton import _jax_compat


def needs_jax(since: str, present: bool, what: str):
    """Skip the test where this JAX lacks ``what`` (first in JAX ``since``)."""
    return pytest.mark.skipif(not present, reason=_jax_compat.needs_newer_jax(what, since))


GPU_QUERIES = needs_jax("0.11", all(hasattr(jax_triton, n) for n in _jax_compat.GPU_QUERIES),
                        "JAX's GPU queries (jax.experimental.pallas.triton.GpuInfo, ...)")
LAX_ONE_MINUS_SQUARE = needs_jax("0.11", hasattr(lax, "one_minus_square"),
                                 "lax.one_minus_square")
LAX_POLYNOMIAL = needs_jax("0.12", hasattr(lax, "polynomial"), "lax.polynomial")
