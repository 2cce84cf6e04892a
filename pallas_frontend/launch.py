"""`pallas_call` and `kernel`: launching kernels (the deprecated `core_map`: core_map_launch)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax

from pallas_frontend import (captured_scalars, closed_refs, foreign_params, frames,
                             hijax_operands, params_fields, pinned_buffers, ref_checks, registry)
from pallas_frontend.call_primitive import declares_side_effects, pallas_call_p
from pallas_frontend.export import is_runtime_size, record_symbolic_grid
from pallas_frontend.jitted_call import JittedCall
from pallas_frontend.output_coverage import check_grid
from pallas_frontend import _jax_compat as jc
from pallas_frontend.primitives import enable_debug_checks, take_kernel_failure
from pallas_frontend.specs import (CompilerParams, CostEstimate, GridSpec, MemoryRef,
                                   no_block_spec)
from pallas_frontend.tracing import (alias_mapping, block_mapping, build_kernel_ir,
                                     grid_sizes_operand, normalize_out_shape, resolve_grid_spec)

frames.hide_frontend()     # our frames leave tracebacks as JAX's own do


def _names_kernel(launch):
    """Errors of a launch (bad specs, index maps, operands, tracing) name the
    kernel function and its line, as JAX's ``name_and_src_info`` does."""
    @jc.api_boundary
    @functools.wraps(launch)
    def wrapped(kernel, *args, **kwargs):
        try:
            return launch(kernel, *args, **kwargs)
        except Exception as e:
            _name_kernel_error(e, kernel, kwargs.get("name"))
            raise
    return wrapped


def _name_kernel_error(e: Exception, kernel: Callable, name: str | None) -> None:
    from pallas_frontend.call_primitive import name_kernel_in_error
    from pallas_frontend.index_maps import source_of
    frames.explain_traced_python_value(e)
    fn_name, source = getattr(kernel, "__name__", repr(kernel)), source_of(kernel)
    label = (f"{name} for kernel function {fn_name} at {source}" if name and name != fn_name
             else f"{fn_name} at {source}")
    name_kernel_in_error(e, label, name or fn_name, source)


