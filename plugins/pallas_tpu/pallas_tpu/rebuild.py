"""KernelIR -> a ``jax.experimental.pallas.pallas_call`` for Mosaic TPU.

Everything is derived from the KernelIR: BlockSpecs from the BlockMappings
(index maps evaluate their jaxprs), scratch types from the scratch avals,
``pltpu.CompilerParams`` from ours, and the kernel body replays the kernel
jaxpr (``evaluate.py``) with program ids from ``pl.program_id``. Grid axes
added by the frontend's ``vmap`` are ordinary grid axes here. A dynamic grid
axis (``KernelIR.grid[a] is None``) gets its traced size, the call's leading
operand, as JAX's grid dim; the kernel reads it back with ``pl.num_programs``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax

import pallas_frontend as pf
from pallas_frontend.backend_api import BlockMapping, KernelIR

from pallas_tpu import (aliased_blocks, check, evaluate, interpret_mode, kernel_globals,
                        key_operands, semaphore_operands)
from pallas_tpu.params import CompilerParams, InterpretParams
from pallas_tpu.spaces import block_memory_space, scratch_type_of_aval


def block_dim(d):
    from jax.experimental import pallas as pl
    if isinstance(d, pf.Blocked):
        return d.block_size
    if isinstance(d, pf.Element):
        return pl.Element(d.block_size, d.padding)
    if isinstance(d, pf.Squeezed):
        return pl.Squeezed()
    if isinstance(d, pf.BoundedSlice):
        return pl.BoundedSlice(d.block_size)
    if isinstance(d, pf.Indirect):      # (a software pipeline's only)
        return pl.Indirect(d.block_size)
    raise NotImplementedError(f"block dim {d!r} has no TPU counterpart")


def _index_map_fn(m: BlockMapping, guard_wrap: str | None = None):
    """A Python index_map evaluating ``m.index_map``; BoundedSlice dims get
    their (start, size) pair back as ``pl.ds``. ``guard_wrap`` (interpret mode,
    indices read at run time): the kernel's name, and Blocked indices whose
    element offset passes int32 are refused (``interpret_mode``)."""
    from jax.experimental import pallas as pl
    jaxpr = m.index_map

    def index_map(*args):
        flat = evaluate.eval_jaxpr(jaxpr, jaxpr.consts, *args)
        out, k = [], 0
        for dim, d in enumerate(m.block_dims):
            if isinstance(d, pf.BoundedSlice):
                out.append(pl.ds(flat[k], flat[k + 1]))
                k += 2
                continue
            if guard_wrap is not None and isinstance(d, pf.Blocked) and d.block_size > 1:
                interpret_mode.refuse_wrapping_block_index(
                    flat[k], d.block_size,
                    f"Kernel '{guard_wrap}': the index_map of {m.origin} "
                    f"({m.index_map_source}), dim {dim},")
            out.append(flat[k])
            k += 1
        return tuple(out)
    return index_map


def _is_unwindowed(m: BlockMapping) -> bool:
    """ANY/HBM/SEMAPHORE operands are handed to the kernel whole, unwindowed."""
    from pallas_tpu.memory import MemorySpace, is_semaphore_space
    return m.memory_space in (pf.MemorySpace.ANY, MemorySpace.ANY, MemorySpace.HBM) or \
        is_semaphore_space(m.memory_space)


def _is_unwindowed_or_placed(m: BlockMapping) -> bool:
    """Also an output that out_shape placed whole in a memory space (e.g.
    ``pltpu.VMEM(shape, dtype)``) and whose block is all of it: the kernel
    sees the array itself, which an aliased input already is."""
    return _is_unwindowed(m) or (getattr(m, "array_memory_space", None) is not None
                                 and m.block_shape == tuple(m.array_shape))


def block_spec(m: BlockMapping, guard_wrap: str | None = None, key_data: bool = False):
    """``key_data``: the operand is PRNG keys passed as their key data (TPU
    interpret mode): the block also spans the key data's trailing dims."""
    from jax.experimental import pallas as pl
    space = block_memory_space(m.memory_space)
    if _is_unwindowed(m):
        return pl.BlockSpec(memory_space=space)
    kwargs = {}
    if m.pipeline_mode is not None:
        kwargs["pipeline_mode"] = jax_buffered(m.pipeline_mode)
    if space is not None:
        kwargs["memory_space"] = space
    dims = tuple(block_dim(d) for d in m.block_dims)
    index_map = _index_map_fn(m, guard_wrap)
    if key_data and key_operands.is_key(m.dtype):
        trailing = key_operands.key_shape(m.dtype)
        dims += trailing
        index_map = functools.partial(_with_zeros, index_map, len(trailing))
    return pl.BlockSpec(dims, index_map, **kwargs)


