"""``plgpu.WarpMesh``: ``pl.core_map(WarpMesh(axis_name=...))`` inside a
Mosaic GPU kernel body runs the decorated function once per warp of the
warpgroup (4 warps), each reading its warp with ``lax.axis_index(axis_name)``.

The function is traced here, where it is decorated (the warp axis bound),
and recorded as one ``mgpu_warp_map`` equation whose operands are what it
closes over (Refs, values). The backend replays it with JAX's
``pl.core_map(plgpu.WarpMesh(...))`` around the traced body.

JAX's ``mpmd_map([(WarpMesh(...), fn)])()`` (JAX's own tests call it) takes
this mesh too: it traces ``fn`` itself into an ``mpmd_map`` equation, which
the backend replays with JAX's mesh and ``mpmd_map`` around the traced body.
"""

from __future__ import annotations

import contextlib
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

    @property
    def core_type(self) -> str:
        """``"gpu"``: what JAX's ``mpmd_map`` asks of a mesh's cores."""
        return "gpu"

    @contextlib.contextmanager
    def tracing_context(self):
        """What ``mpmd_map`` enters while tracing a function over this mesh:
        nothing beyond the warp axis, which ``mpmd_map`` binds itself."""
        yield

    def discharges_effect(self, effect) -> bool:
        """No effect of the per-warp function stays inside the warp map."""
        return False

    def check_is_compatible_with(self, other_mesh):
        """``mpmd_map`` asks this of several meshes; a kernel maps over one WarpMesh."""
        raise NotImplementedError("mpmd_map inside a Mosaic GPU kernel takes one WarpMesh, "
                                  f"not WarpMesh together with {other_mesh!r}.")

    def to_jax(self):
        """JAX's ``plgpu.WarpMesh`` over the same axis name."""
        from jax.experimental.pallas import mosaic_gpu as plgpu
        return plgpu.WarpMesh(axis_name=self.axis_name)

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


def _replay_mpmd_map(eqn, invals):
    """JAX's ``mpmd_map`` equation, with JAX's meshes, around bodies that
    replay the traced per-mesh jaxprs (they hold this plugin's primitives)."""
    p = eqn.params
    pairs = []
    for mesh, jaxpr in zip(p["meshes"], p["jaxprs"]):
        # A warp map inside a kernel only closes over the kernel's Refs and
        # scalars (JAX's Mosaic GPU lowering and interpreter hand it nothing else).
        if p["out_avals"] or len(jaxpr.invars) != len(invals):
            raise NotImplementedError(
                "mpmd_map inside a Mosaic GPU kernel: out_types and scratch_types are not "
                "supported (as in JAX); close over the kernel's Refs, or allocate buffers "
                "with pl.run_scoped around the mpmd_map.")

        def body(jaxpr=jaxpr):
            evaluate.eval_jaxpr(jaxpr, (), *invals)
        pairs.append((mesh.to_jax() if isinstance(mesh, WarpMesh) else mesh, body))
    _jax_private.mpmd_map(pairs)()
    return []


evaluate.register_rule(_jax_private.mpmd_map_primitive(), _replay_mpmd_map)
del jax
