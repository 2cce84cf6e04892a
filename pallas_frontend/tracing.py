"""From a kernel function, its operands and specs to a validated ``KernelIR``.

Every check on user input happens here, at trace time, before anything runs;
each message names the operand and says what to change.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from pallas_frontend import _jax_compat as jc
from pallas_frontend import axis_binding, captured_scalars, scopes
from pallas_frontend.backend_api import BlockMapping, KernelIR
from pallas_frontend.index_maps import _fn_name, _type_str, source_of, trace_index_map
from pallas_frontend.frames import traced_as
from pallas_frontend.grid_context import kernel_params
from pallas_frontend.primitives import (
    GridSizeInIndexMap, enable_debug_checks, grid_context, ref_aval_of)
from pallas_frontend.ref_checks import (
    check_ref_accesses, interpreted_bounds_note, normalize_negative_indices, static_slice_errors)
from pallas_frontend.export import is_runtime_size, symbolic_blocked
from pallas_frontend.specs import (
    BlockSpec, Blocked, GridSpec, MemoryRef, MemorySpace, PallasTypeError,
    PallasUsageError, canonicalize_block_dim, check_dims, from_jax_block_spec, no_block_spec,
    value_dtype)


# PallasUsageError and PallasTypeError live with the specs (a leaf module) and
# are imported above, so ``pallas_frontend.tracing.PallasUsageError`` still works.


def tree_mismatch_message(what1: str, tree1, what2: str, tree2) -> str:
    """JAX's wording for two pytrees that differ, with every difference."""
    errs = list(jc.tree_equality_errors(tree1, tree2))
    lines = [f"Pytree for {what1} and {what2} do not match. "
             f"There are {len(errs)} mismatches, including:"]
    for path, thing1, thing2, why in errs:
        where = f"at {jax.tree_util.keystr(path)}, " if path else ""
        lines.append(f"    * {where}{what1} is a {thing1} but {what2} is a {thing2}, so {why}")
    return "\n".join(lines)


# --- trees --------------------------------------------------------------------

def _is_spec_leaf(x):
    return x is None or x is no_block_spec or isinstance(x, BlockSpec)


def flatten_specs(specs: Any, values_tree, what: str, values_name: str) -> list[BlockSpec | None]:
    """Flattens a BlockSpec tree that must match ``values_tree``'s structure.

    ``no_block_spec`` (whole arrays) matches anything. A ``None`` spec is the
    whole array, except where the value is ``None`` too (an optional operand,
    e.g. ``f(q, k, v, None)`` with ``in_specs=[..., None]``): as in JAX, both
    are empty subtrees and drop out together.
    """
    if specs is no_block_spec:
        return [None] * values_tree.num_leaves
    flat, tree = jax.tree.flatten(specs, is_leaf=_is_spec_leaf)
    if tree != values_tree:
        # JAX's reading: None is an empty subtree, in specs as in values.
        jax_flat, jax_tree = jax.tree.flatten(
            specs, is_leaf=lambda x: x is no_block_spec or isinstance(x, BlockSpec))
        if jax_tree == values_tree:
            return [None if s is no_block_spec else s for s in jax_flat]
        # A single spec for a single value is allowed (out_specs=BlockSpec for one output).
        if values_tree.num_leaves == 1 and len(flat) == 1 and isinstance(specs, BlockSpec):
            return flat
        raise PallasUsageError(
            tree_mismatch_message(f"`{what}`", tree, f"`{values_name}`", values_tree)
            + f"\n`{what}` has structure {tree} ({len(flat)} specs) but `{values_name}` has "
            f"structure {values_tree} ({values_tree.num_leaves} arrays). Give one BlockSpec "
            f"(or None for the whole array) per array, in the same nesting; an operand passed "
            f"as None takes a None spec.")
    return [None if s is no_block_spec else s for s in flat]


