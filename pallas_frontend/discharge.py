"""State discharge of kernel bodies: their Refs become values, the Refs' final
values extra outputs. Whole-Ref kernels are rewritten directly; the rest go
through JAX's ``discharge_state`` (whose form differs across the JAX window,
hence the probes here; the private JAX modules come from ``_jax_compat``)."""

from __future__ import annotations

from pallas_frontend import _jax_compat as jc


def discharge_state(jaxpr, *, should_discharge, strip_memory_space=False):
    """JAX's ``discharge_state`` (discharged Refs become values, their final
    values are appended to the outputs). The common kernel, whose Refs are only
    read and written whole (``ref[...]``), also inside a ``cond``
    (``pl.when``), is rewritten directly: JAX's general path re-traces the body,
    a millisecond of every kernel's first call."""
    try:
        return _discharge_whole_refs(jaxpr, list(should_discharge), strip_memory_space)
    except _NotWholeRefs:
        pass
    if DISCHARGE_STRIPS_MEMORY_SPACE:
        return jc.state_discharge.discharge_state(jaxpr, should_discharge=should_discharge,
                                                  strip_memory_space=strip_memory_space)
    # before JAX 0.11 a discharged Ref always became its inner (device) array,
    # and discharge took a ClosedJaxpr only
    return jc.state_discharge.discharge_state(jc.with_consts(jaxpr, jc.consts_of(jaxpr)),
                                              should_discharge=should_discharge)


DISCHARGE_STRIPS_MEMORY_SPACE = hasattr(jc.state_discharge, "discharged_aval")


def _discharged_aval(aval, strip_memory_space):
    if DISCHARGE_STRIPS_MEMORY_SPACE:
        return jc.state_discharge.discharged_aval(aval, discharge=True,
                                                  strip_memory_space=strip_memory_space)
    return aval.inner_aval


def discharge_kernel_body(jaxpr, num_index_operands: int):
    """A kernel body with all its Refs discharged (the leading index operands,
    grid indices and the like, stay as they are; memory spaces are dropped)."""
    n_refs = len(jaxpr.invars) - num_index_operands
    # a loop condition reading a Ref the body writes would see it stale (while_refs.py)
    from pallas_frontend.while_refs import carry_cond_reads
    jaxpr = carry_cond_reads(jaxpr)
    return discharge_state(jaxpr, should_discharge=[False] * num_index_operands + [True] * n_refs,
                           strip_memory_space=True)


class _NotWholeRefs(Exception):
    """The jaxpr uses a Ref otherwise than whole reads and writes."""


def _is_ref(atom) -> bool:
    return not isinstance(atom, jc.core.Literal) and isinstance(atom.aval, jc.AbstractRef)


def _discharge_whole_refs(jaxpr, should_discharge, strip_memory_space):
    if any(_is_ref(v) for v in jaxpr.constvars):
        raise _NotWholeRefs
    invars, refs, value = [], [], {}     # value: discharged Ref -> the atom holding it now
    for v, d in zip(jaxpr.invars, should_discharge):
        if not _is_ref(v):
            invars.append(v)
            continue
        if not d:
            raise _NotWholeRefs
        new = jc.core.Var(_discharged_aval(v.aval, strip_memory_space))
        invars.append(new)
        refs.append(v)
        value[v] = new
    renamed = {}

    def read(a):
        if isinstance(a, jc.core.Literal):
            return a
        if _is_ref(a):
            raise _NotWholeRefs       # a Ref reaching any other equation
        return renamed.get(a, a)

    eqns = []
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name in ("get", "swap"):
            ref = eqn.invars[0]
            n_operands = 1 if name == "get" else 2
            if ref not in value or len(eqn.invars) != n_operands or \
                    jc.tree_util.tree_unflatten(eqn.params["tree"], []) != ():
                raise _NotWholeRefs
            renamed[eqn.outvars[0]] = value[ref]      # a swap yields the old value
            if name == "swap":
                value[ref] = read(eqn.invars[1])
        elif name == "cond" and any(_is_ref(a) for a in eqn.invars):
            index, *operands = eqn.invars
            if any(_is_ref(a) and a not in value for a in operands):
                raise _NotWholeRefs
            ref_operands = [a for a in operands if _is_ref(a)]
            if len(set(ref_operands)) != len(ref_operands):
                raise _NotWholeRefs           # one Ref under two names in the branches
            branches = tuple(
                _discharge_whole_refs(b, [_is_ref(a) for a in operands], strip_memory_space)
                for b in eqn.params["branches"])
            finals = [jc.core.Var(v.aval) for v in branches[0].outvars[len(eqn.outvars):]]
            args = [read(index)] + [value[a] if _is_ref(a) else read(a) for a in operands]
            eqns.append(jc.core.new_jaxpr_eqn(
                args, list(eqn.outvars) + finals, eqn.primitive,
                {**eqn.params, "branches": branches}, jc.core.no_effects, eqn.source_info, eqn.ctx))
            value.update(zip(ref_operands, finals))
        elif eqn.effects:
            raise _NotWholeRefs
        else:
            eqns.append(eqn.replace(invars=[read(a) for a in eqn.invars]))
    outvars = [read(a) for a in jaxpr.outvars] + [value[r] for r in refs]
    plain = jc.core.Jaxpr(jaxpr.constvars, invars, outvars, eqns, jc.core.no_effects,
                       jaxpr.debug_info.with_unknown_names())
    return jc.with_consts(plain, jc.consts_of(jaxpr))
