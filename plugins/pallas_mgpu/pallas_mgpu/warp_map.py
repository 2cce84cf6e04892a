"""``plgpu.warp_map(f)``: runs ``f(warp_id)`` once per warp of the current
warpgroup (warp ids 0..3), as JAX's helper does: a ``WarpMesh`` over a fresh
axis name whose ``core_map`` traces ``f`` with that axis bound.
"""

from __future__ import annotations

from jax import lax

from pallas_mgpu.warp_mesh import WarpMesh


class _WarpAxis:
    """A fresh, unique axis name for one warp map (never clashes with the kernel's)."""

    def __repr__(self):
        return f"warp_map axis {id(self):#x}"


def warp_map(f, /) -> None:
    """Calls ``f(warp_id)`` in each of the 4 warps of the warpgroup."""
    mesh = WarpMesh(axis_name=_WarpAxis())
    mesh.core_map()(lambda: f(lax.axis_index(mesh.axis_name)))
