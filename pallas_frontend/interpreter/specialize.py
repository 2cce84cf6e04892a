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
from pallas_frontend.interpreter.equation_eval import eval_equations, live_equations


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


class Filled:
    """An array whose every element is the known scalar ``fill`` (a
    ``broadcast_in_dim`` of a constant, e.g. ``jnp.zeros_like``): its equation
    is bound only when the array itself is used, so a caller that only needs
    the fill emits nothing."""

    def __init__(self, fill, eqn):
        self.fill, self._eqn, self._array = fill, eqn, None

    @property
    def dtype(self):
        return self._eqn.outvars[0].aval.dtype

    def is_zero(self) -> bool:
        """Every element is 0 (+0.0 for floats): ``x + self`` is ``x``, up to the sign of a zero."""
        return bool(self.fill == 0) and not np.signbit(self.fill)

    def array(self):
        if self._array is None:
            self._array = jc.bind_equation(self._eqn, [self.fill])[0]
        return self._array


def _plain(v):
    if isinstance(v, _Ranged):
        return v.value
    return v.array() if isinstance(v, Filled) else v


def _known_scalar(v):
    """The concrete scalar ``v`` is, or None (a traced value)."""
    if isinstance(v, _Ranged):
        return v.lo if v.lo == v.hi else None
    if isinstance(v, (bool, int, float, np.generic)) or \
            (isinstance(v, np.ndarray) and v.ndim == 0):
        return np.asarray(v)[()]
    return None


def _known(v, dtype):
    return _Ranged(np.asarray(v, dtype), int(v), int(v))


def evaluate(body, args, ranges: dict[int, tuple[int, int]], wanted, *, keep_filled=False):
    """The values of the body vars ``wanted`` on ``args``, invar ``k`` known to lie
    in ``ranges[k]``; only the equations they need are evaluated. With
    ``keep_filled`` a constant-filled array is returned as its ``Filled``."""
    vals = [_Ranged(a, *ranges[k]) if k in ranges else a for k, a in enumerate(args)]
    outs = _eval(body.jaxpr, body.consts, vals, wanted)
    return [v if keep_filled and isinstance(v, Filled) else _plain(v) for v in outs]


def _ranged_literal(lit):
    val = np.asarray(lit.val)
    if val.ndim == 0 and (np.issubdtype(val.dtype, np.integer) or val.dtype == bool):
        return _Ranged(lit.val, int(val), int(val))
    return lit.val


def _eval(jaxpr, consts, args, wanted=None):
    live = live_equations(jaxpr, wanted) if wanted is not None else None
    return eval_equations(jaxpr, consts, args,
                          lambda eqn, read: _rule(eqn, [read(x) for x in eqn.invars]),
                          wanted=wanted, live=live, literal=_ranged_literal)


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
    if name == "broadcast_in_dim" and len(vals) == 1:
        fill = _known_scalar(vals[0])
        if fill is not None:
            return [Filled(fill, eqn)]
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