@_names_kernel
@hijax_operands.takes_hijax_types      # operands of JAX's hijax types: over their arrays
def pallas_call(
    kernel: Callable[..., None],
    out_shape: Any,
    *,
    grid_spec: GridSpec | None = None,
    grid: Any = (),
    in_specs: Any = no_block_spec,
    out_specs: Any = no_block_spec,
    scratch_shapes: Any = (),
    input_output_aliases: Mapping[int, int] | None = None,
    debug: bool = False,
    interpret: Any = False,
    name: str | None = None,
    compiler_params: Any = None,
    cost_estimate: CostEstimate | None = None,
    metadata: dict[str, str | int | float] | None = None,
    backend: str | None = None,
    allow_unwritten_outputs: bool | Sequence[int] = False,
) -> Callable[..., Any]:
    """Returns a function that runs ``kernel`` once per point of ``grid``.

    The kernel receives one Ref per input and output (in the pytree structure
    of the arguments and of ``out_shape``), then the scratch Refs (as keyword
    arguments if ``scratch_shapes`` is a dict). Each Ref holds the block its
    BlockSpec selects at the current grid point. The kernel returns None.

    ``interpret=True`` runs the built-in reference interpreter on any platform;
    ``compiler_params`` of a backend's type choose that backend; ``backend=``
    names one explicitly. On CPU the interpreter is the default.

    An output element that no grid point writes is a warning
    (``pl.UnwrittenOutputWarning``), an error under ``pl.enable_debug_checks``;
    ``allow_unwritten_outputs=True`` (or a tuple of flat output indices) allows it.
    """
    gs = resolve_grid_spec(grid_spec, grid, in_specs, out_specs, scratch_shapes)
    if name is not None and not isinstance(name, str):    # JAX fails in a regex on it
        raise TypeError(f"name= must be a str (the kernel's name in errors and profiles) or "
                        f"None, got {name!r} of type {type(name).__name__}; pass str(...) of it.")
    if cost_estimate is not None and not isinstance(cost_estimate, CostEstimate):
        raise TypeError(f"cost_estimate must be a pl.CostEstimate, got {type(cost_estimate).__name__}")
    interpret, compiler_params = foreign_params.adopt(interpret, compiler_params)
    params_fields.check_params_objects(interpret, compiler_params)
    if compiler_params is not None and not _is_params_dataclass(compiler_params):
        raise TypeError(
            f"compiler_params must be a backend's CompilerParams dataclass (e.g. "
            f"pallas_triton.CompilerParams(...)), got {compiler_params!r}.")
    # JAX's kernels (tokamax's gmm_v2) pass numbers as values too; JAX keeps them as given
    if metadata is not None and not all(isinstance(k, str) and isinstance(v, (str, int, float))
                                        for k, v in metadata.items()):
        raise TypeError(f"metadata must map str keys to str, int or float values, got "
                        f"{metadata!r}.")
    registry.check_interpret_arguments(interpret, compiler_params, backend)
    aliases = alias_mapping(input_output_aliases)
    allowed = _allowed_unwritten(allow_unwritten_outputs)
    normalize_out_shape(out_shape)   # bad shapes are refused here, before any call

    static_grid = all(isinstance(g, int) for g in gs.grid)
    side_effecting = declares_side_effects(compiler_params) or not jax.tree.leaves(out_shape)

    def trace(mode, debug_checks, dyn_sizes, *args):
        ir, out_tree = build_kernel_ir(
            kernel, args, out_shape, gs, name=name, aliases=aliases,
            compiler_params=compiler_params, cost_estimate=cost_estimate, metadata=metadata,
            debug=debug,
            # an interpreter checking every Ref access as it runs (JAX's TPU interpret
            # mode) keeps that say, as does a kernel compiled with bounds checks disabled
            check_refs=ref_checks.checks_static_bounds(mode, compiler_params))
        # Refs the body closes over become aliased operands (closed_refs.py)
        ir, closed = closed_refs.hoist(ir, block_mapping)
        # pl.kernel's traced scalars become inputs after the others (captured_scalars.py)
        ir, scalars = captured_scalars.hoist(ir, block_mapping)
        record_symbolic_grid(ir, gs.grid)     # jax.export: sizes the interpreter proves with
        # A backend's interpret mode may be asked to read out-of-range blocks as
        # uninitialized memory (pallas_tpu.InterpretParams(out_of_bounds_reads=...)).
        # Output coverage (output_coverage.py): blocks known at trace time only.
        if gs.num_scalar_prefetch == 0 and static_grid:
            check_grid(ir, check_ranges=getattr(mode, "out_of_bounds_reads", "raise") == "raise",
                       debug_checks=debug_checks, allowed=allowed)
        flat_args = jax.tree.leaves(args)
        pos = grid_sizes_operand(ir)
        if pos is not None:      # an index map reads pl.num_programs of a traced axis
            flat_args.insert(pos, jax.numpy.stack(dyn_sizes))
        if closed:     # their values go in after the scalar-prefetch operands
            n_pf = ir.num_scalar_prefetch
            flat_args[n_pf:n_pf] = [r[...] for r in closed]
        flat_args += [jax.numpy.reshape(v, (1,)) for v in scalars]
        outs = pallas_call_p.bind(*dyn_sizes, *flat_args, kernel=ir, interpret=mode,
                                  backend=backend)
        if closed:     # and come back first among the outputs
            for r, v in zip(closed, outs[:len(closed)]):
                r[...] = v
            outs = outs[len(closed):]
        return jax.tree.unflatten(out_tree, outs)

    # The debug-checks flag is read while tracing, so it is part of the cache key.
    traced = functools.partial(jax.jit, inline=True, static_argnums=(0, 1))(trace)

    def call(*args):
        # A dynamic grid's sizes are operands (KernelIR.dynamic_grid_axes).
        dyn_sizes = [jax.numpy.asarray(g, jax.numpy.int32) for g in gs.grid
                     if is_runtime_size(g)]
        # A backend's own interpret mode (e.g. pallas_tpu.force_tpu_interpret_mode)
        # is read at each call and is part of the trace's cache key.
        mode = registry.effective_interpret(interpret, compiler_params)
        take_kernel_failure()
        try:
            # a pinned buffer's type has no sharding, which a jit's outputs need (JAX 0.12)
            # a side-effecting launch (or one with no results, as JAX's pl.kernel keeps it)
            # is bound where the caller traces: JAX 0.11+ drops a jit whose outputs go unused
            run = (trace if pinned_buffers.any_pinned(args) or side_effecting else traced)
            outs = run(mode, enable_debug_checks.value, dyn_sizes, *args)
            if jc.CALLBACK_ERRORS_SURFACE_ON_WAIT and not any(
                    isinstance(o, jax.core.Tracer) for o in jax.tree.leaves(outs)):
                jax.block_until_ready(outs)    # so that a failed check raises here
            return outs
        except jax.errors.JaxRuntimeError as e:
            failure = take_kernel_failure()   # a check that failed in a host callback
            if failure is not None and str(failure) in str(e):
                _name_kernel_error(failure, kernel, name)
                raise failure from e
            raise
        except Exception as e:     # tracing: index maps, specs against operands, the body
            _name_kernel_error(e, kernel, name)
            raise

    call = jc.api_boundary(call)      # our frames leave its tracebacks, as JAX's do
    functools.update_wrapper(call, kernel, assigned=("__name__", "__qualname__", "__doc__"),
                             updated=())
    return JittedCall(call, kernel)     # with JAX's .lower/.trace/.eval_shape


