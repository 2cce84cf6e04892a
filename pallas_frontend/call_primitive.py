"""``pallas_call_p``: the JAX primitive a kernel launch becomes.

It carries the ``KernelIR`` as a parameter and gives JAX what it needs to
compose: abstract evaluation, a lowering rule that hands the kernel to the
selected backend, a batching rule (vmap adds a grid axis, or loops over the
batch where grid sizes or prefetch values differ per element), and a JVP rule
(the kernel's JVP is another kernel).
"""

from __future__ import annotations

import dataclasses
import sys
from functools import partial

import jax
import jax.numpy as jnp

from pallas_frontend import _jax_compat as jc
from pallas_frontend import backend_api, grid_limits, pinned_buffers, registry
from pallas_frontend.launch_effects import (launch_effects, refuse_export_of_callbacks,
                                            with_callback_tokens)
from pallas_frontend.backend_api import BlockMapping, KernelIR, LoweringContext
from pallas_frontend.backend_helpers import lowering_kernel_scope
from pallas_frontend.specs import Squeezed

pallas_call_p = jc.Primitive("pallas_call")
pallas_call_p.multiple_results = True


def _has_debug_effects(kernel: KernelIR) -> bool:
    return any(jc.debug_effect in eqn.effects or eqn.primitive.name in ("debug_print", "debug_check")
               for eqn in kernel.iter_equations())


def _abstract_eval(*in_avals, kernel: KernelIR, interpret, backend):
    outs = pinned_buffers.keep_pinned(kernel, in_avals,
                                      [jc.vary_like(a, in_avals) for a in kernel.out_avals])
    effs = {jc.debug_effect} if _has_debug_effects(kernel) else set()
    owner = registry.backend_for_params(interpret=interpret, compiler_params=kernel.compiler_params)
    if owner is not None:
        effs |= launch_effects(owner.call_effects(kernel, interpret))
    return outs, effs


pallas_call_p.def_effectful_abstract_eval(_abstract_eval)
pallas_call_p.def_impl(partial(jc.dispatch.apply_primitive, pallas_call_p))


# --- lowering -------------------------------------------------------------------

def _lowering(ctx, *args, kernel: KernelIR, interpret, backend):
    platforms = ctx.module_context.platforms
    if len(platforms) == 1:
        return _lower_for(ctx, *args, platform=platforms[0], kernel=kernel,
                          interpret=interpret, backend=backend)
    # One module for several platforms (jax.export(..., platforms=[...])): each
    # platform gets its own backend's lowering, chosen at run time by platform index.
    effects = _abstract_eval(*ctx.avals_in, kernel=kernel, interpret=interpret,
                             backend=backend)[1]
    rules = {p: partial(_lower_for, platform=p) for p in dict.fromkeys(platforms)}
    return jc.mlir.lower_per_platform(ctx, f"pallas_call {kernel.name}", rules, None, effects,
                                      *args, kernel=kernel, interpret=interpret, backend=backend)


@with_callback_tokens
@refuse_export_of_callbacks
def _lower_for(ctx, *args, platform, kernel: KernelIR, interpret, backend):
    try:
        b = registry.select_backend(platform=platform, interpret=interpret,
                                    compiler_params=kernel.compiler_params, backend=backend)
        if grid_limits.interpreting(b.name, interpret):
            grid_limits.check_interpreted_grid(kernel.grid, b.name)
        b.check(kernel)
        if kernel.debug:
            print(kernel.pretty(), file=sys.stdout)
            print(f"  backend: {b.name} {b.version} (platform {platform})", file=sys.stdout)
        with lowering_kernel_scope():
            outs = b.lower(kernel, LoweringContext(ctx, platform, interpret_params=interpret),
                           *args)
        return _checked_outputs(b, kernel, ctx, outs)
    except Exception as e:
        name_owner_in_advice(e)
        name_kernel_in_error(e, kernel.name_and_src_info, kernel.name, kernel.source)
        raise


