"""``emit_pipeline``: a software pipeline over HBM Refs, inside a kernel.

The user's body is traced *here*, at kernel-trace time, into a jaxpr over
VMEM block Refs; index maps become jaxprs over the pipeline's grid indices.
The kernel jaxpr then holds one ``tpu_emit_pipeline`` equation carrying them,
so the backend rebuilds the pipeline from the KernelIR alone (JAX's
``pltpu.emit_pipeline`` with a body that replays the traced one). Inside a
TensorCore kernel, ours' own schedule is traced in place instead; inside a
SparseCore kernel the equation is recorded (JAX's pipeline when compiled) and
carries ours' traced schedule too, which the SparseCore CPU model runs.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

import pallas_frontend as pf
from pallas_frontend.backend_api import KernelIR, kernel_primitive, tracing_kernel

from pallas_frontend import backend_api
from pallas_tpu import _jax_private, pipeline_cores, pipeline_maps, pipeline_schedule, sc_mesh
from pallas_tpu.buffered_ref import source_space
from pallas_tpu.memory import VMEM, MemorySpace
from pallas_tpu.primitives import OWNER, _effects, _flatten_with_effects, _is_ref, join_view
from pallas_tpu.spaces import block_memory_space

emit_pipeline_p = kernel_primitive("tpu_emit_pipeline", owner=OWNER, multiple_results=True)
emit_pipeline_p.def_effectful_abstract_eval(
    lambda *avals, effect_spec, **params: ([], _effects(effect_spec)))


def uses_pipeline(kernel: KernelIR) -> bool:
    return any(e.primitive is emit_pipeline_p for e in kernel.iter_equations())


def _is_spec(x) -> bool:
    """Ours or JAX's own BlockSpec (JAX's fuser builds JAX's from ours)."""
    return isinstance(x, pf.BlockSpec) or all(
        hasattr(x, a) for a in ("block_shape", "index_map", "memory_space", "pipeline_mode"))


def _as_ours(spec):
    """A JAX BlockSpec as ours (its TPU memory space as ours, by name); else unchanged."""
    if isinstance(spec, pf.BlockSpec) or not _is_spec(spec):
        return spec
    space = spec.memory_space
    if space is not None and not isinstance(space, MemorySpace):
        # by name: JAX 0.10 does not export its TPU MemorySpace class to compare with
        space = MemorySpace.__members__.get(getattr(space, "name", None), space)
    return pf.BlockSpec(spec.block_shape, spec.index_map, memory_space=space,
                        pipeline_mode=spec.pipeline_mode)


def _spec_list(specs) -> list:
    if isinstance(specs, pf.BlockSpec):
        return [specs]
    return list(specs)


def _block_dims(spec: pf.BlockSpec, ref) -> tuple:
    """The spec's block dims as the frontend's kinds (an int is Blocked, None Squeezed)."""
    shape = tuple(ref.shape) if spec.block_shape is None else tuple(spec.block_shape)
    dims = []
    for d in shape:
        if d is None or isinstance(d, pf.Squeezed):
            dims.append(pf.squeezed)
        elif isinstance(d, (int, np.integer)):
            dims.append(pf.Blocked(int(d)))
        elif isinstance(d, (pf.Blocked, pf.BoundedSlice)):
            dims.append(d)
        elif isinstance(d, pf.Indirect):
            dims.append(pf.Indirect(d.block_size))     # (JAX's too)
        elif isinstance(d, pf.Element):
            if tuple(d.padding) != (0, 0):
                raise NotImplementedError(
                    f"emit_pipeline: Element block dims with padding ({d}) are not supported "
                    "(as in JAX's emit_pipeline); pad the operand instead.")
            dims.append(d)
        else:
            raise TypeError(f"emit_pipeline: {d!r} is not a block dim (an int, None, "
                            "pl.Squeezed(), pl.Element(n), pl.BoundedSlice(n) or pl.Indirect(n)).")
    if len(dims) != len(ref.shape):
        raise ValueError(f"emit_pipeline: block shape {shape} has {len(dims)} dims, the Ref "
                         f"{tuple(ref.shape)} has {len(ref.shape)}.")
    return tuple(dims)


