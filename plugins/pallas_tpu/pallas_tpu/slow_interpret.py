"""A word before TPU interpret mode runs a grid of many points.

JAX's TPU interpreter runs a kernel one grid point at a time, each through host
callbacks that copy the point's blocks in and out: milliseconds a point on a
CPU, where the built-in interpreter runs the whole grid in one XLA loop. A grid
of tens of thousands of points ran for many minutes with nothing said (issue
39; JAX's interpret mode says nothing either). From ``SLOW_POINTS`` points on,
lowering the kernel for TPU interpret mode warns first, naming the kernel, its
grid, and the ways to a quicker run; what runs is unchanged.
"""

from __future__ import annotations

import math
import warnings

#: grid points from which TPU interpret mode warns before running (4096 points of
#: an (8, 128) float32 copy took minutes on the shared 2-core test machine)
SLOW_POINTS = 4096


class SlowInterpretWarning(UserWarning):
    """TPU interpret mode is about to run a grid of many points, one at a time."""


def warn_if_slow(kernel) -> None:
    """Warns when ``kernel``'s grid (sizes known now; a size known only at run
    time is not counted) has ``SLOW_POINTS`` points or more."""
    points = math.prod(g for g in kernel.grid if isinstance(g, int))
    if points < SLOW_POINTS:
        return
    msg = (f"Kernel {kernel.name} at {kernel.source}: TPU interpret mode runs its grid "
           f"{tuple(kernel.grid)} one point at a time, {points:,} points, each through host "
           f"callbacks (milliseconds a point on a CPU), so this call may take minutes. For a "
           f"quicker run here, use larger blocks (fewer grid points), or, if the kernel uses "
           f"no TPU-only primitive, the built-in interpreter (interpret=True), which runs the "
           f"grid in one XLA loop; on a TPU, compile it (pallas_tpu.CompilerParams()).")
    filename, _, line = kernel.source.rpartition(":")
    if filename and line.isdigit():      # at the kernel function's line, as JAX's warnings
        warnings.warn_explicit(msg, SlowInterpretWarning, filename, int(line))
    else:
        warnings.warn(msg, SlowInterpretWarning, stacklevel=2)
