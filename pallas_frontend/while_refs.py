"""A ``while_loop`` whose condition reads a Ref that its body writes.

JAX's state discharge turns the Refs a loop's condition reads and the Refs its
body reads into two separate loop carries, so the condition keeps seeing the
value from before the loop: ``while o_ref[0] < 100: o_ref[...] *= 2`` never
ends under JAX's ``interpret=True`` (or under ours, which discharges the same
way). A compiled kernel reads the Ref each time round. Before discharge such a
loop is rewritten to carry its predicate: the condition is evaluated once
before the loop and again at the end of each body, where the body's Refs are
the current ones.
"""

from __future__ import annotations

from jax import lax

from pallas_frontend import _jax_compat as jc


def _cond_reads_refs(eqn) -> bool:
    cond = eqn.params["cond_jaxpr"]
    n = eqn.params["cond_nconsts"]
    return any(isinstance(v.aval, jc.AbstractRef) for v in cond.jaxpr.invars[:n]) or any(
        isinstance(v.aval, jc.AbstractRef) for v in cond.jaxpr.constvars)


def _needs_rewrite(jaxpr) -> bool:
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "while" and _cond_reads_refs(eqn):
            return True
        if any(_needs_rewrite(getattr(sub, "jaxpr", sub)) for sub in jc.sub_jaxprs(eqn)):
            return True
    return False


def carry_cond_reads(jaxpr):
    """``jaxpr`` (a kernel body with its Refs as inputs) with every while loop whose
    condition reads a Ref rewritten to carry its predicate; unchanged (the same
    object) when there is none."""
    if not _needs_rewrite(jaxpr):
        return jaxpr
    return _rewrite(jaxpr)


def _rewrite(jaxpr):
    def fn(*args):
        return jc.eval_jaxpr_rewriting(jaxpr, args, _before_eqn, _rewrite_param)
    new, _ = jc.trace_kernel_jaxpr(fn, [v.aval for v in jaxpr.invars],
                                   traced_for="pallas kernel (while conditions on Refs)")
    return new


def _rewrite_param(p):
    if jc.is_jaxpr(p) and _needs_rewrite(getattr(p, "jaxpr", p)):
        return jc.like_jaxpr(_rewrite(p), p)
    if isinstance(p, tuple) and p and all(jc.is_jaxpr(q) for q in p):
        return tuple(jc.like_jaxpr(_rewrite(q), q) if _needs_rewrite(getattr(q, "jaxpr", q))
                     else q for q in p)
    return p


def _run(jaxpr, *args):
    return jc.eval_jaxpr_rewriting(jaxpr, args, _before_eqn, _rewrite_param)


def _before_eqn(eqn, invals):
    if eqn.primitive.name != "while" or not _cond_reads_refs(eqn):
        return None
    cn, bn = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
    cond_consts, body_consts, carry = invals[:cn], invals[cn:cn + bn], invals[cn + bn:]
    cond, body = eqn.params["cond_jaxpr"], eqn.params["body_jaxpr"]

    def predicate(values):
        return _run(cond, *cond_consts, *values)[0]

    def step(state):
        values = tuple(_run(body, *body_consts, *state[1]))
        return predicate(values), values
    _, out = lax.while_loop(lambda state: state[0], step, (predicate(carry), tuple(carry)))
    return list(out)
