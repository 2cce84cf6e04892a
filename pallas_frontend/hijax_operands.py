"""Operands and outputs of a hijax type (JAX's ``HiType``) in ``pallas_call``.

A hijax type is one value made of several arrays (its ``lo_ty()``), e.g. a
pair of arrays, or an array with its scales. As JAX's ``pallas_call`` does, a
launch with such operands or outputs runs as a launch over their arrays: the
type splits the value (``lower_val``), the BlockSpec (``lower_block_spec``)
and the output type (``lo_ty``), and the kernel still sees one Ref of the hijax
type per operand. The kernel is traced over those Refs and JAX lowers the
traced jaxpr to one over the arrays' Refs (each access through the type's own
``ref_get_to_lojax``/``ref_swap_to_lojax``/``dma_start`` ...); that jaxpr is
the kernel of the launch over the arrays. Backends never see a hijax type.
"""

from __future__ import annotations

import copy
import functools
from typing import Any, Callable

import jax

from pallas_frontend import _jax_compat as jc
from pallas_frontend.jitted_call import JittedCall
from pallas_frontend.scopes import run_scoped_p
from pallas_frontend.specs import BlockSpec, Squeezed, canonicalize_block_dim, no_block_spec
from pallas_frontend.tracing import alias_mapping, flatten_specs, resolve_grid_spec

# JAX 0.10-0.12 have them; probed, so that a JAX without them just never sees one
HIJAX = hasattr(jc.pe, "lower_jaxpr2") and hasattr(jc.core.AbstractValue, "lo_ty")
# pallas_call's keywords that describe operands (rewritten for the arrays)
_OPERAND_KEYWORDS = ("grid_spec", "grid", "in_specs", "out_specs", "scratch_shapes",
                     "input_output_aliases", "allow_unwritten_outputs")


def _is_high(aval) -> bool:
    return bool(getattr(aval, "is_high", False))


def _of_high_type(x) -> bool:
    try:
        return _is_high(jax.typeof(x))
    except TypeError:     # not a JAX value: pallas_call's own checks name it
        return False


def _out_leaves(out_shape):
    return jax.tree.flatten(tuple(out_shape) if isinstance(out_shape, list) else out_shape,
                            is_leaf=lambda x: hasattr(x, "shape") and hasattr(x, "dtype"))


def takes_hijax_types(pallas_call: Callable) -> Callable:
    """``pallas_call`` that also takes operands and ``out_shape`` leaves of hijax types."""
    if not HIJAX:
        return pallas_call

    @functools.wraps(pallas_call)
    def wrapped(kernel, *args, **kwargs):
        out_shape = args[0] if args else kwargs.get("out_shape")
        if any(_is_high(leaf) for leaf in _out_leaves(out_shape)[0]):
            plain = None          # every call is one over the arrays
        else:
            plain = pallas_call(kernel, *args, **kwargs)

        def call(*operands):
            if plain is not None and not any(map(_of_high_type, jax.tree.leaves(operands))):
                return plain(*operands)
            options = dict(kwargs, **({"out_shape": args[0]} if args else {}))
            return launch(pallas_call, kernel, options, operands)
        functools.update_wrapper(call, kernel, assigned=("__name__", "__qualname__"), updated=())
        return JittedCall(call, kernel)
    return wrapped


def _block_aval(ty, spec, origin: str):
    """The hijax type of the block ``spec`` selects from an operand of type ``ty``
    (squeezed dims dropped), as JAX's block mapping makes it."""
    if spec is None or spec.block_shape is None:
        return ty
    dims = [canonicalize_block_dim(d, origin) for d in spec.block_shape]
    return ty.update(shape=tuple(d.block_size for d in dims if not isinstance(d, Squeezed)))


