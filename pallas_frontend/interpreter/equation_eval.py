"""One equation-by-equation jaxpr evaluator for the interpreter's fast paths.

The accumulation, row-merging and specialisation paths each re-evaluate a
kernel body with their own treatment of some equations; they share the
bookkeeping here (binding constvars and invars, reading literals, skipping
equations no wanted value needs) and supply only the per-equation rule.
"""

from __future__ import annotations

from pallas_frontend import _jax_compat as jc


def _literal_value(lit):
    return lit.val


def live_equations(jaxpr, wanted, deps=lambda eqn: eqn.invars) -> set[int]:
    """ids of the equations ``wanted`` needs (``deps(eqn)``: what an equation reads)."""
    need = {id(v) for v in wanted if not isinstance(v, jc.Literal)}
    live = set()
    for eqn in reversed(jaxpr.eqns):
        if any(id(v) in need for v in eqn.outvars):
            live.add(id(eqn))
            need.update(id(x) for x in deps(eqn) if not isinstance(x, jc.Literal))
    return live


def eval_equations(jaxpr, consts, args, rule, wanted=None, live=None,
                   literal=_literal_value):
    """The values of ``wanted`` (default: the outvars) with ``rule(eqn, read)``
    giving each equation's results; ``read(var)`` looks a value up and
    ``literal(lit)`` turns a Literal into a value. Equations whose id is not in
    ``live`` (when given) are skipped."""
    env = {}

    def read(a):
        return literal(a) if isinstance(a, jc.Literal) else env[a]

    for v, c in zip(jaxpr.constvars, consts):
        env[v] = c
    for v, a in zip(jaxpr.invars, args):
        env[v] = a
    for eqn in jaxpr.eqns:
        if live is not None and id(eqn) not in live:
            continue
        for v, o in zip(eqn.outvars, rule(eqn, read)):
            env[v] = o
    return [read(v) for v in (jaxpr.outvars if wanted is None else wanted)]


def bind_read(eqn, read):
    """The rule that binds the equation as it stands."""
    return jc.bind_equation(eqn, [read(x) for x in eqn.invars])
