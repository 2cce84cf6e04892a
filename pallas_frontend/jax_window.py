"""The JAX releases pallas-frontend supports, checked before any JAX internal
is touched: an older JAX is refused with one line instead of failing deep
inside; a newer one gets a warning."""

from __future__ import annotations

import warnings

import jax

from pallas_frontend import install_hints

OLDEST, FIRST_UNTESTED = (0, 10), (0, 13)
JAX_VERSION: tuple[int, int] = tuple(int(p) for p in jax.__version__.split(".")[:2])

if JAX_VERSION < OLDEST:
    raise ImportError(
        f"pallas-frontend needs jax >= 0.10 (this is jax {jax.__version__}): "
        + install_hints.requirements_command("jax>=0.10,<0.13", "jaxlib>=0.10,<0.13"))
if JAX_VERSION >= FIRST_UNTESTED:
    warnings.warn(f"pallas-frontend is tested with jax 0.10 to 0.12; jax {jax.__version__} "
                  f"is newer and may fail where JAX changed its internals", stacklevel=2)