def _lower_spec(ty, spec, origin: str) -> list:
    """One BlockSpec per array of ``ty`` (the type's ``lower_block_spec``)."""
    n = len(ty.lo_ty())
    lower = getattr(ty, "lower_block_spec", None)
    if lower is None:
        raise ValueError(
            f"pallas_call: {origin} has the hijax type {ty}, which defines no "
            f"lower_block_spec(block_spec) -> list of {n} BlockSpecs (one per array of "
            "its lo_ty()). Define that method on the type to pass it to a kernel.")
    specs = list(lower(BlockSpec() if spec is None else spec))
    if len(specs) != n:
        raise ValueError(f"pallas_call: {type(ty).__name__}.lower_block_spec gave "
                         f"{len(specs)} BlockSpecs for {origin}, whose type has {n} arrays "
                         "(lo_ty()); return one BlockSpec per array.")
    return specs


def _split(values, types, specs, what: str, lower_value):
    """Each value of a hijax type as its arrays: (arrays, their specs, the
    positions of each value's arrays, each value's block type or None)."""
    lo, lo_specs, groups, blocks = [], [], [], []
    for k, (v, ty, spec) in enumerate(zip(values, types, specs)):
        start = len(lo)
        if _is_high(ty):
            block = _block_aval(ty, spec, f"{what} {k}")
            lo += lower_value(ty, v)
            lo_specs += _lower_spec(block, spec, f"{what} {k}")
            blocks.append(block)
        else:
            lo.append(v)
            lo_specs.append(spec)
            blocks.append(None)
        groups.append(range(start, len(lo)))
    return lo, lo_specs, groups, blocks


def launch(pallas_call: Callable, kernel: Callable, options: dict, args):
    """``pallas_call(kernel, **options)(*args)`` over the arrays of its hijax
    operands and outputs; returns its outputs, hijax ones raised again."""
    out_shape = options.pop("out_shape")
    gs = resolve_grid_spec(*(options.get(k, d) for k, d in (
        ("grid_spec", None), ("grid", ()), ("in_specs", no_block_spec),
        ("out_specs", no_block_spec), ("scratch_shapes", ()))))
    npf = gs.num_scalar_prefetch
    pf_leaves = jax.tree.leaves(tuple(args[:npf]))
    if any(map(_of_high_type, pf_leaves)):
        raise TypeError("pallas_call: a scalar-prefetch operand has a hijax type; scalar "
                        "prefetch takes plain integer arrays. Pass its arrays instead.")
    main_leaves, main_tree = jax.tree.flatten(tuple(args[npf:]))
    out_leaves, out_tree = _out_leaves(out_shape)
    lo_args, lo_in_specs, in_groups, in_blocks = _split(
        main_leaves, [jax.typeof(a) for a in main_leaves],
        flatten_specs(gs.in_specs, main_tree, "in_specs", "inputs"), "input",
        lambda ty, v: list(ty.lower_val(v)))
    lo_outs, lo_out_specs, out_groups, out_blocks = _split(
        out_leaves, out_leaves, flatten_specs(gs.out_specs, out_tree, "out_specs", "out_shape"),
        "output", lambda ty, _: [jax.ShapeDtypeStruct(t.shape, t.dtype) for t in ty.lo_ty()])

    n_pf = len(pf_leaves)
    all_in = [range(i, i + 1) for i in range(n_pf)] + [
        range(n_pf + g.start, n_pf + g.stop) for g in in_groups]
    lo_aliases = {}
    for i, o in alias_mapping(options.get("input_output_aliases")).items():
        if len(all_in[i]) != len(out_groups[o]):
            raise ValueError(f"input_output_aliases: input {i} has {len(all_in[i])} arrays "
                             f"and output {o} has {len(out_groups[o])}; alias same types.")
        lo_aliases.update(zip(all_in[i], out_groups[o]))
    allowed = options.get("allow_unwritten_outputs", False)
    if not isinstance(allowed, bool):
        allowed = tuple(j for o in allowed for j in out_groups[o])

    lo_gs = copy.copy(gs)
    lo_gs.in_specs, lo_gs.out_specs = tuple(lo_in_specs), tuple(lo_out_specs)
    body = _lo_kernel(kernel, n_pf, (main_tree, all_in[n_pf:], in_blocks),
                      (out_tree, out_groups, out_blocks))
    rest = {k: v for k, v in options.items() if k not in _OPERAND_KEYWORDS}
    outs = pallas_call(body, tuple(lo_outs), grid_spec=lo_gs, input_output_aliases=lo_aliases,
                       allow_unwritten_outputs=allowed, **rest)(*pf_leaves, *lo_args)
    hi_outs = [o.raise_val(*[outs[j] for j in g]) if _is_high(o) else outs[g[0]]
               for o, g in zip(out_leaves, out_groups)]
    return jax.tree.unflatten(out_tree, hi_outs)


