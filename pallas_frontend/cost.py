"""``pl.estimate_cost``: a ``CostEstimate`` for a JAX function, from its jaxpr.

The counting convention is JAX Pallas's, so a kernel that passes
``cost_estimate=pl.estimate_cost(reference_fn, ...)`` gets the same hint
under either: one flop per element of an elementwise arithmetic result, one
transcendental per element of exp/log/sin/..., ``2 * m * n * k`` for a matmul,
integer powers by repeated squaring; calls (``jit``, ``custom_vjp``,
``run_state``, and ``custom_jvp`` where the installed JAX counts it: 0.12.1 on)
count their bodies; everything else (loops, conditionals, data movement) counts
nothing. ``bytes_accessed`` adds the bytes of every argument and result.
"""

from __future__ import annotations

import functools
import math

import jax

from pallas_frontend.specs import CostEstimate

_ELEMENTWISE = frozenset({"add", "mul", "sub", "div", "min", "max", "or", "and", "xor"})
_UNARY = frozenset({"neg", "floor", "ceil", "round", "not"})
_TRANSCENDENTAL = frozenset({"cos", "sin", "tan", "sinh", "cosh", "tanh", "acos", "asin",
                             "atan", "exp", "log", "logistic", "sqrt",
                             # lax primitives new in JAX 0.12.1 (absent before: no effect)
                             "cospi", "sinpi", "tanpi", "acospi", "asinpi", "atanpi",
                             "exp2m1", "log2p1"})
# primitive name -> the param holding the body whose cost is the call's
_CALLS = {"jit": "jaxpr", "pjit": "jaxpr", "custom_vjp_call": "call_jaxpr",
          "run_state": "jaxpr"}


@functools.cache
def _calls() -> dict:
    """_CALLS, with ``custom_jvp_call`` where the installed JAX's ``estimate_cost``
    counts its body (JAX 0.12.1 on; JAX 0.10-0.12.0.1 count nothing for it): asked
    of JAX's public ``estimate_cost`` once, on a custom_jvp of ``exp``."""
    from jax.experimental import pallas as jax_pallas
    exp = jax.custom_jvp(jax.numpy.exp)
    exp.defjvp(lambda primals, tangents: (exp(*primals), tangents[0]))
    counted = jax_pallas.estimate_cost(exp, jax.ShapeDtypeStruct((4,), "float32"))
    return {**_CALLS, "custom_jvp_call": "call_jaxpr"} if counted.transcendentals else _CALLS


def _size(aval) -> int:
    return math.prod(aval.shape)


def _integer_pow_flops(n: int, y: int) -> int:
    if y in (0, 1):
        return 0
    return n * (math.floor(math.log2(abs(y))) + bin(y).count("1") + (y < 0))


def _dot_flops(lhs, rhs, dimension_numbers) -> int:
    (lc, rc), (_, rb) = dimension_numbers
    flops = 2 * math.prod(lhs.shape[d] for d in lc)
    flops *= math.prod(s for d, s in enumerate(lhs.shape) if d not in lc)
    flops *= math.prod(s for d, s in enumerate(rhs.shape) if d not in rc and d not in rb)
    return flops


def _jaxpr_cost(jaxpr) -> tuple[int, int]:
    """(flops, transcendentals) of one jaxpr's equations."""
    flops = trans = 0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name in _ELEMENTWISE:
            flops += _size(eqn.outvars[0].aval)
        elif name in _UNARY:
            flops += _size(eqn.invars[0].aval)
        elif name in _TRANSCENDENTAL:
            trans += _size(eqn.invars[0].aval)
        elif name == "integer_pow":
            flops += _integer_pow_flops(_size(eqn.invars[0].aval), eqn.params["y"])
        elif name == "dot_general":
            flops += _dot_flops(eqn.invars[0].aval, eqn.invars[1].aval,
                                eqn.params["dimension_numbers"])
        elif name in _calls() and _calls()[name] in eqn.params:
            body = eqn.params[_calls()[name]]
            f, t = _jaxpr_cost(getattr(body, "jaxpr", body))
            flops, trans = flops + f, trans + t
    return flops, trans


def estimate_cost(fun, *args, **kwargs) -> CostEstimate:
    """The cost of ``fun(*args, **kwargs)``; ``args`` are arrays or
    ``jax.ShapeDtypeStruct`` (pytrees of them). Pass the result as
    ``pallas_call(..., cost_estimate=...)``."""
    avals = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), args)
    closed = jax.make_jaxpr(functools.partial(fun, **kwargs))(*avals)
    flops, trans = _jaxpr_cost(closed.jaxpr)
    nbytes = sum(_size(a) * a.dtype.itemsize for a in jax.tree.leaves(avals))
    nbytes += sum(_size(v.aval) * v.aval.dtype.itemsize for v in closed.jaxpr.outvars)
    return CostEstimate(flops=int(flops), transcendentals=int(trans), bytes_accessed=int(nbytes))


