"""``emit_pipeline_warp_specialized``: a TMA pipeline whose copies run on a
memory warpgroup while ``num_compute_wgs`` warpgroups run the body; with
``compute_context`` (a prologue/epilogue run by the compute warpgroups
around the pipeline, which threads a carry through the body), manual
barriers, and allocations made by the caller (``get_allocations``).

Traced here, at kernel-trace time, into one ``mgpu_ws_pipeline`` equation:
the body (or the compute context, which holds one ``mgpu_ws_pipeline_run``
equation where it runs the pipeline, carrying the body), the index maps,
and what they close over as operands. The backend replays it with JAX's
function of the same name; the replayed compute context hands the carry to
JAX's pipeline callback where the run equation stands.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jex

from pallas_frontend import backend_api
from pallas_frontend.backend_api import kernel_primitive

from pallas_mgpu import _jax_private, evaluate
from pallas_mgpu.memory import SMEM, Barrier, ClusterBarrier
from pallas_mgpu.ops import OWNER, _OrderedOp, _is_ref, _join, _split_view
from pallas_mgpu.pipeline import (
    BlockSpec, _join_grid, _kernel_shape, _split_grid, _trace_index_map, jax_block_spec,
    spec_record)

mgpu_ws_pipeline_p = kernel_primitive("mgpu_ws_pipeline", owner=OWNER, multiple_results=True)
mgpu_ws_pipeline_run_p = kernel_primitive("mgpu_ws_pipeline_run", owner=OWNER,
                                          multiple_results=True)


def _pipeline_abstract_eval(*avals, ref_positions, **params):
    effects = backend_api.ref_effects(reads=ref_positions, writes=ref_positions)
    effects.add(_OrderedOp())
    return [], effects


def _run_abstract_eval(*avals, ref_positions, out_avals, **params):
    effects = backend_api.ref_effects(reads=ref_positions, writes=ref_positions)
    effects.add(_OrderedOp())
    return list(out_avals), effects


mgpu_ws_pipeline_p.def_effectful_abstract_eval(_pipeline_abstract_eval)
mgpu_ws_pipeline_run_p.def_effectful_abstract_eval(_run_abstract_eval)


def _uses_indices(index_map) -> bool:
    """Whether a traced index map's results depend on the pipeline indices
    (an index-invariant block is fetched once, into one slot)."""
    jaxpr, consts = index_map
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    tainted = set(jaxpr.invars[len(consts):])
    for eqn in jaxpr.eqns:
        if any(v in tainted for v in eqn.invars if not isinstance(v, jex.Literal)):
            tainted.update(eqn.outvars)
    return any(v in tainted for v in jaxpr.outvars if not isinstance(v, jex.Literal))


def _flat_specs(specs):
    """The specs' leaves and their structure: a None spec (an operand the
    pipeline leaves alone, e.g. no bias) is an empty subtree, as in JAX."""
    specs = (specs,) if isinstance(specs, BlockSpec) else tuple(specs)
    leaves, tree = jax.tree.flatten(specs, is_leaf=lambda x: isinstance(x, BlockSpec))
    return leaves, tree


class WarpSpecializedPipeline:
    """What ``emit_pipeline_warp_specialized`` returns: call it on the GMEM
    operands (``allocations=`` the Refs of ``get_allocations``, optional)."""

    def __init__(self, body, *, grid, memory_registers, in_specs, out_specs,
                 max_concurrent_steps, wg_axis, num_compute_wgs, memory_thread_idx,
                 compute_context, manual_consumed_barriers, manual_produced_barriers,
                 pipeline_state=None):
        self.body, self.compute_context = body, compute_context
        self.in_specs, self.in_tree = _flat_specs(in_specs)
        self.out_specs, self.out_tree = _flat_specs(out_specs)
        # a size known only at run time (e.g. a block count read from memory) is an operand
        self.grid, self.grid_sizes = _split_grid(grid)
        self.manual_consumed = bool(manual_consumed_barriers)
        self.manual_produced = bool(manual_produced_barriers)
        self.num_compute_wgs = int(num_compute_wgs)
        # JAX's pipeline buffers no more steps than there are (when it knows how many)
        self.slots = int(max_concurrent_steps) if None in self.grid else \
            min(int(max_concurrent_steps), math.prod(self.grid))
        self.static = {
            "memory_registers": int(memory_registers),
            "max_concurrent_steps": int(max_concurrent_steps), "wg_axis": wg_axis,
            "num_compute_wgs": self.num_compute_wgs, "memory_thread_idx": memory_thread_idx,
            "manual_consumed_barriers": self.manual_consumed,
            "manual_produced_barriers": self.manual_produced}
        # a pipeline of pipelines (START, STEADY..., STOP sharing allocations)
        self.static["pipeline_state"], self.traced_state = _pipeline_state(
            pipeline_state, self.grid, int(max_concurrent_steps))
        self.has_state = pipeline_state is not None

    def _flat_refs(self, gmem_refs) -> list:
        """The GMEM operands' leaves, checked against the specs' structure."""
        n_top = len(jax.tree.unflatten(self.in_tree, self.in_specs))   # None included
        ins, outs = gmem_refs[:n_top], gmem_refs[n_top:]
        flat_in, in_tree = jax.tree.flatten(tuple(ins), is_leaf=_is_ref)
        flat_out, out_tree = jax.tree.flatten(tuple(outs), is_leaf=_is_ref)
        if (in_tree, out_tree) != (self.in_tree, self.out_tree):
            raise ValueError(f"emit_pipeline_warp_specialized: the GMEM operands "
                             f"{in_tree} and {out_tree} are not structured as the in_specs "
                             f"{self.in_tree} and out_specs {self.out_tree}.")
        return flat_in + flat_out

    def _check_operands(self, gmem_refs) -> list[bool]:
        """Which operands' blocks move with the pipeline indices (checked);
        ``gmem_refs`` flat, as ``_flat_refs`` gives them."""
        moving = [_uses_indices(_trace_index_map(s, len(self.grid)))
                  for s in self.in_specs + self.out_specs]
        if not all(moving[:len(self.in_specs)]):
            raise NotImplementedError(
                "emit_pipeline_warp_specialized: every input's index map must use the pipeline "
                "indices (as in JAX); copy a fixed block into SMEM before the pipeline instead.")
        return moving

    def get_allocations(self, *gmem_refs) -> dict:
        """The scratch types of the pipeline's SMEM buffers and barriers, as
        JAX's pipeline takes them (``pl.run_scoped(..., **{"x": allocations})``,
        then ``pipeline(..., allocations=refs)``)."""
        gmem_refs = self._flat_refs(gmem_refs)
        moving = self._check_operands(gmem_refs)
        specs = self.in_specs + self.out_specs
        bufs = []
        for spec, ref, moves in zip(specs, gmem_refs, moving):
            shape = _kernel_shape(spec, ref)
            bufs.append(SMEM(((self.slots if moves else 1), *shape), ref.dtype,
                             transforms=spec.transforms))
        n_in = len(self.in_specs)
        if self.manual_produced:
            produced = [Barrier(num_barriers=self.slots) for _ in range(n_in)]
        else:
            produced = [Barrier(num_arrivals=n_in, num_barriers=self.slots)]
        axes = tuple(sorted({a for s in self.in_specs for a in s.collective_axes}))

        def consumed():
            if axes:
                return ClusterBarrier(collective_axes=axes, num_arrivals=self.num_compute_wgs,
                                      num_barriers=self.slots)
            return Barrier(num_arrivals=self.num_compute_wgs, num_barriers=self.slots)
        return {"flat_in_smem_refs": bufs[:n_in], "flat_out_smem_refs": bufs[n_in:],
                "flat_produced_barrier_refs": produced,
                "flat_consumed_barrier_refs": [consumed() for _ in
                                               range(n_in if self.manual_consumed else 1)]}

    def _body_avals(self, gmem_refs) -> list:
        """The body's operands after the indices: blocks, then manual barriers."""
        avals = [jax.ref.AbstractRef(
            jax.core.ShapedArray(_kernel_shape(s, r), np.dtype(r.dtype)),
            memory_space=SMEM(_kernel_shape(s, r), r.dtype, transforms=s.transforms))
            for s, r in zip(self.in_specs + self.out_specs, gmem_refs)]
        one_barrier = Barrier().get_ref_aval()        # the body sees one slot's barrier
        n_in = len(self.in_specs)
        avals += [one_barrier] * (n_in * (self.manual_produced + self.manual_consumed))
        return avals

    def call_body(self, flat_args, *carry):
        """The user's body on the flat operands (indices, blocks, barriers),
        given back in the specs' structure (None where a spec is None)."""
        n_idx, n_in, n_out = len(self.grid), len(self.in_specs), len(self.out_specs)
        idx, rest = tuple(flat_args[:n_idx]), list(flat_args[n_idx:])
        ins, outs, rest = rest[:n_in], rest[n_in:n_in + n_out], rest[n_in + n_out:]
        args = [*jax.tree.unflatten(self.in_tree, ins), *jax.tree.unflatten(self.out_tree, outs)]
        for _ in range(self.manual_produced + self.manual_consumed):
            args += jax.tree.unflatten(self.in_tree, rest[:n_in])
            rest = rest[n_in:]
        return self.body(idx, *args, *carry)

    def __call__(self, *gmem_refs, allocations=None):
        gmem_refs = self._flat_refs(gmem_refs)
        self._check_operands(gmem_refs)
        if self.has_state and allocations is None:
            raise ValueError("emit_pipeline_warp_specialized: pipeline_state needs the "
                             "allocations shared by the pipelines (get_allocations, then "
                             "pipeline(..., allocations=refs)), as in JAX.")
        idx_avals = [jax.core.ShapedArray((), jnp.int32)] * len(self.grid)
        operand_avals = idx_avals + self._body_avals(gmem_refs)
        if self.compute_context is None:
            def flat_body(*args):
                self.call_body(args)
                return []
            inner, consts = backend_api.trace_body(
                flat_body, operand_avals, traced_for="emit_pipeline_warp_specialized body")
        else:
            inner, consts = _trace_context(self, operand_avals)
        maps = [_trace_index_map(s, len(self.grid)) for s in self.in_specs + self.out_specs]
        operands = ([_split_view(r) for r in gmem_refs], allocations, list(consts),
                    [list(c) for _, c in maps], list(self.grid_sizes),
                    [] if self.traced_state is None else [self.traced_state])
        flat, tree = jax.tree.flatten(operands)
        mgpu_ws_pipeline_p.bind(
            *flat, tree=tree, grid=self.grid, inner=inner,
            has_context=self.compute_context is not None,
            index_maps=tuple(j for j, _ in maps), num_in=len(self.in_specs),
            specs=tuple(spec_record(s) for s in self.in_specs + self.out_specs),
            static=tuple(sorted(self.static.items())),
            ref_positions=tuple(i for i, x in enumerate(flat) if _is_ref(x)))


