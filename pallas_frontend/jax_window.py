"""The JAX releases pallas-frontend supports, checked before any JAX internal
is touched: an older JAX is refused with one line instead of failing deep
inside; a newer one gets a warning."""

from __future__ import annotations

import re
import warnings

import jax

from pallas_frontend import install_hints

OLDEST = (0, 10)
# The newest release the test matrix has run: CI installs the newest the requirement
# allows, so the requirement stops below the next release until it has been tested
# (JAX 0.12.1 changed numerics and internals the tests rely on).
NEWEST_TESTED, REQUIREMENT = (0, 12, 0, 1), ("jax>=0.10,<0.12.1", "jaxlib>=0.10,<0.12.1")
JAX_VERSION: tuple[int, int] = tuple(int(p) for p in jax.__version__.split(".")[:2])
_RELEASE = tuple(int(p) for p in re.findall(r"\d+", jax.__version__.split("+")[0])[:4])

if JAX_VERSION < OLDEST:
    raise ImportError(
        f"pallas-frontend needs jax >= 0.10 (this is jax {jax.__version__}): "
        + install_hints.requirements_command(*REQUIREMENT))
if _RELEASE > NEWEST_TESTED:
    warnings.warn(f"pallas-frontend is tested with jax 0.10.0 to 0.12.0.1; jax {jax.__version__} "
                  f"is newer and may fail where JAX changed its internals", stacklevel=2)