def _allowed_unwritten(allow) -> bool | tuple[int, ...]:
    if isinstance(allow, bool):
        return allow
    if isinstance(allow, Sequence) and all(isinstance(j, int) and not isinstance(j, bool)
                                           for j in allow):
        return tuple(allow)
    raise TypeError(f"allow_unwritten_outputs must be a bool or a sequence of flat output "
                    f"indices (ints), got {allow!r}.")


def _is_params_dataclass(p) -> bool:
    return isinstance(p, CompilerParams) or hasattr(p, "__dataclass_fields__")


def kernel(body: Callable | Sequence[Callable] | None = None, out_type: Any = (), *, mesh: Any,
           scratch_types: Any = (), compiler_params: Any = None, interpret: Any = False,
           cost_estimate=None, debug: bool = False, name: str | None = None, metadata=None):
    """Runs ``body(*in_refs, *out_refs, *scratch_refs)`` once per point of ``mesh``.

    Unlike ``pallas_call`` there is no windowing: every Ref is the whole
    array. ``mesh`` is any object with a ``shape`` mapping of axis name to
    size (e.g. a backend's core mesh); its axes become the named grid, so
    ``pl.program_id("x")`` and ``lax.axis_index("x")`` are this program's
    coordinate. Without ``body`` it is a decorator.

    Arguments may be Refs (``jax.new_ref``): the body gets a Ref it updates in
    place. MPMD: ``body`` and ``mesh`` may be parallel sequences; the bodies
    then run one after the other (each over its own mesh) on the same inputs,
    outputs and Refs -- one valid schedule of bodies that do not wait on each
    other.
    """
    opts = dict(out_type=out_type, scratch_types=scratch_types, compiler_params=compiler_params,
                interpret=interpret, cost_estimate=cost_estimate, debug=debug, name=name,
                metadata=metadata)
    is_seq = isinstance(mesh, (list, tuple))
    if body is None:
        if is_seq:
            raise ValueError("mesh cannot be a sequence when using pl.kernel as a decorator.")
        return lambda fn: kernel(fn, mesh=mesh, **opts)
    if isinstance(body, (list, tuple)):
        if not is_seq:
            raise ValueError("mesh must be a sequence when body is a sequence of callables.")
        if len(body) != len(mesh):
            raise ValueError("body and mesh sequences must have the same length.")
        pairs = list(zip(mesh, body))
    elif is_seq:
        raise ValueError("mesh cannot be a sequence when body is a single callable.")
    else:
        pairs = [(mesh, body)]
    grids = [_mesh_grid(m, "pl.kernel") for m, _ in pairs]

    def run(*args):
        from pallas_frontend import _jax_compat as jc
        flat, args_tree = jax.tree.flatten(args)
        is_ref = [isinstance(jax.typeof(a), jc.AbstractRef) for a in flat]
        _refuse_repeated_refs(pairs[0][1], args, flat, is_ref)
        values = [a[...] if r else a for a, r in zip(flat, is_ref)]
        ref_avals = [jax.typeof(a) if r else None for a, r in zip(flat, is_ref)]
        outs = None
        for (m, fn), grid in zip(pairs, grids):
            values, outs = _launch_on_mesh(fn, m, grid, values, args_tree, is_ref, outs, opts,
                                           ref_avals)
        for a, v, r in zip(flat, values, is_ref):
            if r:
                a[...] = v
        return outs
    return run