def name_owner_in_advice(e: Exception) -> None:
    """A primitive of another backend (``check_primitive_owners``): the advice
    names that backend's own classes, when it is installed, in place."""
    from pallas_frontend.backend_base import FOREIGN_PRIMITIVE_ADVICE, public_class_name
    owner = getattr(e, "primitive_owner", None)
    generic = FOREIGN_PRIMITIVE_ADVICE.format(owner=owner)
    if owner is None or not e.args or generic not in str(e.args[0]):
        return
    try:
        b = registry.get_backend(owner)
    except Exception:  # noqa: BLE001 - not installed or broken: the generic advice stays
        return
    text = (f"On a {'/'.join(b.platforms).upper() or owner} machine, pass compiler_params="
            f"{public_class_name(b.compiler_params_type)}(...) to run it with backend '{owner}'")
    if b.interpret_params_type is not None:
        text += (f"; on this machine, run it in that backend's interpreter with "
                 f"interpret={public_class_name(b.interpret_params_type)}()")
    text += "; or write the step with the portable pallas_frontend API."
    e.args = (e.args[0].replace(generic, text), *e.args[1:])


def _checked_outputs(b, kernel: KernelIR, ctx, outs) -> list:
    """``lower``'s results as a list; a backend's mistake in them (a wrong count,
    arrays instead of MLIR values, another shape or dtype) raises here, naming the
    backend, the output and the fix, where JAX would report a ``safe_zip`` length
    or an MLIR verifier dump naming neither."""
    who = f"backend '{b.name}'" + (f" ({b.distribution} {b.version})" if b.distribution else "")
    fix = ("Backend.lower must return one MLIR value per kernel.out_mappings, of that "
           "output's array_shape and dtype; ctx.lower_fun(fn, *args) turns array code "
           "fn(*arrays) -> list into them.")
    out_avals = ctx.avals_out
    try:
        outs = list(outs)
    except TypeError:
        raise TypeError(f"{who}: Backend.lower returned {type(outs).__name__}, not a sequence. "
                        + fix) from None
    if len(outs) != len(out_avals):
        raise TypeError(f"{who}: Backend.lower returned {len(outs)} values for the kernel's "
                        f"{len(out_avals)} outputs. " + fix)
    for k, (value, aval, m) in enumerate(zip(outs, out_avals, kernel.out_mappings)):
        problem = jc.lowered_value_problem(ctx, value, aval)
        if problem:
            raise TypeError(f"{who}: Backend.lower's output {k} ({m.origin}, "
                            f"{aval.str_short()}) is {problem}. " + fix)
    return outs


def name_kernel_in_error(e: Exception, label: str, name: str, source: str) -> None:
    """Prefixes ``Kernel {label}: `` to an error message that names neither the
    kernel nor its line, in place: the type and traceback stay the user's to catch."""
    msg = e.args[0] if e.args and isinstance(e.args[0], str) else None
    if msg is None or source in msg or f"'{name}'" in msg or f"Kernel {name} " in msg:
        return
    e.args = (f"Kernel {label}: {msg}", *e.args[1:])


jc.mlir.register_lowering(pallas_call_p, _lowering)


# --- jaxpr surgery used by the transformation rules ---------------------------------

def rebuild_jaxpr(jaxpr: jc.Jaxpr, new_in_avals, select_args) -> jc.Jaxpr:
    """A jaxpr over ``new_in_avals`` that returns ``jaxpr(*select_args(new_args))``."""
    def fn(*new_args):
        return jc.eval_jaxpr(jaxpr, *select_args(list(new_args)))
    new, _ = jc.trace_kernel_jaxpr(fn, new_in_avals, traced_for="pallas transform")
    return new


def _index_avals(n):
    return [jc.ShapedArray((), jnp.int32)] * n


def _batched_mapping(m: BlockMapping, batched: bool, batch_size: int, n_grid: int,
                     prefetch_avals) -> BlockMapping:
    """The mapping of ``m`` on a grid with a new leading (batch) axis."""
    in_avals = _index_avals(n_grid + 1) + list(prefetch_avals)
    if not batched:   # the same blocks at every batch index
        index_map = rebuild_jaxpr(m.index_map, in_avals, lambda a: a[1:])
        return BlockMapping(**{**m.__dict__, "index_map": index_map})

    def batched_index_map(b, *rest):     # a squeezed leading dim indexed by the batch axis
        return [b, *jc.eval_jaxpr(m.index_map, *rest)]
    index_map, _ = jc.trace_kernel_jaxpr(batched_index_map, in_avals, traced_for="pallas index_map")
    return BlockMapping(
        origin=m.origin, array_shape=(batch_size, *m.array_shape), dtype=m.dtype,
        block_dims=(Squeezed(), *m.block_dims), index_map=index_map,
        index_map_source=m.index_map_source, memory_space=m.memory_space,
        pipeline_mode=m.pipeline_mode, array_memory_space=m.array_memory_space)