def _paths(tree_value, prefix: str) -> list[str]:
    leaves = jax.tree_util.tree_flatten_with_path(tree_value)[0]
    return [prefix + jax.tree_util.keystr(p) for p, _ in leaves]


def normalize_out_shape(out_shape: Any):
    """Flattens out_shape into avals; every leaf must have .shape and .dtype."""
    if isinstance(out_shape, list):
        out_shape = tuple(out_shape)
    leaves, tree = jax.tree.flatten(out_shape, is_leaf=lambda x: hasattr(x, "shape") and hasattr(x, "dtype"))
    avals, spaces = [], []
    for path, leaf in zip(_paths(out_shape, "out_shape"), leaves):
        if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
            raise TypeError(
                f"{path} is a {type(leaf).__name__} ({leaf!r}); out_shape must be a pytree of "
                "jax.ShapeDtypeStruct (or arrays, or pl.MemorySpace.X(shape, dtype)). "
                "Write jax.ShapeDtypeStruct(shape, dtype).")
        avals.append(jc.ShapedArray(check_dims(leaf.shape, path), value_dtype(leaf.dtype)))
        spaces.append(leaf.memory_space if isinstance(leaf, MemoryRef) else None)
    return avals, spaces, tree


# --- block mappings ---------------------------------------------------------------

def block_mapping(spec: BlockSpec | None, aval: jc.ShapedArray, origin: str, num_grid: int,
                  prefetch_avals=(), prefetch_tree=None, grid_sizes=None,
                  sizes_ref=False) -> BlockMapping:
    spec = from_jax_block_spec(spec)
    if spec is not None and not isinstance(spec, BlockSpec):
        raise TypeError(f"{origin}: expected a pl.BlockSpec or None, got {spec!r}.")
    shape = aval.shape
    block_shape = None if spec is None else spec.block_shape
    if block_shape is None:
        dims = tuple(symbolic_blocked(d, origin) if jc.is_symbolic_dim(d) else
                     Blocked(d) if d > 0 else Blocked(1) for d in shape)
    else:
        if not isinstance(block_shape, (tuple, list)):
            raise TypeError(f"Block shape for {origin} must be a tuple, got {block_shape!r}.")
        if len(block_shape) != len(shape):
            raise ValueError(
                f"Block shape for {origin} (= {tuple(block_shape)}) must have the same number of "
                f"dimensions as the array shape {shape}: give one entry per array dim (None to "
                "squeeze a dim).")
        dims = tuple(symbolic_blocked(d, origin) if jc.is_symbolic_dim(d) else
                     canonicalize_block_dim(d, origin) for d in block_shape)
    index_map, src = trace_index_map(spec, dims, origin, num_grid, prefetch_avals,
                                     prefetch_tree, grid_sizes, sizes_ref)
    return BlockMapping(
        origin=origin, array_shape=tuple(shape), dtype=value_dtype(aval.dtype), block_dims=dims,
        index_map=index_map, index_map_source=src,
        memory_space=None if spec is None else spec.memory_space,
        pipeline_mode=None if spec is None else spec.pipeline_mode)


def _to_block_mapping(self: BlockSpec, origin: str, array_aval, *, grid=(), index_map_avals=None,
                      **_ignored) -> BlockMapping:
    """This spec applied to an array of type ``array_aval`` on ``grid``: the
    ``BlockMapping`` a backend sees (index map traced over one int32 per grid
    axis, or over ``index_map_avals``). JAX's other keywords
    (``index_map_tree``, ``vmapped_dims``, ``debug``) are accepted and unused."""
    grid = tuple(grid)
    extra = list(index_map_avals or ())[len(grid):]    # scalar-prefetch Refs
    n = len(grid) if grid or index_map_avals is None else len(index_map_avals)
    return block_mapping(self, array_aval, origin, n, extra if grid else ())


BlockSpec.to_block_mapping = _to_block_mapping


