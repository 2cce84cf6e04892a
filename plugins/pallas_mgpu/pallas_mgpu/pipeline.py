"""``emit_pipeline`` inside ``pallas_mgpu.kernel`` bodies (the warp-specialized
variant: ``warp_pipeline.py``).

The pipeline body is traced *here*, at kernel-trace time, over SMEM block
Refs; the index maps are traced over the pipeline indices. What either
closes over (Refs, CTA coordinates) becomes explicit operands. The kernel
jaxpr holds one ``mgpu_pipeline`` equation carrying both, and the backend
replays it with JAX's function of the same name, whose body and index maps
evaluate the traced jaxprs; a carry (``init_carry``) is an operand and the
equation's results.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import pallas_frontend as pf
from pallas_frontend import backend_api
from pallas_frontend.backend_api import kernel_primitive

from pallas_mgpu import _jax_private, evaluate
from pallas_mgpu.memory import SMEM, MemorySpace, _check_transforms, transforms_to_jax
from pallas_mgpu.ops import OWNER, _OrderedOp, _is_ref, _join, _split_view

mgpu_pipeline_p = kernel_primitive("mgpu_pipeline", owner=OWNER, multiple_results=True)


def _abstract_eval(*avals, ref_positions, carry_avals=(), **params):
    effects = backend_api.ref_effects(reads=ref_positions, writes=ref_positions)
    effects.add(_OrderedOp())
    return list(carry_avals), effects


mgpu_pipeline_p.def_effectful_abstract_eval(_abstract_eval)


class OOBFillMode(enum.IntEnum):
    """What a pipelined TMA read past the end of an array yields (JAX's names)."""
    UNDEFINED = 0
    PROMISE_IN_BOUNDS = 1
    ZEROS = 2

    def to_jax(self):
        """The same mode as Mosaic GPU's own ``OOBFillMode``, for JAX's lowering."""
        from jax.experimental.mosaic import gpu as mgpu
        return mgpu.OOBFillMode(int(self))


@dataclasses.dataclass
class BlockSpec(pf.BlockSpec):
    """A pipelined operand's block: its shape (``None`` squeezes a dim), the
    index map from the pipeline indices to block indices, and its SMEM
    transforms. Fields as JAX 0.12's ``plgpu.BlockSpec``, which is also a
    ``pl.BlockSpec``: ``pl.pallas_call`` takes it (the transforms, delay and
    collective axes are pipelining hints that ``pallas_call`` leaves to the
    backend's own layout choice)."""
    transforms: tuple = ()
    delay_release: int = 0
    collective_axes: tuple = ()
    oob_fill_mode: OOBFillMode = OOBFillMode.ZEROS

    def __post_init__(self):
        super().__post_init__()
        self.oob_fill_mode = OOBFillMode(int(self.oob_fill_mode))
        self.transforms = _check_transforms(self.transforms, "BlockSpec")
        axes = self.collective_axes
        self.collective_axes = (axes,) if isinstance(axes, str) else tuple(axes or ())
        if self.delay_release < 0:
            raise ValueError(f"BlockSpec: delay_release must be >= 0, got {self.delay_release}")


def _kernel_shape(spec: BlockSpec, ref) -> tuple[int, ...]:
    if spec.block_shape is None:
        return tuple(ref.shape)
    if len(spec.block_shape) != len(ref.shape):
        raise ValueError(f"emit_pipeline: block shape {spec.block_shape} has not one entry per "
                         f"dim of the operand's shape {tuple(ref.shape)}.")
    # pl.Element(n) (the index map gives an element offset) is a block of n
    return tuple(int(getattr(d, "block_size", d)) for d in spec.block_shape if d is not None)


def _trace_index_map(spec: BlockSpec, n: int, rank: int | None = None):
    # without a block shape the block is the whole operand (of ``rank`` dims)
    dims = len(spec.block_shape) if spec.block_shape is not None else rank

    def flat(*idx):
        out = spec.index_map(*idx) if spec.index_map is not None else (0,) * dims
        out = out if isinstance(out, (tuple, list)) else (out,)
        return [jnp.asarray(v, jnp.int32) for v in out]
    return backend_api.trace_body(flat, [jax.core.ShapedArray((), jnp.int32)] * n,
                                  traced_for="emit_pipeline index_map")


def _split_grid(grid) -> tuple[tuple, list]:
    """``grid`` as its static sizes (None where traced) and the traced ones (int32)."""
    static, traced = [], []
    for g in grid:
        if isinstance(g, (int, np.integer)):
            static.append(int(g))
        else:
            if jnp.shape(g) != ():
                raise TypeError(f"emit_pipeline: grid sizes must be scalars, got {g!r}.")
            static.append(None)
            traced.append(jnp.asarray(g, jnp.int32))
    return tuple(static), traced


def _join_grid(static_grid, sizes) -> tuple:
    it = iter(sizes)
    return tuple(next(it) if g is None else g for g in static_grid)


def _emit(variant: str, body, grid, in_specs, out_specs, static: dict, init_carry=None):
    in_specs = [in_specs] if isinstance(in_specs, BlockSpec) else list(in_specs)
    out_specs = [out_specs] if isinstance(out_specs, BlockSpec) else list(out_specs)
    # a traced grid size (e.g. a group's block count read from GMEM) is an operand
    static_grid, sizes = _split_grid(grid)
    carry, carry_tree = jax.tree.flatten(init_carry)
    if any(_is_ref(x) for x in carry):
        raise TypeError("emit_pipeline: init_carry holds values, not Refs; close over a Ref "
                        "instead.")
    carry_avals = tuple(jax.core.ShapedArray(jnp.shape(x), jnp.result_type(x)) for x in carry)

    def pipeline(*gmem_refs):
        specs = in_specs + out_specs
        if len(gmem_refs) != len(specs):
            raise ValueError(f"emit_pipeline: {len(specs)} BlockSpecs but {len(gmem_refs)} operands.")
        block_avals = [jax.ref.AbstractRef(
            jax.core.ShapedArray(_kernel_shape(s, r), np.dtype(r.dtype)),
            memory_space=SMEM(_kernel_shape(s, r), r.dtype, transforms=s.transforms))
            for s, r in zip(specs, gmem_refs)]
        idx_avals = [jax.core.ShapedArray((), jnp.int32)] * len(static_grid)

        n = len(static_grid) + len(block_avals)

        def flat_body(*args):
            idx, blocks = tuple(args[:len(static_grid)]), args[len(static_grid):n]
            if init_carry is None:
                body(idx, *blocks)
                return []
            out = body(idx, *blocks, jax.tree.unflatten(carry_tree, args[n:]))
            leaves, tree = jax.tree.flatten(out)
            if tree != carry_tree or any((jnp.shape(x), jnp.result_type(x)) != (a.shape, a.dtype)
                                         for x, a in zip(leaves, carry_avals)):
                raise TypeError("emit_pipeline: the body must return a carry of the structure "
                                "and types of init_carry.")
            return leaves
        body_jaxpr, body_consts = backend_api.trace_body(
            flat_body, idx_avals + block_avals + list(carry_avals), traced_for="emit_pipeline body")
        maps = [_trace_index_map(s, len(static_grid), len(r.shape))
                for s, r in zip(specs, gmem_refs)]
        operands = [_split_view(r) for r in gmem_refs] + [list(body_consts)] + \
            [list(c) for _, c in maps] + [sizes, carry]
        flat, tree = jax.tree.flatten(operands)
        outs = mgpu_pipeline_p.bind(
            *flat, tree=tree, variant=variant, grid=static_grid, body=body_jaxpr,
            index_maps=tuple(j for j, _ in maps), num_in=len(in_specs),
            specs=tuple(spec_record(s) for s in specs),
            static=tuple(sorted(static.items())), carry_avals=carry_avals,
            carry_tree=carry_tree if init_carry is not None else None,
            ref_positions=tuple(i for i, x in enumerate(flat) if _is_ref(x)))
        return None if init_carry is None else jax.tree.unflatten(carry_tree, outs)
    return pipeline


def emit_pipeline(body, *, grid, in_specs=(), out_specs=(), max_concurrent_steps: int = 1,
                  init_carry=None):
    """A TMA pipeline over GMEM operands inside a kernel: ``body(indices,
    *in_blocks, *out_blocks)`` runs once per point of ``grid`` on SMEM blocks
    fetched ``max_concurrent_steps`` steps ahead. With ``init_carry`` the body
    also takes the carry and returns the next one; the pipeline returns the
    last."""
    return _emit("emit_pipeline", body, grid, in_specs, out_specs,
                 {"max_concurrent_steps": int(max_concurrent_steps)}, init_carry)


def spec_record(spec: BlockSpec) -> tuple:
    """What the backend needs of a pipelined operand's BlockSpec (hashable)."""
    return (spec.block_shape, spec.transforms, spec.delay_release, spec.collective_axes,
            spec.oob_fill_mode, spec.memory_space)


def jax_block_spec(record: tuple, index_map_jaxpr, consts):
    """JAX's ``plgpu.BlockSpec`` for a recorded spec, its index map replaying
    the traced one."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu
    shape, transforms, delay, axes, oob, space = record

    def index_map(*idx):
        # a constant block index comes back as a 0-d array (the jaxpr's literal); JAX's
        # pipeline scales it into a NumPy scalar, which JAX's Mosaic GPU lowering does
        # not take as a slice start: give back the Python int the user's map returned
        return tuple(int(v) if isinstance(v, (np.ndarray, np.integer)) and np.ndim(v) == 0
                     and np.issubdtype(v.dtype, np.integer) else v
                     for v in evaluate.eval_closed(index_map_jaxpr, *consts, *idx))
    block = None if shape is None else tuple(pl.Squeezed() if d is None else d for d in shape)
    kw = {"collective_axes": axes} if axes else {}
    if isinstance(space, MemorySpace):     # SMEM (the default) or GMEM (left where it is)
        kw["memory_space"] = getattr(plgpu, space.name)
    # no block shape: JAX's pipeline copies the whole operand (it takes no index map then)
    return _jax_private.jax_block_spec(block, index_map if block is not None else None,
                                       transforms=transforms_to_jax(transforms),
                                       delay_release=delay, oob_fill_mode=oob.to_jax(), **kw)


def _replay(eqn, invals):
    from jax.experimental.pallas import mosaic_gpu as plgpu
    p = eqn.params
    n_specs = len(p["specs"])
    parts = jax.tree.unflatten(p["tree"], invals)
    gmem = [_join(x) for x in parts[:n_specs]]
    body_consts, map_consts = parts[n_specs], parts[n_specs + 1:-2]
    sizes, carry = parts[-2], parts[-1]
    carry_tree = p["carry_tree"]

    def jax_body(indices, *args):
        if carry_tree is None:
            evaluate.eval_closed(p["body"], *body_consts, *indices, *args)
            return None
        *blocks, last = args
        outs = evaluate.eval_closed(p["body"], *body_consts, *indices, *blocks,
                                    *jax.tree.leaves(last))
        return jax.tree.unflatten(carry_tree, outs)

    specs = [jax_block_spec(p["specs"][k], p["index_maps"][k], map_consts[k])
             for k in range(n_specs)]
    fn = getattr(plgpu, p["variant"])
    static = {k: v for k, v in p["static"] if v is not None}
    if carry_tree is not None:
        static["init_carry"] = jax.tree.unflatten(carry_tree, carry)
    final = fn(jax_body, grid=_join_grid(p["grid"], sizes), in_specs=specs[:p["num_in"]],
               out_specs=specs[p["num_in"]:], **static)(*gmem)
    return [] if carry_tree is None else jax.tree.leaves(final)


evaluate.register_rule(mgpu_pipeline_p, _replay)
