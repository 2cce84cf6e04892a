"""Accumulation over a sequential axis as one contraction (a blocked matmul's k).

A kernel whose only sequential axis ``k`` revisits each output block and
updates it as ``o = X(k, o) + t(k, inputs)``, where ``X`` is ``o`` itself for
every ``k >= 1`` (``X(0, o)`` is typically ``pl.when(k == 0)``'s zeros), ends
with ``o = X(0, o_init) + sum_k t(k)``. When ``t`` is a ``dot`` of the blocks,
the sum over ``k`` of the batched dots is one ``dot_general`` that contracts
``k`` too: XLA then runs a single GEMM instead of one per step.

Reassociation: the sequential order is ``((X + t0) + t1) + ...``; this path
computes ``X + (t0 + t1 + ...)`` with the inner sum inside the GEMM. For floats
the result differs by rounding only (documented in docs/interpreter.md); for
integers it is exact. The path is used only when that rewrite applies; anything
else keeps the exact loop.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from pallas_frontend import _jax_compat as jc
from pallas_frontend.interpreter.batched_blocks import batched_access
from pallas_frontend.interpreter.equation_eval import bind_read, eval_equations, live_equations
from pallas_frontend.interpreter import specialize
from pallas_frontend.interpreter.specialize import body_for_steps


def accumulation_terms(body, n_grid: int, n_in: int, n_out: int, later_ranges):
    """Per output, the outvar ``t`` of ``o_new = X + t``; None unless every output
    has that form with ``X`` the incoming block for all steps >= 1."""
    jaxpr = body.jaxpr
    if jaxpr.effects or len(jaxpr.invars) != n_grid + n_in + n_out:
        return None
    later = body_for_steps(body, later_ranges)
    terms = []
    for k in range(n_out):
        o_old = jaxpr.invars[n_grid + n_in + k]
        found = _add_of(jaxpr, jaxpr.outvars[n_in + k], o_old)
        spec = _add_of(later.jaxpr, later.jaxpr.outvars[n_in + k],
                       later.jaxpr.invars[n_grid + n_in + k])
        if found is None or spec is None or spec[0] is not later.jaxpr.invars[n_grid + n_in + k]:
            return None
        terms.append(found)
    return terms


def _add_of(jaxpr, var, o_old):
    """(X, t) when ``var = add(X, t)`` with ``t`` not depending on ``o_old``."""
    producer = next((e for e in jaxpr.eqns if var in e.outvars), None)
    if producer is None or producer.primitive.name != "add":
        return None
    tainted = _tainted_by(jaxpr, o_old)
    x, y = producer.invars
    for a, b in ((x, y), (y, x)):
        if not isinstance(b, jc.Literal) and id(b) not in tainted:
            return a, b
    return None


def _tainted_by(jaxpr, source):
    tainted = {id(source)}
    for eqn in jaxpr.eqns:
        if any(not isinstance(x, jc.Literal) and id(x) in tainted for x in eqn.invars):
            tainted.update(id(v) for v in eqn.outvars)
    return tainted


def _eval_vars(jaxpr, consts, args, wanted):
    """The values of ``wanted``, evaluating only the equations they need."""
    return eval_equations(jaxpr, consts, args, bind_read, wanted=wanted,
                          live=live_equations(jaxpr, wanted))


def initial_parts(plan, terms, held_avals, *, first_blocks, held_blocks):
    """``X(first step, o_init)`` per output, batched over the plan's batch axes
    (shaped as ``held_avals``) or, when no batch point differs, one block.
    ``first_blocks()`` and ``held_blocks()`` give the first step's input blocks
    and the incoming output blocks; they are called only when ``X`` depends on them.
    An ``X`` that is one constant everywhere comes back as its ``specialize.Filled``."""
    kernel = plan.kernel
    n_grid, n_in = len(kernel.grid), len(kernel.in_mappings)
    body = plan.base.body

    first = {a: (0, 0) for a in range(n_grid) if a not in plan.batch_axes}

    def x_of(*args, keep_filled=False):
        # Specialised to the first step, so `pl.when(k == 0)` picks its branch here.
        return specialize.evaluate(body, list(args), first, [x for x, _ in terms],
                                   keep_filled=keep_filled)

    # Usually X(0, .) is a constant (the zeros of `pl.when(k == 0)`): try without
    # the batched operands first; any use of one falls back to the vmapped form.
    probe = [_Unused() for _ in range(len(body.jaxpr.invars))]
    for a in first:
        probe[a] = jnp.int32(0)
    try:
        outs = x_of(*probe, keep_filled=True)
    except Exception:  # noqa: BLE001 - JAX met a stand-in: X needs the batched operands
        outs = None
    if outs is None or any(isinstance(o, _Unused) for o in outs):
        fn = x_of
        for j in reversed(range(len(plan.batch_axes))):
            axes = [0 if a == plan.batch_axes[j] else None for a in range(n_grid)]
            axes += [0 if acc.batch_levels[j] else None for acc in plan.accesses[:n_in]]
            axes += [0] * len(held_avals)
            fn = jax.vmap(fn, in_axes=axes)
        idx = [jnp.arange(kernel.grid[a], dtype=jnp.int32) if a in plan.batch_axes else
               jnp.int32(0) for a in range(n_grid)]
        outs = fn(*idx, *first_blocks(), *held_blocks())
    # A value shared by every batch point keeps its block shape (the caller broadcasts);
    # a constant fill of the output's dtype stays a ``specialize.Filled``.
    return [o if isinstance(o, specialize.Filled) and o.dtype == h.dtype else
            _array(o).astype(h.dtype) for o, h in zip(outs, held_avals)]


def _array(v):
    return v.array() if isinstance(v, specialize.Filled) else v


class _Unused:
    """Stands for a batched operand the first-step part should not need; JAX
    refuses it wherever it is used."""


def slab_contraction(plan, inputs_padded, terms, axis: int):
    """``sum_k t(k)`` per output when each ``t`` is one ``dot_general`` of two input
    blocks: a single dot of the inputs' slabs (all blocks as one slice), with the
    block dims tiled by ``k`` contracted in natural order. Each sum is returned as
    the output's slab (``BatchedAccess.slab`` layout; ``split`` makes it blocks).
    None if not that case."""
    kernel = plan.kernel
    grid = tuple(kernel.grid)
    n_grid, n_in = len(grid), len(kernel.in_mappings)
    body = plan.base.body.jaxpr
    batch_axes = tuple(sorted(set(plan.batch_axes) | {axis}))
    fixed = tuple(a for a in range(n_grid) if a not in batch_axes)
    ins = body.invars[n_grid:n_grid + n_in]
    producer = {id(v): e for e in body.eqns for v in e.outvars}
    out_accs = plan.accesses[n_in:]
    results = []
    for k, (_, t) in enumerate(terms):
        eqn = producer.get(id(t))
        if eqn is None or eqn.primitive.name != "dot_general" or \
                not all(any(x is v for v in ins) for x in eqn.invars):
            return None
        (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
        if lb or rb:
            return None
        which = [next(i for i, v in enumerate(ins) if v is x) for x in eqn.invars]
        accs = [batched_access(plan.base.layouts[i], fixed, batch_axes, grid, is_output=False)
                for i in which]
        out_acc = out_accs[k]
        if not all(a.is_view and not a.layout.squeezed_axes for a in (*accs, out_acc)):
            return None

        def axis_of(acc, d, axes):
            j = acc.tiled[d]
            return None if j is None else axes[j]

        pairs = [(axis_of(accs[0], c, batch_axes), axis_of(accs[1], r, batch_axes))
                 for c, r in zip(lc, rc)]
        if any(p != q or p not in (axis, None) for p, q in pairs) or \
                [p for p, _ in pairs].count(axis) != 1:
            return None
        free = [axis_of(accs[0], d, batch_axes) for d in range(len(accs[0].tiled))
                if d not in lc]
        free += [axis_of(accs[1], d, batch_axes) for d in range(len(accs[1].tiled))
                 if d not in rc]
        if free != [axis_of(out_acc, d, plan.batch_axes) for d in range(len(out_acc.tiled))]:
            return None
        slabs = [a.slab(inputs_padded[i], 0) for a, i in zip(accs, which)]
        out = lax.dot_general(*slabs, ((tuple(lc), tuple(rc)), ((), ())),
                              precision=eqn.params.get("precision"),
                              preferred_element_type=eqn.params.get("preferred_element_type"))
        results.append(out.astype(t.aval.dtype))
    return results


def summed_terms(plan, layouts, inputs_padded, terms, axis: int):
    """``sum_k t(k)`` per output as a batch of blocks (batch axes lead), or None
    when the sum does not become one contraction."""
    kernel = plan.kernel
    grid = tuple(kernel.grid)
    n_grid, n_in = len(grid), len(kernel.in_mappings)
    batch_axes = tuple(sorted(set(plan.batch_axes) | {axis}))
    fixed = tuple(a for a in range(n_grid) if a not in batch_axes)   # all of size 1
    accesses = [batched_access(lay, fixed, batch_axes, grid, is_output=False)
                for lay in layouts[:n_in]]
    if not all(acc.is_view for acc in accesses):
        return None
    body = plan.base.body
    wanted = [t for _, t in terms]

    def t_of(*args):
        idx, ins = args[:n_grid], args[n_grid:]
        blanks = [jnp.zeros(v.aval.shape, v.aval.dtype)
                  for v in body.jaxpr.invars[n_grid + n_in:]]
        return _eval_vars(body.jaxpr, body.consts, [*idx, *ins, *blanks], wanted)

    fn = t_of
    for j in reversed(range(len(batch_axes))):
        axes = [0 if a == batch_axes[j] else None for a in range(n_grid)]
        axes += [0 if acc.batch_levels[j] else None for acc in accesses]
        fn = jax.vmap(fn, in_axes=axes)
    kpos = batch_axes.index(axis)
    idx = [jnp.arange(grid[a], dtype=jnp.int32) if a in batch_axes else jnp.int32(0)
           for a in range(n_grid)]
    blocks = [acc.read(x, 0) for acc, x in zip(accesses, inputs_padded)]
    closed = jax.make_jaxpr(lambda *a: [jnp.sum(t, axis=kpos) for t in fn(*a)])(*idx, *blocks)
    rewritten = _ContractedSums(closed.jaxpr)
    if not rewritten.all_contracted:
        return None
    return rewritten(closed.consts, [*idx, *blocks])


class _ContractedSums:
    """Evaluates a jaxpr, turning ``reduce_sum`` over a batch dim of a
    ``dot_general`` (seen through one transpose) into a contraction of that dim.
    Decided before anything is evaluated; the replaced dots are never emitted."""

    def __init__(self, jaxpr):
        self.jaxpr = jaxpr
        producer = {id(v): e for e in jaxpr.eqns for v in e.outvars}
        self.plans = {}
        sums = [e for e in jaxpr.eqns if e.primitive.name == "reduce_sum"]
        for eqn in sums:
            plan = _contraction_plan(eqn, producer)
            if plan is not None:
                self.plans[id(eqn)] = plan
        self.all_contracted = bool(sums) and len(self.plans) == len(sums)

    def _deps(self, eqn):
        plan = self.plans.get(id(eqn))
        return plan[0].invars if plan else eqn.invars

    def __call__(self, consts, args):
        def rule(eqn, read):
            plan = self.plans.get(id(eqn))
            return [_contracted(eqn, plan, read)] if plan else bind_read(eqn, read)

        live = live_equations(self.jaxpr, self.jaxpr.outvars, self._deps)
        return eval_equations(self.jaxpr, consts, args, rule, live=live)


def _contraction_plan(eqn, producer):
    """(dot eqn, transpose perm or None, dot batch dim summed) for a reduce_sum, or None."""
    axes = tuple(eqn.params["axes"])
    if len(axes) != 1:
        return None
    src = eqn.invars[0]
    perm = None
    prod = producer.get(id(src))
    if prod is not None and prod.primitive.name == "transpose":
        perm = tuple(prod.params["permutation"])
        prod = producer.get(id(prod.invars[0]))
    if prod is None or prod.primitive.name != "dot_general":
        return None
    axis = perm[axes[0]] if perm else axes[0]
    (_, _), (lb, _) = prod.params["dimension_numbers"]
    return (prod, perm, axis) if axis < len(lb) else None


def _contracted(eqn, plan, read):
    prod, perm, axis = plan
    (lc, rc), (lb, rb) = prod.params["dimension_numbers"]
    lhs, rhs = (read(x) for x in prod.invars)
    # The step axis goes first among the contracted dims: an element's offset
    # along k is step * block + position, so (step, position) is the natural order.
    dims = (((lb[axis],) + tuple(lc), (rb[axis],) + tuple(rc)),
            (tuple(b for i, b in enumerate(lb) if i != axis),
             tuple(b for i, b in enumerate(rb) if i != axis)))
    out = lax.dot_general(lhs, rhs, dims, precision=prod.params.get("precision"),
                          preferred_element_type=prod.params.get("preferred_element_type"))
    if perm:
        kept = [p for p in perm if p != axis]
        rank = {p: i for i, p in enumerate(sorted(kept))}
        new_perm = [rank[p] for p in kept]
        if new_perm != sorted(new_perm):
            out = lax.transpose(out, new_perm)
    return out.astype(eqn.outvars[0].aval.dtype)