def _schedulable(dims, ref, spec, sparsecore: bool) -> bool:
    """Whether the traced schedule takes these dims: blocks that divide the
    operand (no ragged edge), Indirect only in a SparseCore kernel (an indirect
    DMA), and BoundedSlice only over an operand already in the blocks' memory
    space (a view: no dynamic-size DMA)."""
    in_place = source_space(ref) is (spec.memory_space or VMEM)
    return all(isinstance(d, (pf.Squeezed, pf.Element))
               or (isinstance(d, pf.Indirect) and sparsecore)
               or (isinstance(d, pf.BoundedSlice) and in_place)
               or (isinstance(d, pf.Blocked) and n % d.block_size == 0)
               for d, n in zip(dims, ref.shape))


def _explicit_spec(spec: pf.BlockSpec, dims) -> pf.BlockSpec:
    """``spec`` with its block shape spelled out and an index map (JAX's defaults)."""
    shape = tuple(None if isinstance(d, pf.Squeezed) else
                  d.block_size if isinstance(d, pf.Blocked) else d for d in dims)
    index_map = spec.index_map or (lambda *_: (0,) * len(dims))
    return dataclasses.replace(spec, block_shape=shape, index_map=index_map)


def _block_space(spec: pf.BlockSpec, ref):
    """Where the body's block Ref lives: VMEM by default; an operand left in
    HBM (or ANY) is handed over as it is, in its own space."""
    space = spec.memory_space
    if space is None:
        return VMEM
    if space in (MemorySpace.HBM, MemorySpace.ANY, pf.MemorySpace.ANY):
        return source_space(ref) or space
    return space


def _block_shape(dims) -> tuple[int, ...]:
    """What the body's block Ref looks like: squeezed dims dropped."""
    return tuple(d.block_size for d in dims if not isinstance(d, pf.Squeezed))


def _static_or_traced(grid):
    """(static grid with None where a size is traced, the traced sizes)."""
    static, traced = [], []
    for g in grid:
        if isinstance(g, (int, np.integer)):
            if g <= 0:
                raise ValueError("emit_pipeline: All elements in the grid must be strictly "
                                 f"positive, but got grid={tuple(grid)}")
            static.append(int(g))
        else:
            static.append(None)
            traced.append(jnp.asarray(g, jnp.int32))
    return tuple(static), traced


