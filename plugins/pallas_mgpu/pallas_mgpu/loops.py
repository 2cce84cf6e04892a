"""``plgpu.nd_loop``: a persistent-kernel loop that deals the points of a
grid out to the members of ``collective_axes`` (usually the CTAs), round
robin, as JAX's helper of the same name does.

Only ``lax`` is used (``axis_index``/``axis_size`` of the kernel's names and
a ``fori_loop``), so the frontend traces it like any other kernel code and
the backend replays the loop.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax


@dataclasses.dataclass(frozen=True, eq=False)
class NDLoopInfo:
    """What one step of ``nd_loop`` works on: ``index`` (one int32 per grid
    dim), ``local_index`` (the step number of this member) and
    ``num_local_steps`` (how many steps this member runs)."""
    index: tuple
    local_index: Any
    num_local_steps: Any


def _grid_with_tiles(grid, tiling):
    if not tiling:
        return tuple(grid)
    tiling = tuple(int(t) for t in tiling)
    if len(tiling) != len(grid):
        raise ValueError(f"nd_loop: tiling {tiling} needs one entry per grid dim of {tuple(grid)}.")
    for dim, tile in zip(grid, tiling):
        if isinstance(dim, (int, np.integer)) and dim % tile:
            raise ValueError(f"nd_loop: tiling {tiling} does not divide the grid {tuple(grid)}; "
                             "pick tiles that divide each dim.")
    # walk whole tiles first, then the points inside a tile
    return (*(dim // tile for dim, tile in zip(grid, tiling)), *tiling)


def _unflatten(step, dims):
    """Row-major coordinates of the flat ``step`` in a grid of ``dims``."""
    coords = []
    for dim in reversed(dims):
        dim = lax.convert_element_type(dim, step.dtype)
        coords.append(lax.rem(step, dim))
        step = lax.div(step, dim)
    return coords[::-1]


def nd_loop(grid, *, collective_axes, tiling=None, init_carry=None):
    """Decorator: runs ``body(loop_info)`` (or ``carry = body(loop_info,
    carry=carry)`` when ``init_carry`` is given) for the grid points this
    member of ``collective_axes`` owns: flat points ``me, me + n, me + 2n, ...``
    where ``n`` is the size of the axes. Returns the final carry (or None)."""
    me = lax.axis_index(collective_axes)
    members = lax.axis_size(collective_axes)
    dims = _grid_with_tiles(tuple(grid), tiling)
    total = 1
    for dim in dims:
        total = total * dim
    total = jnp.asarray(total).astype(me.dtype)
    members = jnp.asarray(members).astype(me.dtype)
    # every member runs total // n steps; the first total % n run one more
    steps = lax.div(total, members) + (me < lax.rem(total, members)).astype(me.dtype)

    def decorator(body):
        def one_step(k, carry):
            index = _unflatten(k * members + me, dims)
            if tiling:
                n = len(tiling)
                index = [inner + outer * int(t)
                         for outer, inner, t in zip(index[:n], index[n:], tiling)]
            info = NDLoopInfo(index=tuple(index), local_index=k, num_local_steps=steps)
            if init_carry is None:
                body(info)
                return None
            return body(info, carry=carry)
        return lax.fori_loop(0, steps, one_step, init_carry)
    return decorator