def _trace_context(pipe: WarpSpecializedPipeline, operand_avals):
    """Traces ``compute_context(run)``; ``run(carry)`` traces the body with the
    carry and records one ``mgpu_ws_pipeline_run`` equation. Refs in the carry
    (e.g. a WGMMA accumulator) must come back from the body as they went in."""
    runs = []

    def run(init_carry):
        if runs:
            raise ValueError("emit_pipeline_warp_specialized: the pipeline may run only once "
                             "in compute_context.")
        runs.append(True)
        leaves, tree = jax.tree.flatten(init_carry)
        is_ref = tuple(_is_ref(x) for x in leaves)
        carry_avals = [jax.typeof(x) if r else jax.core.ShapedArray(jnp.shape(x), jnp.result_type(x))
                       for x, r in zip(leaves, is_ref)]
        n = len(operand_avals)

        def flat_body(*args):
            carry_in = args[n:]
            out = pipe.call_body(args[:n], jax.tree.unflatten(tree, carry_in))
            out_leaves, out_tree = jax.tree.flatten(out)
            if out_tree != tree:
                raise TypeError(f"emit_pipeline_warp_specialized: the body returned a carry of "
                                f"structure {out_tree}, it was given {tree}; return the same.")
            values = []
            for got, given, ref, aval in zip(out_leaves, carry_in, is_ref, carry_avals):
                if ref:
                    if got is not given:
                        raise TypeError("emit_pipeline_warp_specialized: a Ref in the carry must "
                                        "be returned by the body as it was passed in.")
                    continue
                if (jnp.shape(got), jnp.result_type(got)) != (aval.shape, aval.dtype):
                    raise TypeError(f"emit_pipeline_warp_specialized: the body returned a carry "
                                    f"leaf {jnp.result_type(got)}{list(jnp.shape(got))} for "
                                    f"{aval.dtype}{list(aval.shape)}; keep the carry's types.")
                values.append(got)
            return values
        body, body_consts = backend_api.trace_body(
            flat_body, operand_avals + carry_avals,
            traced_for="emit_pipeline_warp_specialized body")
        flat = [*body_consts, *leaves]
        outs = mgpu_ws_pipeline_run_p.bind(
            *flat, body=body, n_consts=len(body_consts), tree=tree, is_ref=is_ref,
            out_avals=tuple(a for a, r in zip(carry_avals, is_ref) if not r),
            ref_positions=tuple(i for i, x in enumerate(flat) if _is_ref(x)))
        it = iter(outs)
        return jax.tree.unflatten(tree, [x if r else next(it) for x, r in zip(leaves, is_ref)])

    def flat_context():
        pipe.compute_context(run)
        if not runs:
            raise ValueError("emit_pipeline_warp_specialized: compute_context never ran the "
                             "pipeline it was given.")
        return []
    return backend_api.trace_body(flat_context, [],
                                  traced_for="emit_pipeline_warp_specialized compute_context")