def emit_pipeline(body, *, grid: Sequence, in_specs=(), out_specs=(), tiling=None,
                  core_axis=None, core_axis_name=None,
                  dimension_semantics: Sequence[str] | None = None, trace_scopes: bool = True,
                  no_pipelining: bool = False, output_wait_read_only: bool = False,
                  _explicit_indices: bool = False):
    """Returns ``pipeline(*in_refs, *out_refs)`` that runs ``body(*in_blocks,
    *out_blocks)`` over ``grid``, double-buffering the blocks the BlockSpecs
    select between the given (HBM/ANY) Refs, or views of them, and VMEM.

    Grid sizes may be traced int32 scalars. The keywords after ``out_specs``
    are JAX's; with ``_explicit_indices`` the body takes a ``PipelineStep``
    first (and ``pl.program_id`` stays the kernel's, as in JAX). ``in_specs``
    and ``out_specs`` may be pytrees matching the (pytree) operands."""
    static_grid, _ = _static_or_traced(grid)     # validates before any tracing
    in_specs, out_specs = jax.tree.map(_as_ours, (in_specs, out_specs), is_leaf=_is_spec)
    if core_axis is not None and core_axis_name is not None:
        raise ValueError("emit_pipeline: pass core_axis or core_axis_name, not both.")
    specs = _spec_list(in_specs) + _spec_list(out_specs)
    n_in = len(_spec_list(in_specs))
    options = (("tiling", tiling), ("core_axis", core_axis),
               ("core_axis_name", core_axis_name), ("trace_scopes", bool(trace_scopes)),
               ("no_pipelining", bool(no_pipelining)),
               ("output_wait_read_only", bool(output_wait_read_only)),
               ("_explicit_indices", bool(_explicit_indices)))

    def pipeline(*refs, allocations=None, scratches=None):
        if not all(isinstance(sp, pf.BlockSpec) for sp in specs):
            return _flattened(refs, allocations, scratches)
        if allocations is not None or scratches is not None:
            return _with_allocations(refs, allocations, scratches)
        if len(refs) != len(specs):
            raise TypeError(f"emit_pipeline: {len(specs)} BlockSpecs but {len(refs)} Refs given.")
        dims = [_block_dims(s, r) for s, r in zip(specs, refs)]
        schedule = None
        split = core_axis is not None or core_axis_name is not None
        sc = tracing_kernel() and sc_mesh.tracing_sparsecore_kernel()
        # (a SparseCore kernel's schedule may split the grid over its subcores, and gather)
        if tracing_kernel() and (not split or sc) and all(
                _schedulable(d, r, sp, sc) for d, r, sp in zip(dims, refs, specs)):
            # traced here (pipeline_schedule.py): runs in every interpreter and
            # pl.program_id in the body is the pipeline's. (Outside a kernel trace,
            # e.g. make_jaxpr of a kernel function, the equation below is recorded:
            # its effects are the operands' alone, as JAX's primitive gives.)
            full = [_explicit_spec(s, d) for s, d in zip(specs, dims)]
            if not sc_mesh.tracing_sparsecore_kernel():
                return _with_allocations(refs, None, None, full[:n_in], full[n_in:])
            # a SparseCore kernel records the equation for JAX's emit_pipeline
            # (sc_rebuild); the CPU model (sc_eval) runs this traced schedule
            def scheduled():
                _with_allocations(refs, None, None, full[:n_in], full[n_in:])
                return []
            schedule = backend_api.trace_body(scheduled, [], traced_for="emit_pipeline schedule")
        shapes = [_block_shape(d) for d in dims]
        block_avals = [jax.ref.AbstractRef(jax.core.ShapedArray(sh, r.dtype),
                                           memory_space=_block_space(sp, r))
                       for sh, r, sp in zip(shapes, refs, specs)]

        n_grid = len(static_grid)
        # the body's pl.num_programs is its core's share of a split grid, as in JAX
        body_grid, _ = pipeline_cores.partition_grid(
            grid, dimension_semantics, *pipeline_cores.core_info(core_axis, core_axis_name),
            offsets=False)

        n_index = n_grid + int(_explicit_indices)

        def flat_body(*args):
            # the body's pl.program_id is the pipeline's: its indices are inputs
            # of the body jaxpr, fed from JAX's pl.program_id (or PipelineStep) at replay
            if _explicit_indices:
                body(pipeline_schedule.PipelineStep(tuple(args[:n_grid]), args[n_grid]),
                     *args[n_index:])
            else:
                with backend_api.nested_grid(args[:n_grid], tuple(body_grid)):
                    body(*args[n_grid:])
            return []
        index_avals = [jax.core.ShapedArray((), jnp.int32)] * n_index
        body_jaxpr, consts = backend_api.trace_body(flat_body, index_avals + block_avals,
                                                       traced_for="emit_pipeline body")
        traced_maps = [pipeline_maps.trace_index_map(_explicit_spec(s, d), len(static_grid), d)
                       for s, d in zip(specs, dims)]
        index_maps = tuple(j for j, _, _ in traced_maps)
        map_consts = [c for _, cs, _ in traced_maps for c in cs]
        _, traced_sizes = _static_or_traced(grid)
        # Views (x_ref.at[1]) travel as their Ref plus indexer leaves.
        flat_refs, ref_tree, ref_spec = _flatten_with_effects(
            refs, ["r"] * n_in + ["w"] * (len(refs) - n_in))
        sched_jaxpr, sched_consts = schedule if schedule is not None else (None, [])
        operands = [*flat_refs, *traced_sizes, *map_consts, *consts, *sched_consts]
        base = len(flat_refs) + len(traced_sizes)
        # index maps only read the Refs they close over; the body (and schedule) may write its
        effect_spec = ref_spec + tuple((base + i, "r") for i, c in enumerate(map_consts)
                                       if _is_ref(c)) + tuple(
            (base + len(map_consts) + i, "w") for i, c in enumerate([*consts, *sched_consts])
            if _is_ref(c))
        emit_pipeline_p.bind(
            *operands, effect_spec=effect_spec, body=body_jaxpr, index_maps=index_maps,
            index_map_consts=tuple(len(cs) for _, cs, _ in traced_maps),
            index_map_views=tuple(views for _, _, views in traced_maps),
            block_dims=tuple(dims), grid=static_grid, num_inputs=n_in,
            ref_tree=ref_tree, num_ref_leaves=len(flat_refs), num_traced_sizes=len(traced_sizes),
            options=options, memory_spaces=tuple(sp.memory_space for sp in specs),
            schedule=sched_jaxpr, num_schedule_consts=len(sched_consts),
            dimension_semantics=None if dimension_semantics is None else tuple(
                str(getattr(d, "value", d)).lower() for d in dimension_semantics))

    def _with_allocations(refs, allocations, scratches, ins=None, outs=None):
        # BufferedRef allocations (or body scratches): the pipeline is traced here,
        # from the allocations' methods (pipeline_schedule.py); with a core axis,
        # over this core's share of the grid (pipeline_cores.py)
        core_grid, offsets = pipeline_cores.partition_grid(
            grid, dimension_semantics, *pipeline_cores.core_info(core_axis, core_axis_name))
        scratches = () if scratches is None else tuple(scratches)
        run = functools.partial(pipeline_schedule.run_pipeline, body, core_grid,
                                scratches=scratches, no_pipelining=bool(no_pipelining),
                                explicit_indices=bool(_explicit_indices), grid_offsets=offsets)
        if allocations is None:
            allocations = ()
        allocations = tuple(allocations)
        if len(allocations) == len(refs):
            return run(refs, allocations)
        if specs and len(allocations) in (0, n_in):
            # allocate what was not given, for the duration of this pipeline
            ins_ = _spec_list(in_specs) if ins is None else ins
            outs_ = _spec_list(out_specs) if outs is None else outs
            missing = pipeline_schedule.make_allocations(
                *refs[len(allocations):], in_specs=ins_[len(allocations):],
                out_specs=outs_, grid=grid, tiling=tiling)
            return pf.run_scoped(lambda more: run(refs, (*allocations, *more)), missing)
        raise TypeError(f"emit_pipeline: {len(allocations)} allocations for {len(refs)} "
                        f"operands; pass one BufferedRef per operand (or none).")
    def _flattened(refs, allocations, scratches):
        # pytrees of specs and operands: one pipeline over their leaves, whose
        # body rebuilds the trees
        is_spec = lambda x: isinstance(x, pf.BlockSpec)
        ins, outs = tuple(_spec_list(in_specs)), tuple(_spec_list(out_specs))
        leaves, tree = jax.tree.flatten((ins, outs), is_leaf=is_spec)
        ref_leaves = tree.flatten_up_to((tuple(refs[:len(ins)]), tuple(refs[len(ins):])))
        n_in_leaves = len(jax.tree.leaves(ins, is_leaf=is_spec))
        lead = int(_explicit_indices)

        def flat_body(*args):
            blocks = args[lead:lead + len(leaves)]
            bi, bo = jax.tree.unflatten(tree, blocks)
            body(*args[:lead], *bi, *bo, *args[lead + len(leaves):])
        flat = emit_pipeline(
            flat_body, grid=grid, in_specs=leaves[:n_in_leaves], out_specs=leaves[n_in_leaves:],
            tiling=tiling, core_axis=core_axis, core_axis_name=core_axis_name,
            dimension_semantics=dimension_semantics, trace_scopes=trace_scopes,
            no_pipelining=no_pipelining, output_wait_read_only=output_wait_read_only,
            _explicit_indices=_explicit_indices)
        return flat(*ref_leaves, allocations=allocations, scratches=scratches)
    return pipeline