def jax_buffered(mode):
    """Ours' ``Buffered`` as JAX's, every field kept: ``revisit=ANY`` is what
    lets Mosaic write an output block back and fetch it again when the grid
    returns to it later (dropped, a non-immediate revisit summed over stale
    data on the chip). A field this JAX's ``Buffered`` lacks is dropped only at
    its default."""
    import dataclasses

    from jax.experimental import pallas as pl
    have = {f.name for f in dataclasses.fields(pl.Buffered)}
    fields = {}
    for f in dataclasses.fields(mode):
        value = getattr(mode, f.name)
        if f.name not in have:
            if value != f.default:     # prefetched_count: JAX 0.11+
                from pallas_tpu._jax_private import needs_newer_jax
                raise NotImplementedError(needs_newer_jax(
                    f"pl.Buffered({f.name}={value!r}) on TPU", "0.11"))
            continue
        if f.name == "revisit" and value is not None:
            value = pl.RevisitMode(value.value)
        fields[f.name] = value
    return pl.Buffered(**fields)


def _with_zeros(index_map, n, *args):
    return (*index_map(*args), *(0,) * n)


def _kernel_body(kernel: KernelIR, interpreting: bool, prng_state: bool, core_axes=(),
                 n_globals: int = 0):
    """``prng_state``: the last Ref is the hidden PRNG state of interpret mode;
    ``core_axes``: the grid names interpret mode runs as simulated cores;
    ``n_globals``: the ``pl.get_global`` Refs that come before it."""
    from jax.experimental import pallas as pl
    jaxpr, n_grid = kernel.jaxpr, len(kernel.grid)
    dynamic_axes = kernel.dynamic_grid_axes
    # JAX's TPU interpreter gives a placed output a buffer of its own: seed it too
    seeded = aliased_blocks.copied_pairs(
        kernel, _is_unwindowed if interpreting else _is_unwindowed_or_placed)
    n_pf, n_in = kernel.num_scalar_prefetch, len(kernel.in_mappings)

    def body(*refs):
        # the kernel jaxpr takes program ids, then the dynamic axes' sizes
        ids = [pl.program_id(a) for a in range(n_grid)]
        sizes = [pl.num_programs(a) if g is None else g for a, g in enumerate(kernel.grid)]
        state = refs[-1] if prng_state else None
        refs = refs[:-1] if prng_state else refs
        n_own = len(refs) - n_globals
        aliased_blocks.seed_from_inputs(
            kernel, seeded, _index_map_fn, ids, sizes, refs[:n_pf], refs[n_pf:n_pf + n_in],
            refs[n_pf + n_in:n_pf + n_in + len(kernel.out_mappings)])
        ids += [pl.num_programs(a) for a in dynamic_axes]
        if interpreting:     # PRNG key operands came as their key data
            refs = tuple(key_operands.KeyRefView(r, m.dtype)
                         if m is not None and key_operands.is_key(m.dtype) else r
                         for r, m in zip(refs, _ref_mappings(kernel, len(refs))))
        # jax_enable_checks: the frontend checked this jaxpr when it traced it, and
        # JAX checks the whole replayed kernel when this body returns; checking each
        # loop and branch as the replay builds it cost ours 4x JAX's trace time
        with kernel_globals.binding(kernel, refs[n_own:]), jax.enable_checks(False):
            if not interpreting:
                evaluate.eval_jaxpr(jaxpr, jaxpr.consts, *ids, *refs[:n_own])
                return
            with interpret_mode.interpreting(state, core_axes):
                evaluate.eval_jaxpr(jaxpr, jaxpr.consts, *ids, *refs[:n_own])
    body.__name__ = kernel.name
    return body


def _ref_mappings(kernel: KernelIR, n: int) -> list:
    """The BlockMapping of each of the body's first ``n`` Refs (None past the
    operands: prefetch and scratch have no key case)."""
    n_pf = kernel.num_scalar_prefetch
    out = [None] * n_pf + list(kernel.in_mappings) + list(kernel.out_mappings)
    return (out + [None] * n)[:n]


