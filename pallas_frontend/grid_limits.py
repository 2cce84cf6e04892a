"""How many grid points an interpreter runs: at most ``2**31 - 1``.

Every interpreter counts grid points with an int32 (the built-in interpreter's
loop index and per-point tables, JAX's TPU and Mosaic GPU interpret modes,
Triton's interpreter's program ids). Past that count the built-in and Mosaic GPU
interpreters failed with an ``OverflowError`` about an argument ``y``, and JAX's
TPU interpret mode returned the outputs unwritten, silently. So a kernel whose
grid has more points is refused when it is lowered for an interpreter, before
anything runs, with the grid, the limit and the fix. Compiled kernels are not
limited here: the device's launch limits are the backend's to check.
"""

from __future__ import annotations

import math

#: the most grid points an interpreter runs (its point counter is an int32)
MAX_INTERPRETED_POINTS = 2**31 - 1


def interpreting(backend_name: str, interpret) -> bool:
    """Whether a kernel lowered by ``backend_name`` with ``interpret`` runs in an
    interpreter: the built-in one, or a backend's own interpret params."""
    from pallas_frontend.registry import INTERPRETER
    return backend_name == INTERPRETER or interpret not in (None, False)


def check_interpreted_grid(grid, backend_name: str) -> None:
    """Raises ``ValueError`` when ``grid`` (static sizes; ``None`` for a size known
    only at run time, and a symbolic ``jax.export`` size, are not counted) has
    more points than an interpreter runs."""
    from pallas_frontend import _jax_compat as jc
    sizes = [int(g) for g in grid if g is not None and not jc.is_symbolic_dim(g)]
    points = math.prod(sizes)
    if points <= MAX_INTERPRETED_POINTS:
        return
    from pallas_frontend.registry import INTERPRETER
    who = ("the built-in interpreter" if backend_name == INTERPRETER else
           f"backend '{backend_name}' in interpret mode")
    raise ValueError(
        f"the grid {tuple(grid)} has {points:,} points, more than {who} runs: an interpreter "
        f"runs at most 2**31 - 1 = {MAX_INTERPRETED_POINTS:,} grid points (it counts them "
        f"with an int32). Use fewer, larger blocks so that the grid has fewer points (a block "
        f"twice as large on one axis halves that axis), or run the kernel compiled on its "
        f"device.")