def emit_pipeline_with_allocations(body, *, grid, in_specs=(), out_specs=()):
    """``(pipeline, make_allocations)``: ``make_allocations(*refs)`` gives the
    BufferedRefs (for ``pl.run_scoped`` or ``scratch_shapes``) that
    ``pipeline(*refs, allocations=...)`` then reuses across calls."""
    make = functools.partial(pipeline_schedule.make_allocations, in_specs=in_specs,
                             out_specs=out_specs, grid=grid)
    return emit_pipeline(body, grid=grid, in_specs=in_specs, out_specs=out_specs), make


def replay_emit_pipeline(eqn, invals):
    """Evaluator rule: the same pipeline through JAX's ``pltpu.emit_pipeline``."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    from pallas_tpu import evaluate
    p = eqn.params
    n_leaves, n_sizes = p["num_ref_leaves"], p["num_traced_sizes"]
    parts = jax.tree.unflatten(p["ref_tree"], invals[:n_leaves])
    refs = [join_view(part) for part in parts]
    sizes = iter(invals[n_leaves:n_leaves + n_sizes])
    rest = iter(invals[n_leaves + n_sizes:])
    map_consts = [[next(rest) for _ in range(n)] for n in p["index_map_consts"]]
    consts = list(rest)
    consts = consts[:len(consts) - p.get("num_schedule_consts", 0)]   # ours' schedule's
    grid = tuple(g if g is not None else next(sizes) for g in p["grid"])

    from pallas_tpu import rebuild

    def index_fn(jaxpr, dims, views, closed):
        return pipeline_maps.index_map(
            jaxpr, dims, views, closed, lambda j, *a: evaluate.eval_jaxpr(j, (), *a))
    spaces = p.get("memory_spaces") or (None,) * len(p["block_dims"])
    views = p.get("index_map_views") or (None,) * len(p["block_dims"])
    specs = [pl.BlockSpec(tuple(rebuild.block_dim(d) for d in dims), index_fn(im, dims, v, mc),
                          # a spec in HBM (or SMEM) is not copied: JAX's pipeline keeps it
                          **({} if s is None else {"memory_space": block_memory_space(s)}))
             for dims, im, v, mc, s in zip(p["block_dims"], p["index_maps"], views, map_consts,
                                           spaces)]

    def inner(*blocks):
        if dict(p["options"]).get("_explicit_indices"):
            step, blocks = blocks[0], blocks[1:]
            ids = [*step.index, step.local_index]
        else:
            ids = [pl.program_id(a) for a in range(len(grid))]
        evaluate.eval_jaxpr(p["body"], (), *consts, *ids, *blocks)
    kwargs = _jax_private.jax_emit_pipeline_options(
        {k: v for k, v in p["options"] if v is not None})
    sem = p["dimension_semantics"]
    if sem is not None:
        kwargs["dimension_semantics"] = tuple(getattr(pltpu, s.upper()) for s in sem)
    pltpu.emit_pipeline(inner, grid=grid, in_specs=specs[:p["num_inputs"]],
                        out_specs=specs[p["num_inputs"]:], **kwargs)(*refs)
    return []


def _register():
    from pallas_tpu import evaluate
    evaluate.register_rule(emit_pipeline_p, replay_emit_pipeline)


_register()