def _out_shapes(kernel: KernelIR, out_avals: Sequence, interpreting: bool = False):
    shapes = []
    for m, aval in zip(kernel.out_mappings, out_avals):
        mat = getattr(aval, "manual_axis_type", None)
        kw = {"manual_axis_type": mat} if mat is not None else {}
        shape, dtype = m.array_shape, m.dtype
        if semaphore_operands.jax_dtype_kind(aval) is not None:
            # a semaphore output (``semaphore_operands.typed_lowering_context``)
            shapes.append(semaphore_operands.jax_out_shape(
                semaphore_operands.jax_dtype_kind(aval), shape))
            continue
        placed = getattr(m, "array_memory_space", None)
        if (placed is not None and not interpreting and not getattr(mat, "varying", None)
                and not key_operands.is_key(dtype)):
            # out_shape was pltpu.X(shape, dtype): JAX has XLA allocate the output there
            shapes.append(block_memory_space(placed)(shape, dtype))
            continue
        if key_operands.is_key(dtype):
            shape, dtype = (key_operands.physical_type(dtype, shape) if interpreting
                            else (shape, key_operands.for_mosaic_dtype(dtype)))
        shapes.append(jax.ShapeDtypeStruct(shape, dtype, **kw))
    return shapes


def jax_compiler_params(kernel: KernelIR):
    from jax.experimental.pallas import tpu as pltpu
    params = kernel.compiler_params
    if isinstance(params, CompilerParams):
        if params.dimension_semantics is not None:
            user_axes = len(kernel.grid) - kernel.num_batch_axes
            if len(params.dimension_semantics) != user_axes:
                raise ValueError(
                    f"Kernel '{kernel.name}': dimension_semantics has "
                    f"{len(params.dimension_semantics)} entries but the grid has {user_axes} axes.")
        return params.to_jax(kernel.num_batch_axes)
    if kernel.num_batch_axes:
        return pltpu.CompilerParams(
            dimension_semantics=("parallel",) * kernel.num_batch_axes
            + ("arbitrary",) * (len(kernel.grid) - kernel.num_batch_axes))
    return pltpu.CompilerParams()


def _simulated_cores(kernel: KernelIR, params, jax_interpret):
    """TPU interpret mode runs "parallel" axes on its simulated cores and
    knows no "core_parallel": such axes (a TensorCoreMesh's) become parallel
    axes with one simulated core per point, as JAX does for its core_map."""
    import dataclasses
    sem = params.dimension_semantics
    if not sem or not any(str(getattr(d, "value", d)) == "core_parallel" for d in sem):
        return params, jax_interpret
    cores = 1
    for a, (d, size) in enumerate(zip(sem, kernel.grid)):
        if str(getattr(d, "value", d)) == "core_parallel":
            if size is None:
                raise ValueError(
                    f"Kernel '{kernel.name}': grid axis {a} is \"core_parallel\" but its size is "
                    "known only at run time; interpret mode needs a static number of cores. "
                    "Give that axis a Python int size.")
            cores *= size
    sem = tuple("parallel" if str(getattr(d, "value", d)) == "core_parallel" else d for d in sem)
    params = dataclasses.replace(params, dimension_semantics=sem)
    cores = max(cores, jax_interpret.num_cores_or_threads)
    return params, dataclasses.replace(jax_interpret, num_cores_or_threads=cores)


def _core_axis_names(kernel: KernelIR) -> tuple:
    sem = getattr(kernel.compiler_params, "dimension_semantics", None) or ()
    names = kernel.grid_names[kernel.num_batch_axes:] if kernel.grid_names else ()
    return tuple(n for n, d in zip(names, sem) if n is not None and d == "core_parallel")


