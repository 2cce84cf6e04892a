"""``plgpu.dynamic_scheduling_loop``: JAX's loop over the grid points a CTA
claims at run time through Blackwell's cluster launch control (the kernel is
launched over the whole logical grid; each CTA keeps cancelling launches of
CTAs not yet started and runs their work).

The body is traced here, at kernel-trace time, over the grid indices, the
step number and the carry; what it closes over becomes operands of one
``mgpu_dynamic_scheduling_loop`` equation. The backend replays it with JAX's
function of the same name, whose body evaluates the traced one, so the
cancellation protocol (its scratch buffers, barriers and fences) is JAX's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from pallas_frontend import backend_api
from pallas_frontend.backend_api import kernel_primitive

from pallas_mgpu import evaluate
from pallas_mgpu.loops import NDLoopInfo
from pallas_mgpu.ops import OWNER, _OrderedOp, _is_ref

mgpu_dynamic_loop_p = kernel_primitive("mgpu_dynamic_scheduling_loop", owner=OWNER,
                                       multiple_results=True)


def _abstract_eval(*avals, ref_positions, out_avals, **params):
    effects = backend_api.ref_effects(reads=ref_positions, writes=ref_positions)
    effects.add(_OrderedOp())
    return list(out_avals), effects


mgpu_dynamic_loop_p.def_effectful_abstract_eval(_abstract_eval)


def _axes(names) -> tuple:
    return (names,) if isinstance(names, str) else tuple(
        a if isinstance(a, str) else tuple(a) for a in names)


def dynamic_scheduling_loop(grid_names, thread_axis=None, cluster_axes=(), init_carry=None):
    """Decorator: runs ``body(loop_info)`` (``carry = body(loop_info, carry=carry)``
    with ``init_carry``) for every grid point this CTA claims, ``loop_info.index``
    holding one int32 per name of ``grid_names``; returns the final carry (or
    None). ``thread_axis`` must be given when the kernel has several threads,
    ``cluster_axes`` (all of them) when its cluster is larger than one CTA."""
    grid_names = _axes(grid_names)
    cluster_axes = _axes(cluster_axes)
    leaves, tree = jax.tree.flatten(init_carry)
    if any(_is_ref(x) for x in leaves):
        raise TypeError("dynamic_scheduling_loop: the carry holds values, not Refs; close over "
                        "a Ref instead.")
    carry_avals = [jax.core.ShapedArray(jnp.shape(x), jnp.result_type(x)) for x in leaves]
    n = len(grid_names)

    def decorator(body):
        def flat_body(*args):
            info = NDLoopInfo(index=tuple(args[:n]), local_index=args[n], num_local_steps=None)
            if init_carry is None:
                body(info)
                return []
            out = body(info, carry=jax.tree.unflatten(tree, args[n + 1:]))
            out_leaves, out_tree = jax.tree.flatten(out)
            if out_tree != tree or any((jnp.shape(o), jnp.result_type(o)) != (a.shape, a.dtype)
                                       for o, a in zip(out_leaves, carry_avals)):
                raise TypeError(f"dynamic_scheduling_loop: the body of {grid_names} must return "
                                "a carry of the structure and types of init_carry.")
            return out_leaves
        index_avals = [jax.core.ShapedArray((), jnp.int32)] * (n + 1)
        traced, consts = backend_api.trace_body(flat_body, index_avals + carry_avals,
                                                traced_for="dynamic_scheduling_loop body")
        flat = [*consts, *leaves]
        outs = mgpu_dynamic_loop_p.bind(
            *flat, body=traced, n_consts=len(consts), grid_names=grid_names,
            thread_axis=thread_axis, cluster_axes=cluster_axes, tree=tree,
            has_carry=init_carry is not None, out_avals=tuple(carry_avals),
            ref_positions=tuple(i for i, x in enumerate(flat) if _is_ref(x)))
        return None if init_carry is None else jax.tree.unflatten(tree, outs)
    return decorator


def _replay(eqn, invals):
    from jax.experimental.pallas import mosaic_gpu as plgpu
    p = eqn.params
    consts, leaves = invals[:p["n_consts"]], invals[p["n_consts"]:]

    def jax_body(info, carry=None):
        outs = evaluate.eval_closed(p["body"], *consts, *info.index, info.local_index,
                                    *jax.tree.leaves(carry))
        return jax.tree.unflatten(p["tree"], outs) if p["has_carry"] else None
    result = plgpu.dynamic_scheduling_loop(
        p["grid_names"], thread_axis=p["thread_axis"], cluster_axes=p["cluster_axes"],
        init_carry=jax.tree.unflatten(p["tree"], leaves) if p["has_carry"] else None)(jax_body)
    return jax.tree.leaves(result) if p["has_carry"] else []


evaluate.register_rule(mgpu_dynamic_loop_p, _replay)