def emit_pipeline_warp_specialized(body, *, grid, memory_registers: int, in_specs=(),
                                   out_specs=(), max_concurrent_steps: int = 2, wg_axis: str,
                                   num_compute_wgs: int, memory_thread_idx: int | None = None,
                                   compute_context=None, manual_consumed_barriers: bool = False,
                                   manual_produced_barriers: bool = False, pipeline_state=None):
    """A pipeline whose TMA copies run on a memory warpgroup (``memory_thread_idx``,
    default the last of ``wg_axis``) while ``num_compute_wgs`` warpgroups run
    ``body(indices, *in_blocks, *out_blocks[, *barriers][, carry])``; the
    arguments of JAX's function of the same name."""
    return WarpSpecializedPipeline(
        body, grid=grid, memory_registers=memory_registers, in_specs=in_specs,
        out_specs=out_specs, max_concurrent_steps=max_concurrent_steps, wg_axis=wg_axis,
        num_compute_wgs=num_compute_wgs, memory_thread_idx=memory_thread_idx,
        compute_context=compute_context, manual_consumed_barriers=manual_consumed_barriers,
        manual_produced_barriers=manual_produced_barriers, pipeline_state=pipeline_state)


def _pipeline_state(state, grid, max_concurrent_steps):
    """(static state, traced state) of a pipeline of pipelines (JAX's
    ``PipelinePipeline`` or an int32 scalar known at run time), refused here
    where JAX's pipeline would refuse it when the kernel is rebuilt."""
    if state is None:
        return None, None
    from jax.experimental.pallas.mosaic_gpu import PipelinePipeline
    where = "pallas_mgpu.emit_pipeline_warp_specialized: pipeline_state"
    if None in grid:
        raise NotImplementedError(f"{where} (a pipeline of pipelines) needs a grid known at "
                                  f"trace time, as in JAX; this grid has a run-time size.")
    if math.prod(grid) % max_concurrent_steps:
        raise NotImplementedError(
            f"{where}: the number of steps ({math.prod(grid)}) must be divisible by "
            f"max_concurrent_steps={max_concurrent_steps}, as in JAX.")
    if isinstance(state, (int, np.integer)) and not isinstance(state, bool):
        return PipelinePipeline(int(state)), None
    if jnp.shape(state) != () or not jnp.issubdtype(jnp.result_type(state), jnp.integer):
        raise TypeError(f"{where} must be a PipelinePipeline or an integer scalar, got "
                        f"{jnp.result_type(state)}{list(jnp.shape(state))}.")
    return None, jnp.asarray(state, jnp.int32)


