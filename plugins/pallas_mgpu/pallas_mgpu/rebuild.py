"""KernelIR -> a JAX Mosaic GPU kernel (``plgpu.kernel`` + ``plgpu.emit_pipeline``).

JAX 0.12's ``pallas_call`` has no Mosaic GPU lowering, so a portable kernel
(BlockSpecs over a grid) is rebuilt in the form Mosaic GPU kernels take:

- the parallel grid axes (at most three) become the CTA grid of ``plgpu.kernel``;
- the other axes, in grid order, become a software pipeline inside each CTA
  (``emit_pipeline``): blocks of the windowed operands are fetched into SMEM
  by TMA ``max_concurrent_steps`` steps ahead and written back by TMA;
- operands in GMEM (``BlockSpec(memory_space=GMEM)``) are handed over whole;
- scratch buffers are SMEM buffers of the CTA (they persist across steps).

The body replays the kernel jaxpr (``evaluate.py``) with program ids from
the CTA coordinates and the pipeline indices. A kernel written with
``pallas_mgpu.kernel`` is rebuilt as the ``plgpu.kernel`` it describes.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np
from jax import lax

import pallas_frontend as pf
from pallas_frontend.backend_api import BlockMapping, KernelIR

from pallas_mgpu import _jax_private, evaluate, schedule
from pallas_mgpu.memory import scratch_to_jax
from pallas_mgpu.params import CompilerParams, InterpretParams


def _out_types(kernel: KernelIR, out_avals: Sequence):
    types = []
    for m, aval in zip(kernel.out_mappings, out_avals):
        mat = getattr(aval, "manual_axis_type", None)
        kw = {"manual_axis_type": mat} if mat is not None else {}
        types.append(jax.ShapeDtypeStruct(m.array_shape, m.dtype, **kw))
    return types


def _params(kernel: KernelIR) -> CompilerParams:
    p = kernel.compiler_params
    return p if isinstance(p, CompilerParams) else CompilerParams()


def _jax_interpret(kernel: KernelIR, interpret: InterpretParams | None):
    if interpret is None:
        return None
    if schedule.has_ragged_blocks(kernel) and interpret.out_of_bounds_reads == "raise":
        # TMA reads past the edge of an array fill with zeros on the GPU; the
        # interpreter must not call those reads errors.
        return interpret.to_jax(out_of_bounds_reads="uninitialized")
    return interpret.to_jax()


def _scratch_types(kernel: KernelIR) -> list:
    return [scratch_to_jax(a.memory_space, a.inner_aval.shape, a.inner_aval.dtype)
            for a in kernel.scratch_avals]


def build_kernel(kernel: KernelIR, out_avals: Sequence, interpret: InterpretParams | None):
    """A function of the flat operands running ``kernel`` as a Mosaic GPU kernel."""
    from pallas_mgpu import mesh_kernel
    if isinstance(kernel.compiler_params, mesh_kernel.MeshKernelParams):
        return mesh_kernel.build(kernel, _out_types(kernel, out_avals),
                                 _jax_interpret(kernel, interpret))
    if interpret is not None and schedule.has_ragged_blocks(kernel) \
            and not _jax_private.gpu_interpreter_clips_edge_blocks():
        return _padded_to_whole_blocks(kernel, out_avals, interpret)
    return _build_gridded(kernel, out_avals, interpret)


def _padded_to_whole_blocks(kernel: KernelIR, out_avals, interpret: InterpretParams):
    """An older JAX's GPU interpreter (0.10) neither zero-fills a TMA read past an
    array's end nor drops such a write: the kernel runs on its operands padded with
    zeros to whole blocks (what an edge block holds past the end is undefined in
    Pallas; the GPU's TMA reads zeros there), and its outputs are cut back."""
    import dataclasses

    def padded(m: BlockMapping) -> BlockMapping:
        shape = tuple(-(-n // d.block_size) * d.block_size if isinstance(d, pf.Blocked) else n
                      for d, n in zip(m.block_dims, m.array_shape))
        return dataclasses.replace(m, array_shape=shape)
    whole = dataclasses.replace(kernel, in_mappings=tuple(map(padded, kernel.in_mappings)),
                                out_mappings=tuple(map(padded, kernel.out_mappings)))
    run = _build_gridded(whole, out_avals, interpret)
    n_pre = kernel.num_scalar_prefetch

    def pad(x, m, to):
        return jax.numpy.pad(x, [(0, t - n) for n, t in zip(m.array_shape, to.array_shape)])

    def cut_back(*args):
        operands = [pad(x, m, to) for x, m, to in
                    zip(args[n_pre:], kernel.in_mappings, whole.in_mappings)]
        outs = run(*args[:n_pre], *operands)
        return [o[tuple(slice(0, n) for n in m.array_shape)]
                for o, m in zip(outs, kernel.out_mappings)]
    return cut_back


def _build_gridded(kernel: KernelIR, out_avals, interpret):
    if 0 in tuple(kernel.grid):
        return _empty_grid(kernel, interpret)
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu
    params = _params(kernel)
    plan = schedule.plan_grid(kernel)
    cta_names = tuple(f"cta{a}" for a in plan.cta_axes)
    n_in, n_ops = len(kernel.in_mappings), len(kernel.mappings)
    piped = [k for k, m in enumerate(kernel.mappings) if not schedule.is_whole(m)]
    # Outputs are written back by hand, not by emit_pipeline: JAX's GPU
    # interpreter cannot run its predicated write-backs. An output block that
    # is the same at every step goes out once at the end, others after each step.
    outputs = [k for k in piped if k >= n_in]
    resident = [k for k in outputs if schedule.is_resident_output(kernel.mappings[k], plan)]
    # An input the kernel writes is fetched by hand into one SMEM buffer, and
    # again only when its block moves: steps on the same block see the updates.
    written = set(schedule.written_inputs(kernel))
    kept = [k for k in piped if k < n_in and k in written]
    streamed = [k for k in piped if k < n_in and k not in written]
    layouts = schedule.smem_layouts(kernel)
    jaxpr = kernel.jaxpr

    def body(*refs):
        gmem, scratch = refs[:n_ops], refs[n_ops:]
        cta_ids = [lax.axis_index(n) for n in cta_names]

        def grid_ids(seq_ids):
            ids = [jax.numpy.int32(0)] * len(kernel.grid)
            for a, v in zip(plan.cta_axes, cta_ids):
                ids[a] = v
            for a, v in zip(plan.seq_axes, seq_ids):
                ids[a] = v
            return ids

        def _write_back(pairs, ids):
            plgpu.commit_smem()
            for k, buf in pairs:
                plgpu.copy_smem_to_gmem(buf, gmem[k].at[_block_slices(kernel.mappings[k], ids)])
            plgpu.wait_smem_to_gmem(0)

        def fetch_kept(bufs, barriers, seq, ids):
            step = _linear_step(seq, plan.seq_grid)
            prev = grid_ids(_unravel_step(lax.max(step - 1, 0), plan.seq_grid))
            for k, buf, barrier in zip(kept, bufs, barriers):
                m = kernel.mappings[k]
                moved = step == 0
                for a, b in zip(evaluate.eval_closed(m.index_map, *ids),
                                evaluate.eval_closed(m.index_map, *prev)):
                    moved = moved | (a != b)

                @pl.when(moved)
                def _fetch():
                    plgpu.commit_smem()     # the last step's SMEM writes before TMA overwrites
                    plgpu.copy_gmem_to_smem(gmem[k].at[_block_slices(m, ids)], buf, barrier,
                                            **_oob_mode(m))
                    plgpu.barrier_wait(barrier)

        def pipeline(*bufs):
            out_bufs = bufs[:len(outputs)]
            kept_bufs = bufs[len(outputs):len(outputs) + len(kept)]
            barriers = bufs[len(outputs) + len(kept):]

            def step(seq_idx, *blocks):
                operands = list(gmem)
                for k, b in zip(streamed, blocks):
                    operands[k] = b
                for k, b in zip(outputs + kept, out_bufs + kept_bufs):
                    operands[k] = b
                seq = list(seq_idx)[:len(plan.seq_axes)]
                ids = grid_ids(seq)
                if kept:
                    fetch_kept(kept_bufs, barriers, seq, ids)
                evaluate.eval_closed(jaxpr, *ids, *operands, *scratch)
                per_step = [(k, b) for k, b in zip(outputs, out_bufs) if k not in resident]
                if per_step:
                    _write_back(per_step, ids)

            def spec(k):
                m = kernel.mappings[k]
                return _jax_private.jax_block_spec(
                    tuple(_block_dim(d) for d in m.block_dims),
                    _index_map(m, grid_ids, len(plan.seq_axes)), transforms=layouts.get(k, ()),
                    **{"oob_fill_mode": o for o in _oob_mode(m).values()})
            plgpu.emit_pipeline(
                step, grid=plan.seq_grid or (1,), in_specs=[spec(k) for k in streamed],
                max_concurrent_steps=min(params.max_concurrent_steps, max(plan.num_steps, 1)),
            )(*[gmem[k] for k in streamed])
            if resident:
                _write_back([(k, b) for k, b in zip(outputs, out_bufs) if k in resident],
                            grid_ids([]))

        if outputs or kept:
            pl.run_scoped(pipeline, *[
                plgpu.SMEM(kernel.mappings[k].block_shape, kernel.mappings[k].dtype,
                           transforms=layouts.get(k, ())) for k in outputs + kept],
                *[plgpu.Barrier(num_arrivals=1) for _ in kept])
        else:
            pipeline()

    body.__name__ = kernel.name
    call = plgpu.kernel(
        body, out_type=_out_types(kernel, out_avals), scratch_types=_scratch_types(kernel),
        compiler_params=params.to_jax(), grid=plan.cta_grid, grid_names=cta_names,
        interpret=_jax_interpret(kernel, interpret))
    # plgpu.kernel has no input_output_aliases: an aliased output is a fresh
    # buffer, and what no grid point writes is taken from the aliased input.
    keep = {o: (i, schedule.written_mask(kernel, kernel.out_mappings[o]))
            for i, o in kernel.input_output_aliases}

    def run(*args):
        outs = list(jax.tree.leaves(call(*args)))
        for o, (i, mask) in keep.items():
            if mask is not None:
                outs[o] = jax.numpy.where(mask, outs[o], args[kernel.num_scalar_prefetch + i])
        return outs
    return run


def _empty_grid(kernel: KernelIR, interpret: InterpretParams | None):
    """A grid with an axis of size 0 runs no grid point (the user guide; the other
    interpreters): no kernel is launched, an aliased output is its input as it
    was, any other output is uninitialized memory as the interpreter fills it
    (``uninitialized_memory``: NaN, an integer's largest value, True; or 0)."""
    aliased = {o: i for i, o in kernel.input_output_aliases}
    mode = interpret.uninitialized_memory if interpret is not None else "nan"

    def fill(dtype):
        if mode == "zero":
            return 0
        if jax.numpy.issubdtype(dtype, jax.numpy.floating) or \
                jax.numpy.issubdtype(dtype, jax.numpy.complexfloating):
            return np.nan
        if jax.numpy.issubdtype(dtype, jax.numpy.integer):
            return jax.numpy.iinfo(dtype).max
        return True if jax.numpy.issubdtype(dtype, jax.numpy.bool_) else 0

    def run(*args):
        return [args[kernel.num_scalar_prefetch + aliased[k]] if k in aliased
                else jax.numpy.full(m.array_shape, fill(m.dtype), m.dtype)
                for k, m in enumerate(kernel.out_mappings)]
    return run


def _block_slices(m: BlockMapping, ids):
    """The window of ``m`` at grid point ``ids`` as Ref indices (squeezed dims: an int)."""
    from jax.experimental import pallas as pl
    starts = evaluate.eval_closed(m.index_map, *ids)
    out = []
    for d, s in zip(m.block_dims, starts):
        if isinstance(d, pf.Squeezed):
            out.append(s)
        else:
            out.append(pl.ds(s * d.block_size, d.block_size))
    return tuple(out)


def _oob_mode(m: BlockMapping) -> dict:
    """A block past the TMA box limit moves by one bulk copy, which Mosaic GPU
    takes only when the edge is not zero-filled (the padding of an edge block
    is undefined in Pallas anyway; the copy is clipped at the array's end)."""
    if not schedule.needs_bulk_copy(m):
        return {}
    from jax.experimental.pallas import mosaic_gpu as plgpu
    return {"oob_mode": plgpu.OOBFillMode.UNDEFINED}


def _linear_step(seq, seq_grid):
    step = jax.numpy.int32(0)
    for v, g in zip(seq, seq_grid):
        step = step * g + v
    return step


def _unravel_step(step, seq_grid):
    out = []
    for g in reversed(seq_grid):
        out.append(lax.rem(step, np.int32(g)))
        step = lax.div(step, np.int32(g))
    return out[::-1]


def _block_dim(d):
    from jax.experimental import pallas as pl
    if isinstance(d, pf.Squeezed):
        return pl.Squeezed()
    if isinstance(d, pf.Element):    # the index map gives an element offset (check.py: reads only)
        return pl.Element(int(d.block_size))
    return int(d.block_size)


def _index_map(m: BlockMapping, grid_ids, n_seq: int):
    jaxpr = m.index_map

    def index_map(*seq_idx):
        ids = grid_ids(list(seq_idx)[:n_seq])
        return tuple(evaluate.eval_closed(jaxpr, *ids))
    return index_map