def build_pallas_call(kernel: KernelIR, out_avals: Sequence, interpret: InterpretParams | None):
    """The JAX pallas_call equivalent to ``kernel``; call it on the flat operands
    (for a dynamic grid, its sizes first, as ``pallas_call_p`` has them)."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    # Index maps that read prefetched scalars are checked when they run; the
    # frontend checked all others over the whole grid at trace time.
    guard = kernel.name if interpret is not None and kernel.num_scalar_prefetch else None
    key_data = interpret is not None
    in_specs = [block_spec(m, guard, key_data) for m in kernel.in_mappings]
    out_specs = [block_spec(m, guard, key_data) for m in kernel.out_mappings]
    scratch = [scratch_type_of_aval(a) for a in kernel.scratch_avals]
    n_globals = len(kernel_globals.global_equations(kernel))
    scratch += kernel_globals.scratch_types(kernel)
    prng_state = interpret is not None and interpret_mode.uses_prng(kernel)
    if prng_state:
        scratch.append(interpret_mode.prng_state_type())
    params = jax_compiler_params(kernel)
    jax_interpret = False
    if interpret is not None:
        params, jax_interpret = _simulated_cores(kernel, params, interpret.to_jax())
        check.check_shared_vmem_in_interpret(kernel, jax_interpret.num_cores_or_threads)
    kernel_globals.check_single_core(
        kernel, jax_interpret.num_cores_or_threads if jax_interpret else 1)
    n_dynamic = len(kernel.dynamic_grid_axes)
    out_shapes = _out_shapes(kernel, out_avals, interpret is not None)
    # aliased outputs JAX's interpreter would return padded (interpret_mode's notes)
    padding = (interpret_mode.AliasPadding.needed(kernel, _is_unwindowed)
               if interpret is not None else None)

    def call_with_grid(sizes):
        grid = _grid_with_sizes(kernel.grid, sizes)
        if kernel.grid_names:   # lax.axis_index(name) in the body reads them
            grid = tuple(zip(kernel.grid_names, grid))
        grid_spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=kernel.num_scalar_prefetch, grid=grid,
            in_specs=in_specs, out_specs=out_specs, scratch_shapes=scratch)
        # Our interpret choice was made above: JAX's forced mode (which our
        # force_tpu_interpret_mode also sets, for jit's cache key) must not override it.
        with pltpu.force_tpu_interpret_mode(None):
            return pl.pallas_call(
                _kernel_body(kernel, interpret is not None, prng_state, _core_axis_names(kernel),
                             n_globals),
                out_shape=padding.out_shapes(out_shapes) if padding else out_shapes,
                grid_spec=grid_spec,
                input_output_aliases=dict(kernel.input_output_aliases),
                compiler_params=params, cost_estimate=_cost_estimate(kernel),
                interpret=jax_interpret,
                # compiled, JAX's debug output adds its kernel jaxpr and Mosaic module
                debug=kernel.debug and interpret is None,
                name=kernel.name, metadata=dict(kernel.metadata) or None)

    if not n_dynamic:
        call = call_with_grid(())

    def run(*args):
        # JAX takes a dynamic grid dim as a traced scalar: the call is built here,
        # inside the lowering's trace, where the sizes are.
        this_call = call_with_grid(args[:n_dynamic]) if n_dynamic else call
        if interpret is not None:
            interpret_mode.reset_after_failure()
        operands = [jax.random.key_data(x) if key_data and key_operands.is_key(x.dtype)
                    else key_operands.to_mosaic(x) for x in args[n_dynamic:]]
        if padding:
            operands = padding.pad_inputs(operands, jax_interpret.uninitialized_memory)
        with pltpu.force_tpu_interpret_mode(None):
            outs = list(this_call(*operands))
        if padding:
            outs = padding.cut_outputs(outs, out_shapes)
        return [key_operands.wrap(o, m.dtype) if key_data and key_operands.is_key(m.dtype)
                else key_operands.from_mosaic(o, m.dtype) for o, m in zip(outs, kernel.out_mappings)]
    return run


def dynamic_shapes_export(kernel: KernelIR):
    """JAX's pallas_export_experimental, on when ``kernel`` has symbolic
    (jax.export) grid or block sizes: they reach the IR only under the frontend's
    switch, and JAX reads its own while tracing and lowering its pallas_call."""
    from jax.experimental import pallas as pl
    sizes = [g for g in kernel.grid if g is not None]
    sizes += [d for m in kernel.mappings for d in m.block_shape]
    return pl.pallas_export_experimental(
        dynamic_shapes=any(not isinstance(d, int) for d in sizes))


def _grid_with_sizes(grid, sizes):
    """``grid`` with its ``None`` entries (dynamic axes) replaced, in order, by ``sizes``."""
    sizes = iter(sizes)
    return tuple(next(sizes) if g is None else g for g in grid)


def _cost_estimate(kernel: KernelIR):
    from jax.experimental import pallas as pl
    c = kernel.cost_estimate
    if c is None:
        return None
    return pl.CostEstimate(flops=c.flops, transcendentals=c.transcendentals,
                           bytes_accessed=c.bytes_accessed)
