"""``pl.run_scoped``'s primitive, and its expansion before backends see it.

As in JAX, ``pl.run_scoped(f, *types)`` traces ``f`` over the Refs it will
get into a jaxpr of its own and binds one ``run_scoped`` equation holding it:
the Refs are that jaxpr's inputs, so their reads and writes stay inside the
equation, whose effects are only those on the Refs ``f`` closes over. The
jaxpr takes what ``f`` closes over first (``num_consts`` of them), then the
allocated Refs.

Backends and interpreters know a scope in its flat form: an ``empty_ref``
per buffer, the body's equations, then a ``free_ref`` per buffer (the form
``backend_api`` documents). ``inline_scopes`` turns every ``run_scoped``
equation of a traced kernel (nested bodies included) into that form; the
frontend calls it on every kernel and backend body it traces, so no
``run_scoped`` equation reaches a backend.
"""

from __future__ import annotations

import jax

from pallas_frontend import _jax_compat as jc

run_scoped_p = jc.Primitive("run_scoped")
run_scoped_p.multiple_results = True


@run_scoped_p.def_effectful_abstract_eval
def _abstract_eval(*args, jaxpr, num_consts, collective_axes):
    # Effects on the body's inputs: those on a closed-over value go out as an
    # effect on the equation's operand at the same position; those on an
    # allocated Ref are local to the scope and dropped.
    position = {v: i for i, v in enumerate(jaxpr.invars)}
    effects = set()
    for eff in jaxpr.effects:
        if isinstance(eff, jc.JaxprInputEffect):
            i = position.get(eff.input)
            if i is not None and i < num_consts:
                effects.add(eff.replace(i))
            continue
        effects.add(eff)
    return [v.aval for v in jaxpr.outvars], effects


def bind_scoped(flat_fun, ref_avals, collective_axes, *, traced_for: str) -> list:
    """Traces ``flat_fun(*refs) -> list`` over ``ref_avals`` and binds one
    ``run_scoped`` equation; returns its flat results."""
    with jc.mutable_array_checks(False):
        body, consts = jc.trace_with_explicit_consts(flat_fun, ref_avals, traced_for=traced_for)
    return run_scoped_p.bind(*consts, jaxpr=body, num_consts=len(consts),
                             collective_axes=tuple(collective_axes))


def new_scoped_ref(aval):
    """A fresh Ref of type ``aval`` (an ``empty_ref`` equation where traced)."""
    inner = aval.inner_aval
    return jax.empty_ref(jax.ShapeDtypeStruct(inner.shape, inner.dtype),
                         memory_space=aval.memory_space)


def free_scoped_refs(refs) -> None:
    # always, jax_enable_checks or not: a free_ref is what tells a backend a
    # scoped buffer from a body's own jax.empty_ref (JAX allocates that one in
    # place, a scoped one in a region)
    for r in refs:
        jax.free_ref(r)


def _run_inline(args, jaxpr, num_consts):
    refs = [new_scoped_ref(v.aval) for v in jaxpr.invars[num_consts:]]
    out = jc.eval_jaxpr_rewriting(jaxpr, [*args, *refs], _before_eqn, _rewrite_param,
                                  inherit_line=True)
    free_scoped_refs(refs)
    return out


run_scoped_p.def_impl(
    lambda *args, jaxpr, num_consts, collective_axes: _run_inline(args, jaxpr, num_consts))


# --- the flat form --------------------------------------------------------------------

def has_scopes(jaxpr) -> bool:
    """Whether ``jaxpr`` or a jaxpr nested in it holds a ``run_scoped`` equation."""
    for eqn in getattr(jaxpr, "jaxpr", jaxpr).eqns:
        if eqn.primitive is run_scoped_p or any(has_scopes(s) for s in jc.sub_jaxprs(eqn)):
            return True
    return False


def _before_eqn(eqn, invals):
    if eqn.primitive is not run_scoped_p:
        return None
    return _run_inline(invals, eqn.params["jaxpr"], eqn.params["num_consts"])


def _rewrite_param(p):
    if jc.is_jaxpr(p) and has_scopes(p):
        return jc.like_jaxpr(inline_scopes(p), p)
    if isinstance(p, tuple) and p and all(jc.is_jaxpr(q) for q in p):
        return tuple(jc.like_jaxpr(inline_scopes(q), q) if has_scopes(q) else q for q in p)
    return p


def inline_scopes(jaxpr):
    """``jaxpr`` (with its constants, as ``trace_kernel_jaxpr`` makes them) with
    every ``run_scoped`` equation in its flat form; the same object when there
    is none."""
    if not has_scopes(jaxpr):
        return jaxpr

    def flat(*args):
        return jc.eval_jaxpr_rewriting(jaxpr, args, _before_eqn, _rewrite_param)
    with jc.mutable_array_checks(False):
        new, _ = jc.trace_kernel_jaxpr(flat, [v.aval for v in jaxpr.invars],
                                       traced_for="pallas kernel (run_scoped)")
    return new


def inline_scopes_explicit(jaxpr, consts, in_avals, *, traced_for: str):
    """The same for ``(jaxpr, consts)`` as ``trace_with_explicit_consts`` makes
    them (the jaxpr takes ``*consts, *args``; consts may be outer tracers)."""
    if not has_scopes(jaxpr):
        return jaxpr, consts

    def flat(*args):
        return jc.eval_jaxpr_rewriting(jaxpr, [*consts, *args], _before_eqn, _rewrite_param)
    with jc.mutable_array_checks(False):
        return jc.trace_with_explicit_consts(flat, in_avals, traced_for=traced_for)


# --- state discharge (a jaxpr discharged before its scopes were expanded) --------------

@jc.register_discharge_rule(run_scoped_p, partial=True)
def _discharge(ctx, *args, jaxpr, num_consts, collective_axes):
    # The scope in its flat form, over the equation's operands: JAX's discharge
    # knows empty_ref (a fresh value of the Ref's type); the closed-over Refs
    # are discharged as asked.
    from pallas_frontend.discharge import discharge_state
    with jc.mutable_array_checks(False):
        flat, consts = jc.trace_with_explicit_consts(
            lambda *a: _run_inline(a, jaxpr, num_consts), list(ctx.in_avals),
            traced_for="pallas run_scoped (state discharge)")
    should = [bool(s) and isinstance(a, jc.AbstractRef)
              for s, a in zip(ctx.should_discharge, ctx.in_avals)]
    body = discharge_state(jc.with_consts(flat, consts), should_discharge=should,
                           strip_memory_space=ctx.strip_memory_space)
    out = jc.eval_jaxpr(body, *args)
    n_out = len(jaxpr.outvars)
    finals = iter(out[n_out:])
    return [next(finals) if s else None for s in should], out[:n_out]
