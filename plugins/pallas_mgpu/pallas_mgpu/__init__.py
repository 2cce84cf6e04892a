"""pallas_mgpu: the Mosaic GPU backend of pallas-frontend.

Only the parameters type exists so far; the backend registers itself and
reports, honestly, that it cannot lower kernels yet.
"""

import dataclasses

import pallas_frontend as pl

__version__ = "0.1.0"


@dataclasses.dataclass(frozen=True)
class CompilerParams(pl.CompilerParams):
    """Mosaic GPU compile options (accepted, not yet used)."""
    BACKEND = "mgpu"
    approx_math: bool = False
    dimension_semantics: tuple[str, ...] | None = None
    max_concurrent_steps: int = 1
