"""Index maps that are affine in the grid indices, in closed form.

Most index maps are ``lambda i, j: (i, 2 * j + 1)``: each output is
``const + sum(coef[a] * idx[a])``. For those the range check, the padding an
operand needs and the grid analysis need no per-point table: the extreme values
over the grid box sit at its corners, and the first violating point in
row-major order can be solved for axis by axis. ``affine_outputs`` recognises
such maps by evaluating the jaxpr symbolically; any other primitive (div, rem,
max, select, ...) makes it give up, and the caller enumerates the grid instead.

The recognised programs run with int32 semantics, so every intermediate value
is also required to stay within int32 over the whole grid: then no step wraps
and the exact integer result is what the kernel sees.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from pallas_frontend import _jax_compat as jc

_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1


@dataclasses.dataclass(frozen=True)
class Affine:
    """``const + sum(coefs[a] * idx[a])`` over the grid axes (Python ints)."""
    const: int
    coefs: tuple[int, ...]

    def scaled(self, k: int) -> Affine:
        return Affine(self.const * k, tuple(c * k for c in self.coefs))

    def bounds(self, grid) -> tuple[int, int]:
        """(min, max) over the grid box; the grid must be non-empty."""
        lo = hi = self.const
        for c, g in zip(self.coefs, grid):
            span = c * (g - 1)
            lo, hi = lo + min(0, span), hi + max(0, span)
        return lo, hi

    def over(self, grid) -> np.ndarray:
        """Grid-shaped int64 values (materialised: only for small grids)."""
        out = np.full(tuple(grid), self.const, np.int64)
        for a, (c, g) in enumerate(zip(self.coefs, grid)):
            if c:
                shape = [1] * len(grid)
                shape[a] = g
                out = out + c * np.arange(g, dtype=np.int64).reshape(shape)
        return out

    def first_outside(self, grid, lo: int, hi: int) -> tuple[int, ...] | None:
        """The first grid point (row-major) whose value is not in ``[lo, hi]``."""
        n = len(grid)
        if any(g == 0 for g in grid):
            return None
        # rest_lo[a], rest_hi[a]: range of the sum over axes a.. (all attained).
        rest_lo, rest_hi = [0] * (n + 1), [0] * (n + 1)
        for a in reversed(range(n)):
            span = self.coefs[a] * (grid[a] - 1)
            rest_lo[a] = rest_lo[a + 1] + min(0, span)
            rest_hi[a] = rest_hi[a + 1] + max(0, span)
        prefix = self.const
        if lo <= prefix + rest_lo[0] and prefix + rest_hi[0] <= hi:
            return None
        point = []
        for a in range(n):
            c, g = self.coefs[a], grid[a]
            # Smallest i whose prefix can still be completed to a value < lo or > hi.
            below = _first_index(c, prefix + rest_lo[a + 1] - lo, g, want_negative=True)
            above = _first_index(c, prefix + rest_hi[a + 1] - hi, g, want_negative=False)
            i = min(x for x in (below, above) if x is not None)
            point.append(i)
            prefix += c * i
        return tuple(point)


def _first_index(c: int, r: int, g: int, *, want_negative: bool) -> int | None:
    """Smallest i in [0, g) with ``c*i + r < 0`` (or ``> 0``), else None."""
    if not want_negative:
        c, r = -c, -r
    if r < 0:
        return 0
    if c >= 0:
        return None
    i = r // -c + 1        # c*i + r < 0  <=>  i > r / -c
    return i if i < g else None


class _NotAffine(Exception):
    pass


def affine_outputs(jaxpr: jc.Jaxpr, grid) -> list[Affine] | None:
    """The index map's outputs as affine functions of the grid indices, or None."""
    grid = tuple(int(g) for g in grid)
    if any(g == 0 for g in grid) or len(jaxpr.invars) != len(grid):
        return None
    n = len(grid)
    args = [Affine(0, tuple(int(a == b) for b in range(n))) for a in range(n)]
    try:
        outs = _eval(jaxpr, list(jaxpr.consts) if hasattr(jaxpr, "consts") else [], args, grid)
    except _NotAffine:
        return None
    return outs


def _const(x, n) -> Affine:
    a = np.asarray(x)
    if a.ndim != 0 or not (np.issubdtype(a.dtype, np.integer) or a.dtype == bool):
        raise _NotAffine
    return Affine(int(a), (0,) * n)


def _checked(v: Affine, grid) -> Affine:
    lo, hi = v.bounds(grid)
    if lo < _I32_MIN or hi > _I32_MAX:
        raise _NotAffine  # would wrap in int32: let the enumerating evaluator decide
    return v


def _add(x: Affine, y: Affine) -> Affine:
    return Affine(x.const + y.const, tuple(a + b for a, b in zip(x.coefs, y.coefs)))


def _mul(x: Affine, y: Affine) -> Affine:
    if not any(y.coefs):
        return x.scaled(y.const)
    if not any(x.coefs):
        return y.scaled(x.const)
    raise _NotAffine


def _eval(jaxpr, consts, args, grid):
    n = len(grid)
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    env = {}

    def read(a):
        if isinstance(a, jc.Literal):
            return _const(a.val, n)
        return env[a]

    for v, c in zip(inner.constvars, consts):
        env[v] = _const(c, n)
    for v, a in zip(inner.invars, args):
        env[v] = a
    for eqn in inner.eqns:
        name = eqn.primitive.name
        if any(tuple(getattr(v.aval, "shape", ())) for v in eqn.outvars):
            raise _NotAffine  # only scalar programs
        if name in ("pjit", "jit", "closed_call"):
            sub = eqn.params.get("jaxpr") or eqn.params.get("call_jaxpr")
            outs = _eval(sub, list(getattr(sub, "consts", [])), [read(x) for x in eqn.invars],
                         grid)
        else:
            vals = [read(x) for x in eqn.invars]
            outs = [_checked(_rule(name, vals, eqn.params), grid)]
        for v, o in zip(eqn.outvars, outs):
            env[v] = o
    return [read(v) for v in inner.outvars]


def _rule(name, vals, params) -> Affine:
    if name == "add":
        return _add(*vals)
    if name == "sub":
        return _add(vals[0], vals[1].scaled(-1))
    if name == "neg":
        return vals[0].scaled(-1)
    if name == "mul":
        return _mul(*vals)
    if name == "shift_left" and not any(vals[1].coefs) and 0 <= vals[1].const < 31:
        return vals[0].scaled(1 << vals[1].const)
    if name in ("multiple_of", "squeeze"):
        return vals[0]
    if name == "convert_element_type":
        dtype = np.dtype(params["new_dtype"])
        if dtype in (np.dtype(np.int32), np.dtype(np.int64)):
            return vals[0]
    raise _NotAffine