def _lo_kernel(kernel, n_pf: int, ins, outs):
    """The kernel over the arrays' Refs: traces ``kernel`` over one Ref of the
    hijax type per hijax operand and inlines the jaxpr JAX lowers it to."""
    (in_tree, in_groups, in_blocks), (out_tree, out_groups, out_blocks) = ins, outs
    n_in_lo = sum(len(g) for g in in_groups)
    groups = [*in_groups, *[range(n_pf + n_in_lo + g.start, n_pf + n_in_lo + g.stop)
                            for g in out_groups]]
    blocks = [*in_blocks, *out_blocks]
    n_lo = n_pf + n_in_lo + sum(len(g) for g in out_groups)

    def body(*refs, **named_scratch):
        keys, rest = list(named_scratch), [*refs[n_lo:], *named_scratch.values()]
        avals = [jax.typeof(r) for r in refs[:n_pf]]
        for g, blk in zip(groups, blocks):     # one Ref of the type per hijax operand
            first = jax.typeof(refs[g[0]])
            avals.append(first if blk is None else
                         jc.AbstractRef(blk, memory_space=first.memory_space))
        avals += [jax.typeof(r) for r in rest]

        def traced(*hi_refs):
            ops, scratch = hi_refs[n_pf:n_pf + len(groups)], hi_refs[n_pf + len(groups):]
            user_outs = jax.tree.unflatten(out_tree, ops[len(in_groups):])
            n_pos = len(scratch) - len(keys)
            kernel(*hi_refs[:n_pf], *jax.tree.unflatten(in_tree, ops[:len(in_groups)]),
                   *(user_outs if isinstance(user_outs, tuple) else (user_outs,)),
                   *scratch[:n_pos], **dict(zip(keys, scratch[n_pos:])))
            return []
        hi_jaxpr, _ = jc.trace_kernel_jaxpr(traced, avals, traced_for="pallas_call hijax kernel")
        lo_jaxpr, consts = lower_body(hi_jaxpr, jc.consts_of(hi_jaxpr))
        jc.eval_jaxpr(lo_jaxpr, *consts, *refs, *named_scratch.values())

    functools.update_wrapper(body, kernel, assigned=("__name__", "__qualname__"), updated=())
    body.__wrapped__ = kernel     # errors name the user's kernel and its line
    return body


def lower_body(jaxpr, args):
    """``jaxpr`` (taking ``args`` first) over hijax types, lowered by JAX to one
    over their arrays: (a plain jaxpr taking its constants first, those constants)."""
    lo = jc.pe.lower_jaxpr2(jc.with_consts(jaxpr, args))
    plain = lo.with_consts(()) if jc.JAXPR_CARRIES_CONSTS else jc.pe.convert_constvars_jaxpr(
        lo.jaxpr)
    return plain, list(lo.consts)


def _run_scoped_to_lojax(*args, jaxpr, num_consts, collective_axes):
    # pl.run_scoped in such a kernel (e.g. emit_pipeline's buffers of the type):
    # its body over hijax Refs, scoped or closed over, as one over their arrays' Refs
    body, consts = lower_body(jaxpr, args)
    return run_scoped_p.bind(*consts, jaxpr=body, num_consts=len(consts),
                             collective_axes=collective_axes)


run_scoped_p.to_lojax = _run_scoped_to_lojax     # JAX's hijax lowering protocol
