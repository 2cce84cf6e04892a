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
# allows, so a release newer than this one is warned about until it has been tested
# (the requirement stopped below 0.12.1 until its changes were handled).
NEWEST_TESTED, REQUIREMENT = (0, 12, 1), ("jax>=0.10,<0.13", "jaxlib>=0.10,<0.13")
JAX_VERSION: tuple[int, int] = tuple(int(p) for p in jax.__version__.split(".")[:2])
_RELEASE = tuple(int(p) for p in re.findall(r"\d+", jax.__version__.split("+")[0])[:4])

if JAX_VERSION < OLDEST:
    raise ImportError(
        f"pallas-frontend needs jax >= 0.10 (this is jax {jax.__version__}): "
        + install_hints.requirements_command(*REQUIREMENT))
if _RELEASE > NEWEST_TESTED:
    warnings.warn(f"pallas-frontend is tested with jax 0.10.0 to 0.12.1; jax {jax.__version__} "
                  f"is newer and may fail where JAX changed its internals", stacklevel=2)
