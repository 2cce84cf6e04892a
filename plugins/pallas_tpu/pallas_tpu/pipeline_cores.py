"""Splitting an ``emit_pipeline`` grid across the TensorCores of a chip.

``emit_pipeline(..., core_axis_name="core")`` (or ``core_axis=i``, a grid
axis of the kernel) runs one pipeline per core, each over its share of one
parallel grid dimension, as JAX's does: the first parallel dimension whose
static size the core count divides is cut evenly; otherwise the one dynamic
parallel dimension, or else the largest static one, is cut with the first
``size % cores`` cores taking one step more. Each core's body sees the
global grid indices (``pl.program_id``) and its own share's sizes
(``pl.num_programs``), and its index maps get the global indices.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import pallas_frontend as pf


def core_info(core_axis, core_axis_name):
    """``(number of cores, this core's index)`` of the named mesh axis or of
    kernel grid axis ``core_axis``; ``(None, None)`` when neither is given."""
    if core_axis is None and core_axis_name is None:
        return None, None
    if core_axis_name is not None:
        return jax.lax.axis_size(core_axis_name), jax.lax.axis_index(core_axis_name)
    if isinstance(core_axis, (tuple, list)):
        raise NotImplementedError(
            f"emit_pipeline: core_axis={core_axis!r} names several grid axes; pass one grid "
            "axis, or core_axis_name with the mesh axis names.")
    return pf.num_programs(core_axis), pf.program_id(core_axis)


def _semantics(dimension_semantics, n: int) -> tuple[str, ...]:
    if dimension_semantics is None:
        return ("arbitrary",) * n
    out = tuple(str(getattr(d, "value", d)).lower() for d in dimension_semantics)
    if len(out) != n:
        raise ValueError(f"emit_pipeline: dimension_semantics has {len(out)} entries for a "
                         f"grid of {n} dims; give one per grid dim.")
    return out


def _static_size(g) -> int | None:
    return int(g) if isinstance(g, (int, np.integer)) else None


def partition_grid(grid, dimension_semantics, num_cores, core_id, *, offsets: bool = True):
    """``(this core's grid, offsets to add to its indices)``; with
    ``offsets=False`` the offsets are None and not computed (no equations
    left unused in the kernel jaxpr, which a rebuild would replay)."""
    grid = tuple(grid)
    zeros = (0,) * len(grid)
    if num_cores is None:
        return grid, zeros
    cores = _static_size(num_cores)
    if cores is None:
        try:
            cores = int(num_cores)
        except (TypeError, jax.errors.ConcretizationTypeError):
            raise NotImplementedError(
                "emit_pipeline: the number of cores must be known when the kernel is traced "
                "(a mesh axis or grid axis of static size).") from None
    if cores == 1:
        return grid, zeros
    sem = _semantics(dimension_semantics, len(grid))
    parallel = [i for i, s in enumerate(sem) if s == "parallel"]
    if not parallel:
        raise NotImplementedError(
            f"emit_pipeline: a grid split across {cores} cores needs a parallel dimension; "
            f"dimension_semantics={sem} has none. Mark one pltpu.PARALLEL.")
    core = jnp.asarray(core_id, jnp.int32)
    even = [i for i in parallel if _static_size(grid[i]) is not None
            and _static_size(grid[i]) % cores == 0]
    if even:
        d = even[0]
        share = _static_size(grid[d]) // cores
        return _replace(grid, d, share), _replace(zeros, d, core * share) if offsets else None
    dynamic = [i for i in parallel if _static_size(grid[i]) is None]
    static = [i for i in parallel if _static_size(grid[i]) is not None]
    if len(dynamic) > 1:
        raise NotImplementedError(
            f"emit_pipeline: cannot split over several parallel dims of run-time size "
            f"(grid {grid}); make all but one static or mark them arbitrary.")
    if dynamic and not static:
        d = dynamic[0]
    else:
        largest = max(_static_size(grid[i]) for i in static)
        d = next(i for i in static if _static_size(grid[i]) == largest)
    size = jnp.asarray(grid[d], jnp.int32)
    base, extra = size // cores, size % cores
    # the first `extra` cores take one step more
    steps = jnp.where(core < extra, base + 1, base)
    if not offsets:
        return _replace(grid, d, steps), None
    offset = jnp.where(core < extra, core * (base + 1), core * base + extra)
    return _replace(grid, d, steps), _replace(zeros, d, offset)


def _replace(t: tuple, i: int, v) -> tuple:
    return (*t[:i], v, *t[i + 1:])
