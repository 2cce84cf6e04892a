"""Kernels that treat each row of their blocks on its own, run on all rows at once.

A softmax or layer norm over blocks of whole rows, batched over the row-block
axis, reaches XLA as a 3-D ``(blocks, rows, cols)`` computation. When the
body never mixes rows (elementwise work, reductions over other dims,
broadcasts along rows) the batch and row dims can be merged: the body is
re-evaluated on the ``(blocks * rows, cols)`` slab with its shape parameters
widened, and XLA sees the same 2-D program as the whole-array version.

``rowwise_plan`` decides this from the discharged body; anything it does not
recognise (a dot, a transpose, an iota or a slice along rows, use of the
row-block program id, per-row data that does not move with the block) keeps
the batched evaluation.
"""

from __future__ import annotations

from pallas_frontend import _jax_compat as jc
from pallas_frontend.interpreter.equation_eval import eval_equations

_ELEMENTWISE = frozenset("""
    add sub mul div rem max min neg abs sign exp exp2 log log1p expm1 sqrt rsqrt cbrt pow
    integer_pow tanh logistic sin cos tan atan2 floor ceil round is_finite not and or xor
    eq ne lt le gt ge select_n convert_element_type clamp erf erf_inv square reciprocal
    stop_gradient nextafter copy copy_p real imag conj
""".split())
_REDUCTIONS = frozenset("reduce_sum reduce_max reduce_min reduce_prod reduce_and reduce_or "
                        "argmax argmin".split())
_CUMULATIVE = frozenset("cumsum cumprod cummax cummin cumlogsumexp".split())


class _NotRowwise(Exception):
    pass


def rowwise_plan(body, n_grid: int, row_axis: int, rowful_inputs, n_out: int, rows: int):
    """True when ``body`` may run on merged rows: inputs flagged in ``rowful_inputs``
    carry the row dim first (``rows`` per block), the others do not depend on it."""
    jaxpr = body.jaxpr
    if jaxpr.effects or rows < 2:
        return False
    n_in = len(rowful_inputs)
    if len(jaxpr.invars) != n_grid + n_in + n_out:
        return False
    row_id = jaxpr.invars[row_axis]
    # the other grid indices and the body's constants carry no rows
    flags = {v: False for v in (*jaxpr.constvars, *jaxpr.invars[:n_grid])}
    for k, v in enumerate(jaxpr.invars[n_grid:n_grid + n_in]):
        flags[v] = bool(rowful_inputs[k])
    for v in jaxpr.invars[n_grid + n_in:]:
        flags[v] = True            # output blocks: rows first (never read here, see caller)
    try:
        _analyse(jaxpr, flags, rows, forbidden={row_id})
    except _NotRowwise:
        return False
    outs = jaxpr.outvars[n_in:n_in + n_out]
    return all(not isinstance(v, jc.Literal) and flags.get(v) for v in outs)


def _flag(flags, x):
    return False if isinstance(x, jc.Literal) else flags[x]


def _shape(x):
    return tuple(getattr(x.aval, "shape", ()))


def _analyse(jaxpr, flags, rows, forbidden):
    for eqn in jaxpr.eqns:
        if any(not isinstance(x, jc.Literal) and x in forbidden for x in eqn.invars):
            raise _NotRowwise("uses the row-block program id")
        name = eqn.primitive.name
        ins = [_flag(flags, x) for x in eqn.invars]
        if name in ("pjit", "jit", "closed_call"):
            inner = (eqn.params.get("jaxpr") or eqn.params.get("call_jaxpr")).jaxpr
            sub = dict(zip(inner.invars, ins))
            _analyse(inner, sub, rows, forbidden=set())
            outs = [sub[v] if not isinstance(v, jc.Literal) else False for v in inner.outvars]
        else:
            outs = [_rule(eqn, name, ins, rows)] * len(eqn.outvars)
        for v, f in zip(eqn.outvars, outs):
            flags[v] = f


def _rule(eqn, name, ins, rows) -> bool:
    out_shape = _shape(eqn.outvars[0])
    if name in _ELEMENTWISE:
        if not any(ins):
            return False
        for x, f in zip(eqn.invars, ins):
            s = _shape(x)
            if not f and s and s[0] != 1:
                raise _NotRowwise("per-row data that does not move with the block")
        return True
    if name in _REDUCTIONS:
        axes = tuple(eqn.params.get("axes", ()))
        if ins[0] and 0 in axes:
            raise _NotRowwise("reduces across rows")
        return ins[0]
    if name in _CUMULATIVE:
        if ins[0] and eqn.params.get("axis") == 0:
            raise _NotRowwise("scans across rows")
        return ins[0]
    if name == "broadcast_in_dim":
        dims = tuple(eqn.params["broadcast_dimensions"])
        src = _shape(eqn.invars[0])
        if ins[0]:
            if not dims or dims[0] != 0 or not out_shape or out_shape[0] != rows:
                raise _NotRowwise("moves the row dim")
            return True
        if out_shape and out_shape[0] == rows:
            if 0 in dims and src[dims.index(0)] != 1:
                raise _NotRowwise("broadcasts per-row data")
            return True
        return False
    if name in ("reshape", "squeeze", "expand_dims"):
        if not ins[0]:
            if out_shape and out_shape[0] == rows and rows != 1:
                raise _NotRowwise("reshapes into rows")
            return False
        if name == "reshape" and (eqn.params.get("dimensions") is not None or
                                  not out_shape or out_shape[0] != rows):
            raise _NotRowwise("reshapes the row dim")
        if name == "squeeze" and 0 in tuple(eqn.params["dimensions"]):
            raise _NotRowwise("squeezes the row dim")
        return True
    if name == "iota":
        if out_shape and out_shape[0] == rows:
            if eqn.params["dimension"] == 0:
                raise _NotRowwise("an iota along rows")
            return True
        return False
    raise _NotRowwise(name)


def evaluate_merged(body, args, total_rows: int, rows: int):
    """Evaluates ``body`` with every row-first value widened to ``total_rows`` rows
    (after ``rowwise_plan`` said yes: every shape parameter whose first entry is
    ``rows`` then belongs to a row-first value)."""
    return _eval(body.jaxpr, body.consts, list(args), total_rows, rows)


def _eval(jaxpr, consts, args, total, rows):
    def rule(eqn, read):
        vals = [read(x) for x in eqn.invars]
        if eqn.primitive.name in ("pjit", "jit", "closed_call"):
            inner = eqn.params.get("jaxpr") or eqn.params.get("call_jaxpr")
            return _eval(inner.jaxpr, inner.consts, vals, total, rows)
        return jc.bind_equation(_widened(eqn, total, rows), vals)

    return eval_equations(jaxpr, consts, args, rule)


class _Eqn:
    """An equation with replaced params (``bind_equation`` reads only these two)."""

    def __init__(self, primitive, params):
        self.primitive, self.params = primitive, params


_SHAPE_PARAM = {"broadcast_in_dim": "shape", "reshape": "new_sizes", "iota": "shape"}


def _widened(eqn, total, rows):
    key = _SHAPE_PARAM.get(eqn.primitive.name)
    if key is None:
        return eqn
    shape = tuple(eqn.params[key])
    if not shape or shape[0] != rows:
        return eqn
    params = dict(eqn.params)
    params[key] = (total,) + shape[1:]
    return _Eqn(eqn.primitive, params)