def _refuse_repeated_refs(body, args, flat, is_ref):
    """One Ref under two argument names would be two separate outputs, and one
    update would overwrite the other: refused, as jax.jit refuses it."""
    seen = {}
    for k, (a, r) in enumerate(zip(flat, is_ref)):
        if r and id(a) in seen:
            paths = [jax.tree_util.keystr(p, simple=True, separator=".")
                     for p, _ in jax.tree_util.tree_flatten_with_path(args)[0]]
            name = getattr(body, "__name__", "kernel")
            raise ValueError(
                f"pl.kernel({name}): the same Ref is passed as argument {paths[seen[id(a)]]} and "
                f"as argument {paths[k]}; a kernel takes each Ref once (updates through one "
                f"name would be lost). Pass it once and use it under one name.")
        if r:
            seen[id(a)] = k


def _launch_on_mesh(body, mesh, grid, values, args_tree, is_ref, prev_outs, opts,
                    ref_avals=None):
    """One body over one mesh. Returns (new argument values, outputs)."""
    out_type = opts["out_type"]
    out_leaves, out_tree = jax.tree.flatten(out_type, is_leaf=lambda x: hasattr(x, "shape"))
    ref_pos = [i for i, r in enumerate(is_ref) if r]
    n_in, n_out, n_ref = len(values), len(out_leaves), len(ref_pos)
    inputs = list(values) + (list(jax.tree.leaves(prev_outs)) if prev_outs is not None else [])
    aliases = {i: n_out + k for k, i in enumerate(ref_pos)}
    if prev_outs is not None:       # a later MPMD body continues the outputs
        aliases.update({n_in + j: j for j in range(n_out)})
    # an out_type placed in a memory space (pltpu.VMEM(shape, dtype)) stays placed
    out_shapes = [o if isinstance(o, MemoryRef) else jax.ShapeDtypeStruct(o.shape, o.dtype)
                  for o in out_leaves]
    out_shapes += [jax.ShapeDtypeStruct(values[i].shape, values[i].dtype) for i in ref_pos]

    def wrapper(*refs, **named_scratch):
        # scratch_types given as a dict reach the body as keyword arguments, as in JAX
        ins, rest = refs[:len(inputs)], refs[len(inputs):]
        outs, scratch = rest[:n_out + n_ref], rest[n_out + n_ref:]
        # A Ref argument is the aliased output: updates land in place.
        user_in = [outs[n_out + ref_pos.index(i)] if is_ref[i] else ins[i] for i in range(n_in)]
        user_out = jax.tree.unflatten(out_tree, outs[:n_out])
        user_out = user_out if isinstance(user_out, (tuple, list)) else (user_out,)
        return body(*jax.tree.unflatten(args_tree, user_in), *user_out, *scratch,
                    **named_scratch)

    functools.update_wrapper(wrapper, body, assigned=("__name__", "__qualname__"), updated=())
    wrapper.__wrapped__ = body       # source_of() reports the body's file:line
    launch = pallas_call(
        wrapper, tuple(out_shapes), grid=grid, scratch_shapes=opts["scratch_types"],
        # a Ref argument's memory space is read off the Ref's type (ref_avals)
        in_specs=_mesh_specs(mesh, inputs, [*ref_avals, *[None] * (len(inputs) - n_in)]
                             if ref_avals else None),
        out_specs=_mesh_specs(mesh, tuple(out_shapes), [None] * n_out +
                              [ref_avals[i] for i in ref_pos] if ref_avals else None),
        input_output_aliases=aliases,
        compiler_params=_mesh_compiler_params(mesh, opts["compiler_params"]),
        interpret=opts["interpret"], cost_estimate=opts["cost_estimate"], debug=opts["debug"],
        name=opts["name"] or getattr(body, "__name__", None), metadata=opts["metadata"])
    # as JAX's core_map, the body may close over traced scalars (e.g. a loop index)
    with captured_scalars.accepting(_scalar_space(mesh)):
        results = launch(*inputs)
    new_values = list(values)
    for k, i in enumerate(ref_pos):
        new_values[i] = results[n_out + k]
    return new_values, jax.tree.unflatten(out_tree, list(results[:n_out]))


