"""Refs a kernel closes over (``jax.new_ref``, or ``run_state``'s Refs):
they become operands, as in JAX.

A kernel body may use a Ref of the surrounding program that it was not
passed (e.g. inside ``run_state``, a DMA from one such Ref into another). The
trace leaves it as a constant of the kernel jaxpr, and a constant that is a
tracer of the outer program cannot be lowered. So each such Ref is turned
into one more input, read whole before the call, and one more output aliased
to it, written back into the Ref after the call (JAX's order: these come
first among the inputs and the outputs); both in ``ANY`` (the kernel
sees the array whole, where it lives). The body uses the output Ref.
"""

from __future__ import annotations

import dataclasses

import jax

from pallas_frontend import _jax_compat as jc
from pallas_frontend.backend_api import KernelIR
from pallas_frontend.specs import BlockSpec, MemorySpace


def _is_ref(x) -> bool:
    return isinstance(jax.typeof(x), jc.AbstractRef)


def hoist(ir: KernelIR, block_mapping) -> tuple[KernelIR, list]:
    """``(kernel, refs)``: ``ir`` with its closed-over Refs ``refs`` as its
    first inputs (after the scalar-prefetch operands) and its first outputs,
    aliased pairs, where JAX puts them. Unchanged, with no refs, when it
    closes over none. ``block_mapping`` is tracing's."""
    jaxpr = ir.jaxpr
    consts = jc.consts_of(jaxpr)
    if not any(_is_ref(c) for c in consts):
        return ir, []
    constvars = list(jaxpr.constvars)
    refs = [c for c in consts if _is_ref(c)]
    ref_vars = [v for v, c in zip(constvars, consts) if _is_ref(c)]
    kept = [(v, c) for v, c in zip(constvars, consts) if not _is_ref(c)]

    num_grid = len(ir.grid)
    n_pf, n_in, n_out = ir.num_scalar_prefetch, len(ir.in_mappings), len(ir.out_mappings)
    n_refs = n_pf + n_in + n_out + len(ir.scratch_avals)
    invars = list(jaxpr.invars)
    lead, refs_in = invars[:len(invars) - n_refs], invars[len(invars) - n_refs:]
    pf_avals = [v.aval for v in refs_in[:n_pf]]
    ins, outs, scratch = (refs_in[n_pf:n_pf + n_in], refs_in[n_pf + n_in:n_pf + n_in + n_out],
                          refs_in[n_pf + n_in + n_out:])
    # the body uses the output Ref: an aliased output starts as its input, and
    # what is written into it is what comes back (on a TPU both are one buffer)
    in_vars = [jc.core.Var(v.aval) for v in ref_vars]

    def mapping(ref, k, side):
        inner = jax.typeof(ref).inner_aval
        aval = jc.ShapedArray(inner.shape, inner.dtype)
        return block_mapping(BlockSpec(memory_space=MemorySpace.ANY), aval,
                             f"the Ref the kernel closes over ({side} {k})", num_grid,
                             pf_avals)
    in_maps = tuple(mapping(r, k, "input") for k, r in enumerate(refs))
    out_maps = tuple(mapping(r, k, "output") for k, r in enumerate(refs))

    # the plain jaxpr (before JAX 0.11 the one inside the ClosedJaxpr), re-bound
    plain = getattr(jaxpr, "jaxpr", jaxpr).replace(
        constvars=[v for v, _ in kept],
        invars=[*lead, *refs_in[:n_pf], *in_vars, *ins, *ref_vars, *outs, *scratch])
    new_jaxpr = jc.with_consts(plain, [c for _, c in kept])
    m = len(refs)
    aliases = (*((n_pf + k, k) for k in range(m)),
               *((i + m if i >= n_pf else i, o + m) for i, o in ir.input_output_aliases))
    return dataclasses.replace(
        ir, jaxpr=new_jaxpr, in_mappings=(*in_maps, *ir.in_mappings),
        out_mappings=(*out_maps, *ir.out_mappings), input_output_aliases=aliases), refs