def kernel_ref_aval(m: BlockMapping) -> jc.AbstractRef:
    # Without a memory space the Ref is in the backend's default one (printed
    # Ref<default>{...}, as JAX prints it).
    space = m.memory_space if m.memory_space is not None else MemorySpace.DEFAULT
    return jc.AbstractRef(jc.kernel_aval(m.block_shape, m.dtype), memory_space=space)


# --- the kernel body ----------------------------------------------------------------

def trace_kernel_body(kernel: Callable, name: str, grid, grid_names, ref_avals, arg_builder
                      ) -> jc.Jaxpr:
    """Traces ``kernel`` over Refs; ``arg_builder(refs) -> (args, kwargs)``.

    ``grid`` entries that are None are dynamic: their sizes become int32
    invars after the program ids (what ``pl.num_programs`` returns)."""
    num_grid = len(grid)
    dynamic = [a for a, g in enumerate(grid) if g is None]
    num_index = num_grid + len(dynamic)

    def body(*flat):
        idx, refs = flat[:num_grid], flat[num_index:]
        sizes = list(grid)
        for a, v in zip(dynamic, flat[num_grid:num_index]):
            sizes[a] = v
        args, kwargs = arg_builder(list(refs))
        # Named axes are bound as in JAX: lax.axis_size(name) is the grid size
        # and lax.axis_index(name) the program id (substituted below).
        named = [(n, g) for n, g in zip(grid_names or (), grid) if g is not None]
        with grid_context(idx, sizes, grid_names), axis_binding.bound_kernel_axes(named), \
                jc.mutable_array_checks(False):
            out = kernel(*args, **kwargs)
        if out is not None:
            raise ValueError(
                f"The kernel function in the pallas_call {_fn_name(kernel)} at "
                f"{source_of(kernel)} should return None: kernels write their results "
                f"into the output Refs (o_ref[...] = value). It returned {type(out).__name__}: "
                f"{jax.tree.map(lambda x: _type_str(x) if hasattr(x, 'dtype') else x, out)}.")
        return []

    in_avals = [jc.kernel_aval((), jnp.int32)] * num_index + list(ref_avals)
    # the names stay bound for the whole trace: JAX checks axis_index's type
    # when it closes the jaxpr, after the body has returned
    named = [(n, g) for n, g in zip(grid_names or (), grid) if g is not None]
    with static_slice_errors(), jc.extend_axis_env(named):
        jaxpr, _ = jc.trace_kernel_jaxpr(traced_as(body, kernel, num_index, len(ref_avals)),
                                          in_avals, traced_for="pallas kernel")
        # backends know a pl.run_scoped only in its flat form (empty_ref ... free_ref)
        jaxpr = scopes.inline_scopes(jaxpr)
    if grid_names and axis_binding.axis_names_read(jaxpr.jaxpr):
        def with_program_ids(*flat):
            def index_of(axis):
                # another name was bound around the kernel (a shard_map axis; the
                # first trace checked it): its axis_index stays as it is
                return flat[grid_names.index(axis)] if axis in grid_names else None
            return axis_binding.eval_binding_axis_index(jaxpr.jaxpr, jaxpr.consts, flat,
                                                        index_of, name)
        jaxpr, _ = jc.trace_kernel_jaxpr(with_program_ids, in_avals, traced_for="pallas kernel")
    captured_scalars.refuse_unpassable(jaxpr, name)
    return jaxpr


# --- pallas_call arguments -> KernelIR ---------------------------------------------

def resolve_grid_spec(grid_spec, grid, in_specs, out_specs, scratch_shapes) -> GridSpec:
    if grid_spec is None:
        return GridSpec(grid, in_specs, out_specs, scratch_shapes)
    if not isinstance(grid_spec, GridSpec):
        raise TypeError(f"grid_spec must be a pl.GridSpec, got {type(grid_spec).__name__}.")
    given = {"grid": grid != (), "in_specs": in_specs is not no_block_spec,
             "out_specs": out_specs is not no_block_spec, "scratch_shapes": scratch_shapes != ()}
    clash = [k for k, v in given.items() if v]
    if clash:
        raise PallasUsageError(
            f"If `grid_spec` is specified, then {', '.join('`%s`' % c for c in clash)} must be "
            "left at the default: put them into the GridSpec instead.")
    return grid_spec