def _refuse_dynamic_grid(kernel: KernelIR, what: str):
    if kernel.dynamic_grid_axes:
        raise NotImplementedError(
            f"{what} of a pallas_call with a dynamic grid (grid {kernel.grid}, kernel "
            f"'{kernel.name}' at {kernel.source}) is not supported; give static grid sizes.")


def _batch_rule(args, dims, *, kernel: KernelIR, interpret, backend):
    sizes = {a.shape[d] for a, d in zip(args, dims) if d is not None}
    if not sizes:
        return pallas_call_p.bind(*args, kernel=kernel, interpret=interpret,
                                  backend=backend), [None] * len(kernel.out_mappings)
    (size,) = sizes
    # Operands: the dynamic grid sizes, the scalar-prefetch operands, the inputs.
    n_lead = len(kernel.dynamic_grid_axes) + kernel.num_scalar_prefetch
    if any(d is not None for d in dims[:n_lead]):
        # A batched grid size or prefetch value changes the grid or the index
        # maps per batch element: one launch per element, as JAX does.
        if size == 1:
            return _batch_of_one(args, dims, kernel=kernel, interpret=interpret, backend=backend)
        return _batch_as_loop(args, dims, size, kernel=kernel, interpret=interpret,
                              backend=backend)
    return _batch_as_grid_axis(args, dims, size, kernel=kernel, interpret=interpret,
                               backend=backend)


def _batch_of_one(args, dims, *, kernel: KernelIR, interpret, backend):
    """A batch of one element: the kernel as it is, on the element."""
    args = [a if d is None else jnp.squeeze(a, d) for a, d in zip(args, dims)]
    outs = pallas_call_p.bind(*args, kernel=kernel, interpret=interpret, backend=backend)
    return [o[None] for o in outs], [0] * len(outs)


def _batch_as_loop(args, dims, size, *, kernel: KernelIR, interpret, backend):
    """``size`` launches of the unchanged kernel in a ``fori_loop``, each on one
    batch element; every output of a launch is stored whole into its slot."""
    args = [jnp.moveaxis(a, d, 0) if d is not None else a for a, d in zip(args, dims)]
    batched = [d is not None for d in dims]

    def body(b, outs):
        elem = [jax.lax.dynamic_index_in_dim(a, b, keepdims=False) if bt else a
                for a, bt in zip(args, batched)]
        new = pallas_call_p.bind(*elem, kernel=kernel, interpret=interpret, backend=backend)
        return [jax.lax.dynamic_update_index_in_dim(o, n, b, 0) for o, n in zip(outs, new)]

    init = [jnp.zeros((size, *m.array_shape), m.dtype) for m in kernel.out_mappings]
    outs = jax.lax.fori_loop(0, size, body, init)
    return outs, [0] * len(outs)


