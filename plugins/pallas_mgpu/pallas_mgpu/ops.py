"""The Mosaic GPU kernel operations (TMA copies, barriers, WGMMA, tcgen05,
registers, semaphores), recorded in the kernel jaxpr by ONE primitive.

Each user function binds ``mgpu_op`` with the name of the operation, its
operands flattened (a Ref view ``ref.at[...]`` travels as its Ref plus its
transforms), its static keywords and the types of its results. The backend
replays the equation with JAX's ``plgpu`` function of that name
(``_replay``), so every operation has exactly JAX's semantics, in interpret
mode and when compiled. Ref operands are assumed read and written.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.extend.core  # noqa: F401  (jax.extend.core.Effect)
import numpy as np

from pallas_frontend import backend_api
from pallas_frontend.backend_api import kernel_primitive

from pallas_mgpu import _jax_private, evaluate

OWNER = "mgpu"
mgpu_op_p = kernel_primitive("mgpu_op", owner=OWNER, multiple_results=True)


@dataclasses.dataclass(frozen=True)
class _View:
    """A Ref view split into its Ref and its transforms (views are not pytrees)."""
    ref: Any
    transforms: tuple


jax.tree_util.register_pytree_node(
    _View, lambda v: ((v.ref, v.transforms), None), lambda _, c: _View(*c))


def _split_view(x):
    if isinstance(x, _jax_private.transformed_ref_type()):
        return _View(x.ref, tuple(x.transforms))
    return x


def _is_ref(x) -> bool:
    # a view (ref.at[...]) is a Ref too; jax.typeof refuses it
    if isinstance(x, _jax_private.transformed_ref_type()):
        return True
    try:
        return isinstance(jax.typeof(x), jax.ref.AbstractRef)
    except TypeError:
        return False


def _abstract_eval(*avals, op, tree, static, ref_positions, out_avals):
    effects = backend_api.ref_effects(reads=ref_positions, writes=ref_positions)
    effects.add(_OrderedOp())
    return list(out_avals), effects


class _OrderedOp(jax.extend.core.Effect):
    """Keeps Mosaic GPU operations alive and in program order (a barrier wait
    or ``commit_smem`` has no data dependence JAX could see)."""

    def __eq__(self, other):
        return isinstance(other, _OrderedOp)

    def __hash__(self):
        return hash(_OrderedOp)


mgpu_op_p.def_effectful_abstract_eval(_abstract_eval)
_jax_private.allow_effect_in_kernels(_OrderedOp)


def bind(op: str, *args, out_avals=(), **static):
    """Records ``plgpu.<op>(*args, **static)``; returns its results (a list)."""
    if op not in _SPECIAL and op not in ADAPTERS:
        _jax_private.plgpu_function(op)    # refused here, at the user's line, where JAX lacks it
    parts = tuple(_split_view(a) for a in args)
    flat, tree = jax.tree.flatten(parts)        # None (an absent operand) has no leaves
    ref_positions = tuple(i for i, x in enumerate(flat) if _is_ref(x))
    for k, v in static.items():
        hash(v)  # static keywords travel as jaxpr params: they must be hashable
    return mgpu_op_p.bind(*flat, op=op, tree=tree, static=tuple(sorted(static.items())),
                          ref_positions=ref_positions, out_avals=tuple(out_avals))


def _join(part):
    if isinstance(part, _View):
        return _jax_private.view(part.ref, part.transforms)
    return part


def _static_to_jax(value):
    to_jax = getattr(value, "to_jax", None)
    return to_jax() if callable(to_jax) else value


def _replay(eqn, invals):
    p = eqn.params
    args = [_join(a) for a in jax.tree.unflatten(p["tree"], invals)]
    kwargs = {k: _static_to_jax(v) for k, v in p["static"]}
    fn = _SPECIAL.get(p["op"]) or ADAPTERS.get(p["op"]) or _jax_private.plgpu_function(p["op"])
    out = fn(*args, **kwargs)
    if not p["out_avals"]:
        return []
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _semaphore_signal_parallel(*flat, tree_signals=None):
    from jax.experimental.pallas import mosaic_gpu as plgpu
    n = len(flat) // 3
    sigs = [plgpu.SemaphoreSignal(flat[3 * i], device_id=flat[3 * i + 1], inc=flat[3 * i + 2])
            for i in range(n)]
    plgpu.semaphore_signal_parallel(*sigs)


_SPECIAL = {"semaphore_signal_parallel": _semaphore_signal_parallel}
# op name -> the function replaying it, where JAX's plgpu function of that name
# takes its arguments otherwise (filled in by primitives.py)
ADAPTERS: dict = {}
evaluate.register_rule(mgpu_op_p, _replay)


def aval_of(x) -> jax.core.ShapedArray:
    return jax.core.ShapedArray(tuple(x.shape), np.dtype(x.dtype))