# KernelIR.metadata key: the position, among the scalar-prefetch operands, of
# the one the frontend adds (the traced grid sizes an index map reads).
GRID_SIZES_OPERAND = "pallas_frontend.grid_sizes_operand"


def grid_sizes_aval(grid) -> jc.AbstractRef:
    """The Ref of the traced sizes of ``grid`` (its ``None`` entries), in axis order."""
    return jc.AbstractRef(jc.kernel_aval((sum(g is None for g in grid),), jnp.int32))


def grid_sizes_operand(ir: KernelIR) -> int | None:
    """Where ``pallas_call`` passes the traced grid sizes among the prefetch
    operands (``jnp.stack`` of them), or None if no index map reads them."""
    pos = dict(ir.metadata).get(GRID_SIZES_OPERAND)
    return None if pos is None else int(pos)


def _dict_key_order(mapping) -> list:
    """The order JAX gives a dict's scratch buffers (its pytree order: a plain
    dict's keys sorted, another mapping's as they are), so that the kernel's
    operands come in JAX's order."""
    if type(mapping) is dict:
        try:
            return sorted(mapping)
        except TypeError:
            pass
    return list(mapping)


def build_kernel_ir(kernel: Callable, args, out_shape, gs: GridSpec, *, name, aliases,
                    compiler_params, cost_estimate, metadata, debug, check_refs: bool = True):
    """Returns ``(KernelIR, out_tree)``."""
    kname = name or _fn_name(kernel)
    # Dynamic sizes (traced) are None in the IR; their values are operands.
    # (jax.export symbolic sizes stay in the grid under pallas_export_experimental)
    grid = tuple(None if is_runtime_size(g) else g for g in gs.grid)
    grid_names = gs.grid_names
    num_grid, npf = len(grid), gs.num_scalar_prefetch

    flat_args, args_tree = jax.tree.flatten(tuple(args))
    for path, a in zip(_paths(tuple(args), "args"), flat_args):
        if not hasattr(a, "shape") or not hasattr(a, "dtype"):
            raise TypeError(f"pallas_call argument {path} is a {type(a).__name__}, not an array.")
    arg_avals = [jc.ShapedArray(tuple(np.shape(a)), value_dtype(a.dtype)) for a in flat_args]
    if npf > len(args):
        raise PallasUsageError(f"num_scalar_prefetch={npf} but only {len(args)} arguments given.")
    prefetch_leaves = jax.tree.leaves(tuple(args[:npf]))
    prefetch_avals = [jc.AbstractRef(a) for a in arg_avals[:len(prefetch_leaves)]]
    pf_tree = jax.tree.structure(tuple(args[:npf]))
    main_args = tuple(args[npf:])
    main_tree = jax.tree.structure(main_args)

    out_avals, out_spaces, out_tree = normalize_out_shape(out_shape)
    in_spec_list = flatten_specs(gs.in_specs, main_tree, "in_specs", "inputs")
    out_spec_list = flatten_specs(gs.out_specs, out_tree, "out_specs", "out_shape")
    in_paths = _paths(main_args, "args")
    out_paths = ["outputs" + p[len("out_shape"):] for p in _paths(
        out_shape if not isinstance(out_shape, list) else tuple(out_shape), "out_shape")]

    def mappings(sizes_ref: bool):
        pf_avals = prefetch_avals + ([grid_sizes_aval(grid)] if sizes_ref else [])
        pf_map = dict(prefetch_tree=pf_tree, grid_sizes=grid, sizes_ref=sizes_ref)
        ins = tuple(block_mapping(s, a, p, num_grid, pf_avals, **pf_map)
                    for s, a, p in zip(in_spec_list, arg_avals[len(prefetch_leaves):], in_paths))
        outs = []
        for s, a, p, space in zip(out_spec_list, out_avals, out_paths, out_spaces):
            m = block_mapping(s, a, p, num_grid, pf_avals, **pf_map)
            if space is not None:
                m = BlockMapping(**{**m.__dict__, "array_memory_space": space,
                                    "memory_space": space if m.memory_space is None
                                    else m.memory_space})
            outs.append(m)
        return ins, tuple(outs)

    # An index map asking pl.num_programs for a traced size gets the sizes as a
    # scalar-prefetch operand of the frontend's own, after the user's ones.
    sizes_ref = False
    try:
        in_maps, out_maps = mappings(False)
    except GridSizeInIndexMap:
        sizes_ref = True
        in_maps, out_maps = mappings(True)

    alias_pairs = validate_aliases(aliases, arg_avals, _paths(tuple(args), "args"), out_avals,
                                   out_paths)

    scratch = gs.scratch_shapes
    scratch_is_dict = isinstance(scratch, Mapping)
    scratch_keys = _dict_key_order(scratch) if scratch_is_dict else None
    scratch_leaves, scratch_tree = jax.tree.flatten(
        [scratch[k] for k in scratch_keys] if scratch_is_dict else scratch,
        is_leaf=lambda x: hasattr(x, "shape") or hasattr(x, "get_ref_aval"))
    scratch_avals = tuple(ref_aval_of(t, f"scratch_shapes[{i}]") for i, t in enumerate(scratch_leaves))

    n_pf, n_in, n_out = len(prefetch_avals), len(in_maps), len(out_maps)

    def arg_builder(refs):
        if sizes_ref:      # the kernel reads its sizes from pl.num_programs, not this Ref
            refs = refs[:n_pf] + refs[n_pf + 1:]
        pf = jax.tree.unflatten(pf_tree, refs[:n_pf])
        ins = jax.tree.unflatten(main_tree, refs[n_pf:n_pf + n_in])
        outs = jax.tree.unflatten(out_tree, refs[n_pf + n_in:n_pf + n_in + n_out])
        outs = outs if isinstance(outs, tuple) else (outs,)
        # nested scratch_shapes reach the kernel nested, as in JAX
        scr = jax.tree.unflatten(scratch_tree, refs[n_pf + n_in + n_out:])
        scr = scr if isinstance(scr, (list, tuple)) else [scr]   # a lone scratch type
        if scratch_is_dict:
            return (*pf, *ins, *outs), dict(zip(scratch_keys, scr))
        return (*pf, *ins, *outs, *scr), {}

    ref_avals = [*prefetch_avals, *([grid_sizes_aval(grid)] if sizes_ref else []),
                 *(kernel_ref_aval(m) for m in in_maps),
                 *(kernel_ref_aval(m) for m in out_maps), *scratch_avals]
    # JAX 0.12 refuses a static pl.ds past a Ref while this traces, before our check
    with interpreted_bounds_note(compiler_params, check_refs), \
            kernel_params(compiler_params):
        jaxpr = trace_kernel_body(kernel, kname, grid, grid_names, ref_avals, arg_builder)
    num_index = num_grid + sum(g is None for g in grid)     # program ids, dynamic sizes
    ref_names = ([None] * num_index + [f"scalar prefetch {k}" for k in range(n_pf)]
                 + ["the grid sizes"] * sizes_ref
                 + [f"the block Ref of {m.origin}" for m in (*in_maps, *out_maps)]
                 + [f"the Ref of scratch_shapes[{k}]" for k in range(len(scratch_avals))])
    jaxpr = normalize_negative_indices(jaxpr)     # x_ref[..., -1], as NumPy reads it
    jaxpr = check_ref_accesses(jaxpr, ref_names, debug_checks=enable_debug_checks.value,
                               bounds=check_refs, compiler_params=compiler_params)

    if sizes_ref:     # flat operand n_pf is the sizes: the inputs after it move up one
        alias_pairs = tuple((i + (i >= n_pf), o) for i, o in alias_pairs)
        metadata = {**(metadata or {}), GRID_SIZES_OPERAND: str(n_pf)}
    ir = KernelIR(
        name=kname, source=source_of(kernel), jaxpr=jaxpr, grid=grid, grid_names=grid_names,
        in_mappings=in_maps, out_mappings=out_maps, scratch_avals=scratch_avals,
        num_scalar_prefetch=n_pf + int(sizes_ref), input_output_aliases=alias_pairs,
        compiler_params=compiler_params, cost_estimate=cost_estimate,
        metadata=tuple(sorted((metadata or {}).items())), debug=bool(debug),
        function_name=_fn_name(kernel))
    return ir, out_tree


