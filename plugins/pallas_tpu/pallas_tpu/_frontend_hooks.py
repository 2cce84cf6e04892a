"""The two frontend internals the traced pipeline needs, in one place until the
contract (``backend_api``) offers them: installing the pipeline's grid for
``pl.program_id``/``pl.num_programs`` in its body, and asking whether a kernel
is being traced at all. Requested of the contract owner; nothing else in
pallas_tpu reaches past ``backend_api``."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def pipeline_grid(indices, sizes):
    """``pl.program_id(a)`` is ``indices[a]`` and ``pl.num_programs(a)`` ``sizes[a]`` inside."""
    from pallas_frontend.primitives import grid_context
    with grid_context(indices, sizes, None):
        yield


def tracing_kernel() -> bool:
    """Whether a pallas_call/pl.kernel body is being traced on this thread."""
    from pallas_frontend import primitives
    return getattr(primitives._local, "grid", None) is not None
