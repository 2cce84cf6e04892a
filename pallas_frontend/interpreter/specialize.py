"""Specialise a kernel body to known ranges of its grid indices.

Inside the loop over a sequential axis the interpreter knows that the axis'
index is at least 1 once the first step is peeled, so ``pl.when(pl.program_id(k)
== 0)`` (an accumulator's initialisation) is known false there. Evaluating the
body with integer intervals attached to the grid indices decides such
comparisons, and a ``cond`` whose branch index is then known is replaced by
that branch: the loop body loses its conditional, and the peeled step loses
the other branch. Everything else is re-emitted unchanged, so the result is
the same program on the given ranges.
"""

from __future__ import annotations

import dataclasses
import operator

import numpy as np

from pallas_frontend import _jax_compat as jc


@dataclasses.dataclass(frozen=True)
class _Ranged:
    """An integer (or bool) scalar known to lie in ``[lo, hi]``."""
    value: object
    lo: int
    hi: int


_COMPARE = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
            "gt": operator.gt, "ge": operator.ge}


def specialize(body, ranges: dict[int, tuple[int, int]]):
    """``body`` (a closed jaxpr) with invar ``k`` known to lie in ``ranges[k]``;
    returns an equivalent closed jaxpr on those ranges."""
    avals = [v.aval for v in body.jaxpr.invars]

    def fn(*args):
        vals = [_Ranged(a, *ranges[k]) if k in ranges else a for k, a in enumerate(args)]
        return [_plain(v) for v in _eval(body.jaxpr, body.consts, vals)]

    out, _ = jc.trace_kernel_jaxpr(fn, avals, traced_for="specialized kernel body")
    return out


def _plain(v):
    return v.value if isinstance(v, _Ranged) else v


def _known(v, dtype):
    return _Ranged(np.asarray(v, dtype), int(v), int(v))


def evaluate(body, args, ranges: dict[int, tuple[int, int]], wanted):
    """The values of the body vars ``wanted`` on ``args``, invar ``k`` known to lie
    in ``ranges[k]``; only the equations they need are evaluated."""
    vals = [_Ranged(a, *ranges[k]) if k in ranges else a for k, a in enumerate(args)]
    return [_plain(v) for v in _eval(body.jaxpr, body.consts, vals, wanted)]


def _live(jaxpr, wanted) -> set[int]:
    need = {id(v) for v in wanted if not isinstance(v, jc.Literal)}
    live = set()
    for eqn in reversed(jaxpr.eqns):
        if any(id(v) in need for v in eqn.outvars):
            live.add(id(eqn))
            need.update(id(x) for x in eqn.invars if not isinstance(x, jc.Literal))
    return live


def _eval(jaxpr, consts, args, wanted=None):
    env = {}
    live = _live(jaxpr, wanted) if wanted is not None else None

    def read(a):
        if isinstance(a, jc.Literal):
            val = np.asarray(a.val)
            if val.ndim == 0 and (np.issubdtype(val.dtype, np.integer) or val.dtype == bool):
                return _Ranged(a.val, int(val), int(val))
            return a.val
        return env[a]

    for v, c in zip(jaxpr.constvars, consts):
        env[v] = c
    for v, a in zip(jaxpr.invars, args):
        env[v] = a
    for eqn in jaxpr.eqns:
        if live is not None and id(eqn) not in live:
            continue
        vals = [read(x) for x in eqn.invars]
        outs = _rule(eqn, vals)
        for v, o in zip(eqn.outvars, outs):
            env[v] = o
    return [read(v) for v in (jaxpr.outvars if wanted is None else wanted)]


def _rule(eqn, vals):
    name = eqn.primitive.name
    ranged = all(isinstance(v, _Ranged) for v in vals)
    if name in _COMPARE and ranged:
        x, y = vals
        verdicts = {_COMPARE[name](a, b) for a in (x.lo, x.hi) for b in (y.lo, y.hi)}
        if name in ("eq", "ne"):
            disjoint = x.hi < y.lo or y.hi < x.lo
            if disjoint:
                return [_known(name == "ne", bool)]
            if x.lo == x.hi == y.lo == y.hi:
                return [_known(name == "eq", bool)]
        elif len(verdicts) == 1:   # monotone: the corners decide
            return [_known(verdicts.pop(), bool)]
    if name in ("add", "sub") and ranged:
        x, y = vals
        lo, hi = (x.lo + y.lo, x.hi + y.hi) if name == "add" else (x.lo - y.hi, x.hi - y.lo)
        out = _bind(eqn, vals)
        return [_Ranged(out[0], lo, hi)]
    if name == "convert_element_type" and ranged and \
            np.issubdtype(np.dtype(eqn.params["new_dtype"]), np.integer):
        x = vals[0]
        if x.lo == x.hi:
            return [_known(x.lo, eqn.params["new_dtype"])]
        return [_Ranged(_bind(eqn, vals)[0], x.lo, x.hi)]
    if name == "cond" and isinstance(vals[0], _Ranged) and vals[0].lo == vals[0].hi:
        branch = eqn.params["branches"][int(vals[0].lo)]
        return _eval(branch.jaxpr, branch.consts, vals[1:])
    if name in ("pjit", "jit", "closed_call"):
        inner = eqn.params.get("jaxpr") or eqn.params.get("call_jaxpr")
        if hasattr(inner, "consts") and not eqn.effects:
            return _eval(inner.jaxpr, inner.consts, vals)
    return _bind(eqn, vals)


def _bind(eqn, vals):
    return jc.bind_equation(eqn, [_plain(v) for v in vals])


def body_for_steps(body, ranges: dict[int, tuple[int, int]]):
    """The body specialised to grid axes in the given ranges; ``body`` itself
    when specialisation fails (it is an optimisation only)."""
    try:
        return specialize(body, ranges)
    except Exception:  # noqa: BLE001 - an unexpected primitive: keep the general body
        return body