def alias_mapping(aliases) -> dict:
    """``input_output_aliases`` as a dict. JAX takes a dict (a list has no
    ``.items()`` there); a sequence of ``(input, output)`` pairs (the form
    ``KernelIR`` holds) is taken too, but ``dict()`` of it would keep only
    the last pair of a repeated input: refused instead, as are non-pairs."""
    if aliases is None:
        return {}
    if isinstance(aliases, Mapping):
        return dict(aliases)
    if not isinstance(aliases, (list, tuple)):
        raise TypeError(f"input_output_aliases must be a dict {{input_index: output_index}}, "
                        f"got {type(aliases).__name__} {aliases!r}.")
    out = {}
    for pair in aliases:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise TypeError(
                f"input_output_aliases given as a sequence must hold (input_index, "
                f"output_index) pairs; got the element {pair!r} in {aliases!r}. Pass a dict "
                "{input_index: output_index}.")
        i, o = pair
        if i in out:
            raise ValueError(
                f"input_output_aliases aliases input {i} to output {out[i]} and to output "
                f"{o}; an input can alias at most one output (a dict would silently keep "
                "only the last). Give each input once.")
        out[i] = o
    return out


def validate_aliases(aliases, in_avals, in_paths, out_avals, out_paths):
    if not isinstance(aliases, Mapping):
        raise TypeError(f"input_output_aliases must be a dict {{input_index: output_index}}, "
                        f"got {aliases!r}.")
    pairs = []
    seen_out = {}
    for i, o in sorted(aliases.items()):
        if not isinstance(i, (int, np.integer)) or not 0 <= i < len(in_avals):
            raise ValueError(
                f"input_output_aliases contains the mapping '{i}:{o}' with input index {i} "
                f"outside the range [0, {len(in_avals)}) of the flattened inputs.")
        if not isinstance(o, (int, np.integer)) or not 0 <= o < len(out_avals):
            raise ValueError(
                f"input_output_aliases contains the mapping '{i}:{o}' with output index {o} "
                f"outside the range [0, {len(out_avals)}) of the flattened outputs.")
        if o in seen_out:
            raise ValueError(f"input_output_aliases maps inputs {seen_out[o]} and {i} to the same "
                             f"output {o}; each output can alias at most one input.")
        seen_out[o] = i
        a, b = in_avals[i], out_avals[o]
        if a.shape != b.shape or a.dtype != b.dtype:
            raise ValueError(
                f"input_output_aliases contains the mapping '{i}:{o}' referring to "
                f"input[{i}] with abstract value {a.str_short()} ({in_paths[i]}) and to "
                f"output[{o}] with a different abstract value {b.str_short()} "
                f"({out_paths[o]}). Aliased buffers must match in shape and dtype.")
        pairs.append((int(i), int(o)))
    return tuple(pairs)