def _scalar_space(mesh: Any):
    """Where traced scalars the body captures are passed: the mesh's
    ``scalar_memory_space`` (a TPU core's SMEM), else where its operands are."""
    from pallas_frontend.specs import MemorySpace
    return (getattr(mesh, "scalar_memory_space", None)
            or getattr(mesh, "default_memory_space", None) or MemorySpace.ANY)


def _mesh_compiler_params(mesh: Any, compiler_params: Any):
    """A backend's mesh (e.g. ``pallas_tpu.TensorCoreMesh``) may name the
    compiler params that run its axes (and so select that backend); a mesh
    whose kernels differ in kind (e.g. SparseCore) completes the user's own
    params with ``complete_compiler_params``, as JAX's mesh sets the kernel type."""
    if compiler_params is None:
        return registry.params_of_mesh(mesh)
    complete = getattr(mesh, "complete_compiler_params", None)
    return complete(compiler_params) if callable(complete) else compiler_params


def _mesh_specs(mesh: Any, tree: Any, avals=None):
    """Whole-array specs, in the mesh's ``default_memory_space`` if it has one
    (a core mesh shares its operands between cores: they stay in HBM), or in
    the space the mesh's ``operand_memory_space(aval)`` reads off an operand
    (e.g. one placed in SMEM with ``pltpu.with_memory_space_constraint``). ``avals``
    (for a flat ``tree``) gives the type to read instead, where not None: a Ref
    argument's (e.g. a backend's semaphores made outside the kernel)."""
    space = getattr(mesh, "default_memory_space", None)
    if space is None:
        return no_block_spec
    from pallas_frontend.specs import BlockSpec
    placed = getattr(mesh, "operand_memory_space", None) or (lambda aval: None)

    def space_of(x, aval=None):
        if isinstance(x, MemoryRef):     # an out_type the user placed: the body sees it there
            return x.memory_space
        return placed(aval if aval is not None else jax.typeof(x)) or space
    if avals is not None:
        return type(tree)(BlockSpec(memory_space=space_of(x, a)) for x, a in zip(tree, avals))
    return jax.tree.map(lambda x: BlockSpec(memory_space=space_of(x)), tree)


def _mesh_grid(mesh: Any, fn_name: str):
    shape = getattr(mesh, "shape", None)
    if not isinstance(shape, Mapping):
        raise TypeError(f"{fn_name}: mesh must have a `shape` mapping axis names to sizes, "
                        f"got {mesh!r}.")
    return tuple((str(k), int(v)) for k, v in shape.items())