# --- replay ----------------------------------------------------------------------------

_contexts: list = []     # (JAX's pipeline callback, the body's slot), innermost last


def _replay(eqn, invals):
    p = eqn.params
    gmem, allocations, consts, map_consts, sizes, state = jax.tree.unflatten(p["tree"], invals)
    gmem = [_join(x) for x in gmem]
    specs = [jax_block_spec(rec, jaxpr, c)
             for rec, jaxpr, c in zip(p["specs"], p["index_maps"], map_consts)]
    slot = {}
    kw = {}
    if not p["has_context"]:
        def jax_body(indices, *args):
            evaluate.eval_closed(p["inner"], *consts, *indices, *args)
    else:
        def jax_body(indices, *args):
            *rest, carry = args
            leaves = jax.tree.leaves(carry)
            outs = iter(evaluate.eval_closed(slot["body"], *slot["consts"], *indices, *rest,
                                             *leaves))
            return jax.tree.unflatten(slot["tree"], [x if r else next(outs)
                                                     for x, r in zip(leaves, slot["is_ref"])])

        def jax_context(pipeline_callback):
            _contexts.append((pipeline_callback, slot))
            try:
                evaluate.eval_closed(p["inner"], *consts)
            finally:
                _contexts.pop()
        kw["compute_context"] = jax_context
    static = {k: v for k, v in p["static"] if v is not None}
    if state:
        kw["pipeline_state"] = state[0]
    pipeline = _jax_private.plgpu_function("emit_pipeline_warp_specialized")(
        jax_body, grid=_join_grid(p["grid"], sizes), in_specs=specs[:p["num_in"]],
        out_specs=specs[p["num_in"]:],
        **static, **kw)
    pipeline(*gmem, allocations=allocations)
    return []


def _replay_run(eqn, invals):
    p = eqn.params
    pipeline_callback, slot = _contexts[-1]
    n = p["n_consts"]
    slot.update(body=p["body"], consts=invals[:n], tree=p["tree"], is_ref=p["is_ref"])
    leaves = invals[n:]
    final = jax.tree.leaves(pipeline_callback(jax.tree.unflatten(p["tree"], leaves)))
    return [x for x, r in zip(final, p["is_ref"]) if not r]


evaluate.register_rule(mgpu_ws_pipeline_p, _replay)
evaluate.register_rule(mgpu_ws_pipeline_run_p, _replay_run)