def _batch_as_grid_axis(args, dims, size, *, kernel: KernelIR, interpret, backend):
    """One launch over a grid with a new leading axis that indexes the batch."""
    n_dyn = len(kernel.dynamic_grid_axes)
    npf = kernel.num_scalar_prefetch
    n_lead = n_dyn + npf
    args = [jnp.moveaxis(a, d, 0) if d is not None else a
            for a, d in zip(args, dims)]
    in_batched = [d is not None for d in dims[n_lead:]]
    aliased = dict(kernel.input_output_aliases)
    # An aliased input must be batched, since its output is. (Alias indices
    # count the prefetch operands, not the dynamic sizes.)
    for i in aliased:
        if i >= npf and not in_batched[i - npf]:
            args[n_dyn + i] = jnp.broadcast_to(args[n_dyn + i], (size, *args[n_dyn + i].shape))
            in_batched[i - npf] = True
    n_grid = len(kernel.grid)
    pf_avals = [jc.AbstractRef(jax.typeof(a)) for a in args[n_dyn:n_lead]]
    in_maps = tuple(_batched_mapping(m, b, size, n_grid, pf_avals)
                    for m, b in zip(kernel.in_mappings, in_batched))
    out_maps = tuple(_batched_mapping(m, True, size, n_grid, pf_avals) for m in kernel.out_mappings)
    old_avals = [v.aval for v in kernel.jaxpr.invars]
    # the batch axis is static: the dynamic sizes stay where they were, after the program ids
    body = rebuild_jaxpr(kernel.jaxpr, _index_avals(1) + old_avals, lambda a: a[1:])
    names = kernel.grid_names
    if names is not None:
        names = (f"_vmap{kernel.num_batch_axes}", *names)
    new_kernel = kernel.replace(
        jaxpr=body, grid=(size, *kernel.grid), grid_names=names, in_mappings=in_maps,
        out_mappings=out_maps, num_batch_axes=kernel.num_batch_axes + 1,
        cost_estimate=_scaled_cost(kernel.cost_estimate, size))
    outs = pallas_call_p.bind(*args, kernel=new_kernel, interpret=interpret, backend=backend)
    return outs, [0] * len(outs)


def _scaled_cost(cost, size):
    """The cost hint of ``size`` programs where there was one: each count
    times ``size`` (as JAX does, so XLA's cost analysis sees the batch). A
    symbolic size cannot scale an int: the hint is dropped then."""
    if cost is None or jc.is_symbolic_dim(size):
        return None
    return dataclasses.replace(cost, **{f.name: getattr(cost, f.name) * int(size)
                                        for f in dataclasses.fields(cost)})


jc.batching.primitive_batchers[pallas_call_p] = _batch_rule


def declares_side_effects(compiler_params) -> bool:
    """Whether a kernel's compiler params say it must run even when its
    outputs go unused (``has_side_effects=True`` or ``SIDE_EFFECTING``, e.g.
    ``pallas_tpu.CompilerParams``), as JAX reads them."""
    side = getattr(compiler_params, "has_side_effects", False)
    return side is True or getattr(side, "name", None) == "SIDE_EFFECTING"


def _dce_rule(used_outs, *live_ins_eqn):
    """An unused launch is kept as JAX's pallas_call keeps it: always up to JAX
    0.11 (whose DCE rules get no live_ins; XLA drops a pure one), from 0.12 where
    JAX's default rule keeps it or its params declare side effects. A launch
    with no outputs at all is kept too: it is a ``pl.kernel``/``core_map`` run
    for what it does on the chip, which JAX's (``mpmd_map``) never drops."""
    eqn = live_ins_eqn[-1]
    kernel = eqn.params["kernel"]
    if (len(live_ins_eqn) == 1 or not kernel.out_avals
            or declares_side_effects(kernel.compiler_params)):
        return [True] * len(eqn.invars), eqn
    return jc.pe._default_dce_rule(used_outs, *live_ins_eqn)


jc.pe.dce_rules[pallas_call_p] = _dce_rule


# --- forward-mode differentiation -----------------------------------------------------

def _tangent_mapping(m: BlockMapping) -> BlockMapping:
    return BlockMapping(**{**m.__dict__, "origin": f"tangent of {m.origin}"})


def _differentiable(aval) -> bool:
    return jnp.issubdtype(aval.dtype, jnp.inexact)


