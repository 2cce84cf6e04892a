"""An ``emit_pipeline`` BlockSpec's index map as a jaxpr, and back.

The map is traced over the pipeline's grid indices into one int32 output
per block dim (two, start and size, for a ``BoundedSlice`` dim). An
``Indirect`` dim's index is a 1-D array of indices, or a view of an index
Ref (``idx_ref.at[i]``, as JAX's maps may return): a view cannot be a jaxpr
output, so its indexers' leaves are, its Ref becomes an extra const of the
map, and ``index_map`` puts the view together again when replayed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

import pallas_frontend as pf
from pallas_frontend import backend_api
from pallas_tpu.view_parts import join_view, split_view


def _is_view(v) -> bool:
    return hasattr(v, "transforms") and hasattr(v, "ref")


def trace_index_map(spec: pf.BlockSpec, n_grid: int, dims):
    """``(jaxpr, consts, views)``: ``views[d]`` is ``(tree, n_leaves)`` for a
    dim whose index is a Ref view (its Ref the next of the consts appended
    after the traced ones, in dim order), else None."""
    views, view_refs = [None] * len(dims), []

    def flat(*idx):
        out = spec.index_map(*idx)
        out = out if isinstance(out, (tuple, list)) else (out,)
        if len(out) != len(dims):
            raise ValueError(f"emit_pipeline: the index map returned {len(out)} indices for a "
                             f"block of {len(dims)} dims.")
        leaves = []
        for k, (v, d) in enumerate(zip(out, dims)):
            if isinstance(d, pf.BoundedSlice):
                if not (hasattr(v, "start") and hasattr(v, "size")):
                    raise ValueError("emit_pipeline: Must return a pl.ds from the index_map "
                                     f"for a BoundedSlice dimension (start, size), got {v!r}.")
                leaves += [jnp.asarray(v.start, jnp.int32), jnp.asarray(v.size, jnp.int32)]
            elif isinstance(d, pf.Indirect) and _is_view(v):
                ref, transforms = split_view(v)
                parts, tree = jax.tree.flatten(transforms)
                views[k] = (tree, len(parts))
                view_refs.append(ref)
                leaves += [jnp.asarray(p, jnp.int32) for p in parts]
            elif isinstance(d, pf.Indirect):
                leaves.append(jnp.asarray(v, jnp.int32))
            elif _is_view(v):
                raise TypeError(f"emit_pipeline: the index map returned a Ref view {v!r} for "
                                f"a {d!r} dim; only a pl.Indirect dim takes an index Ref.")
            else:
                leaves.append(jnp.asarray(v, jnp.int32))
        return leaves
    # what the map reads from the kernel (e.g. a scoped SMEM Ref of slice
    # bounds) comes back as consts: operands of the pipeline, as the body's
    jaxpr, consts = backend_api.trace_body(
        flat, [jax.core.ShapedArray((), jnp.int32)] * n_grid, traced_for="emit_pipeline index_map")
    return jaxpr, [*consts, *view_refs], tuple(views)


def index_map(jaxpr, dims, views, closed, eval_jaxpr):
    """A Python index map replaying ``jaxpr`` over JAX's values: ``closed``
    its consts (the views' Refs last), ``eval_jaxpr(jaxpr, *args)`` the
    evaluator; BoundedSlice dims get ``pl.ds`` back, view dims their view."""
    from jax.experimental import pallas as pl
    views = views or (None,) * len(dims)
    n_refs = sum(v is not None for v in views)
    consts, refs = list(closed[:len(closed) - n_refs]), list(closed[len(closed) - n_refs:])

    def fn(*idx):
        flat, ref_of = iter(eval_jaxpr(jaxpr, *consts, *idx)), iter(refs)
        out = []
        for d, view in zip(dims, views):
            if isinstance(d, pf.BoundedSlice):
                out.append(pl.ds(next(flat), next(flat)))
            elif view is not None:
                tree, n = view
                transforms = jax.tree.unflatten(tree, [next(flat) for _ in range(n)])
                out.append(join_view((next(ref_of), tuple(transforms))))
            else:
                out.append(next(flat))
        return tuple(out)
    return fn
