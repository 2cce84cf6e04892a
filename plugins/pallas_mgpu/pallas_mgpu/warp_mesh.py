"""``plgpu.WarpMesh``: ``pl.core_map(WarpMesh(axis_name=...))`` inside a
Mosaic GPU kernel body runs the decorated function once per warp of the
warpgroup (4 warps), each reading its warp with ``lax.axis_index(axis_name)``.

The function is traced here, where it is decorated (the warp axis bound),
and recorded as one ``mgpu_warp_map`` equation whose operands are what it
closes over (Refs, values). The backend replays it with JAX's
``pl.core_map(plgpu.WarpMesh(...))`` around the traced body.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

from pallas_frontend import backend_api
from pallas_frontend.backend_api import kernel_primitive

from pallas_mgpu import _jax_private, evaluate
from pallas_mgpu.ops import OWNER, _OrderedOp, _is_ref

WARPS_PER_WARPGROUP = 4
mgpu_warp_map_p = kernel_primitive("mgpu_warp_map", owner=OWNER, multiple_results=True)


class _Body:
    """Holds the traced body. Not a jaxpr param on purpose: JAX's jaxpr checks
    would look for the warp axis outside the map, where it is not bound."""

    def __init__(self, jaxpr):
        self.jaxpr = jaxpr


def _abstract_eval(*avals, body, axis_name, ref_positions):
    effects = backend_api.ref_effects(reads=ref_positions, writes=ref_positions)
    effects.add(_OrderedOp())
    return [], effects


mgpu_warp_map_p.def_effectful_abstract_eval(_abstract_eval)


@dataclasses.dataclass(frozen=True, kw_only=True)
class WarpMesh:
    """The 4 warps of the current warpgroup, as a mesh over ``axis_name``."""
    axis_name: Any

    @property
    def shape(self) -> dict:
        """``{axis_name: 4}``: one point per warp of the warpgroup."""
        return {self.axis_name: WARPS_PER_WARPGROUP}

    def core_map(self, **options):
        """The frontend's ``pl.core_map(mesh, ...)`` for this mesh: a decorator
        that runs the function per warp, inside the enclosing kernel."""
        given = {k: v for k, v in options.items() if v not in (None, False, (), {})}
        if given:
            raise TypeError(f"pl.core_map(WarpMesh): {sorted(given)} belong to the enclosing "
                            "kernel, not to a warp map.")

        def decorator(fn):
            def flat():
                fn()
                return []
            with _jax_private.bind_axis_names({self.axis_name: WARPS_PER_WARPGROUP}):
                jaxpr, consts = backend_api.trace_body(flat, [], traced_for="pl.core_map(WarpMesh)")
            mgpu_warp_map_p.bind(*consts, body=_Body(jaxpr), axis_name=self.axis_name,
                                 ref_positions=tuple(i for i, c in enumerate(consts) if _is_ref(c)))
        return decorator


def _replay(eqn, invals):
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu
    jaxpr = eqn.params["body"].jaxpr

    @pl.core_map(plgpu.WarpMesh(axis_name=eqn.params["axis_name"]))
    def _():
        evaluate.eval_jaxpr(jaxpr, (), *invals)
    return []


evaluate.register_rule(mgpu_warp_map_p, _replay)
del jax