def _jvp_rule(primals, tangents, *, kernel: KernelIR, interpret, backend):
    """Two launches: the kernel itself for the primal outputs, and its JVP
    kernel (which recomputes the primals it needs) for the tangents. Keeping
    the primal launch free of tangent operands is what lets ``linearize``
    (and so ``jacfwd`` and ``vmap`` of ``jvp`` with unbatched primals) see the
    primal outputs as known and unbatched."""
    _refuse_dynamic_grid(kernel, "jvp")
    if kernel.input_output_aliases:
        raise NotImplementedError("jvp of a pallas_call with input_output_aliases is not supported.")
    if kernel.num_scalar_prefetch:
        raise NotImplementedError("jvp of a scalar-prefetch pallas_call is not supported.")
    n_out = len(kernel.out_mappings)
    primal_outs = pallas_call_p.bind(*primals, kernel=kernel, interpret=interpret, backend=backend)
    nz_in = [type(t) is not jc.ad.Zero and _differentiable(m)
             for t, m in zip(tangents, kernel.in_mappings)]
    nz_out = [_differentiable(m) for m in kernel.out_mappings]
    zeros = [jc.ad.Zero(jax.typeof(o).to_tangent_aval()) for o in primal_outs]
    if not any(nz_in) or not any(nz_out):
        return primal_outs, zeros
    jvp_kernel = _jvp_kernel(kernel, nz_in, nz_out)
    in_tangents = [t for t, nz in zip(tangents, nz_in) if nz]
    outs = pallas_call_p.bind(*primals, *in_tangents, kernel=jvp_kernel, interpret=interpret,
                              backend=backend)
    it = iter(outs[n_out:])
    return primal_outs, [next(it) if nz else z for nz, z in zip(nz_out, zeros)]


def _jvp_kernel(kernel: KernelIR, nz_in, nz_out) -> KernelIR:
    """The kernel over (inputs, nonzero input tangents) writing (outputs,
    tangents of the float outputs); float scratch gets a tangent scratch."""
    n_grid, n_in = len(kernel.grid), len(kernel.in_mappings)
    n_out, n_scr = len(kernel.out_mappings), len(kernel.scratch_avals)
    nz_scr = [_differentiable(a.inner_aval) for a in kernel.scratch_avals]
    nonzeros = [False] * n_grid + list(nz_in) + list(nz_out) + nz_scr
    jvp, _ = jc.jvp_jaxpr(kernel.jaxpr, nonzeros, instantiate=[])
    avals = [v.aval for v in jvp.invars]
    n_tin, n_tout, n_tscr = sum(nz_in), sum(nz_out), sum(nz_scr)
    # jvp's binders: idx, in, out, scr, d_in, d_out, d_scr (nonzero ones only).
    # KernelIR order: idx, in, d_in, out, d_out, scr, d_scr.
    idx, p_in, p_out, p_scr, t_in, t_out, t_scr = _split(
        list(range(len(avals))), [n_grid, n_in, n_out, n_scr, n_tin, n_tout, n_tscr])
    new_order = idx + p_in + t_in + p_out + t_out + p_scr + t_scr
    position = {old: new for new, old in enumerate(new_order)}
    body = rebuild_jaxpr(jvp, [avals[i] for i in new_order],
                         lambda a: [a[position[i]] for i in range(len(avals))])
    t_in_maps = [_tangent_mapping(m) for m, nz in zip(kernel.in_mappings, nz_in) if nz]
    t_out_maps = [_tangent_mapping(m) for m, nz in zip(kernel.out_mappings, nz_out) if nz]
    t_scr = [a for a, nz in zip(kernel.scratch_avals, nz_scr) if nz]
    return kernel.replace(
        name=f"{kernel.name}_jvp", jaxpr=body,
        metadata=kernel.metadata + ((backend_api.TRANSFORM_METADATA_KEY, "jvp"),),
        in_mappings=kernel.in_mappings + tuple(t_in_maps),
        out_mappings=kernel.out_mappings + tuple(t_out_maps),
        scratch_avals=kernel.scratch_avals + tuple(t_scr))


def _transpose_rule(cts, *args, kernel: KernelIR, interpret, backend):
    raise NotImplementedError(
        f"Reverse-mode differentiation (jax.grad, jax.vjp, jax.linear_transpose) of the "
        f"pallas_call kernel '{kernel.name.removesuffix('_jvp')}' ({kernel.source}) needs a backward kernel: wrap "
        "the call in jax.custom_vjp and write the backward pass (usually another pallas_call). "
        "Forward mode (jax.jvp, jax.jacfwd, jax.linearize) works without one.")


def _split(xs, sizes):
    out, k = [], 0
    for s in sizes:
        out.append(xs[k:k + s])
        k += s
    return out


jc.ad.primitive_jvps[pallas_call_p] = _jvp_rule
jc.ad.primitive_transposes[pallas_call_p] = _transpose_rule
