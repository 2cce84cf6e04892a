"""Replays a kernel jaxpr inside a JAX Mosaic GPU kernel body.

Equations of plain JAX primitives (arithmetic, reductions, ``axis_index``)
are re-bound as they are. Ref reads and writes are replayed through the Ref
*methods* of the rebuilt kernel's Refs (``ref[idx]``, ``ref[idx] = v``), so
JAX applies its own rules for SMEM views, tiled/swizzled buffers and WGMMA
accumulators. The frontend's primitives and this plugin's (``ops.py``) have
substitution rules. Loops and branches are rebuilt with ``lax`` and their
bodies replayed: they were traced over the frontend's Refs.

Scoped allocations (``run_scoped`` traces to ``empty_ref`` ... ``free_ref``)
become ``pl.run_scoped`` around the rest of the enclosing body: the buffer
lives a little longer than the user asked, which only costs SMEM.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
from jax import lax
from jax.extend import core as jex

from pallas_frontend.backend_api import FRONTEND_OWNER, primitive_owner, replay_equations

from pallas_mgpu import _jax_private
from pallas_mgpu.memory import scratch_to_jax

_RULES: dict[object, Callable] = {}          # primitive -> rule(eqn, invals) -> outvals
_FRONTEND_RULES: dict[str, Callable] = {}    # frontend primitive name -> rule
_TYPE_ONLY = ("pvary", "pcast")              # shard_map's varying-axes casts: types only
_REPLAYED = ("cond", "while", "scan", "pjit", "jit", "closed_call", "custom_jvp_call",
             "custom_vjp_call", "remat", "checkpoint")


def register_rule(prim, rule: Callable) -> None:
    _RULES[prim] = rule


def frontend_rule(name: str):
    def register(fn):
        _FRONTEND_RULES[name] = fn
        return fn
    return register


def reset() -> None:
    _whole_reads.clear()
    _pending.clear()


def eval_jaxpr(jaxpr, consts, *args, keep_columns: bool = False):
    env = dict(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    return _eval_from(jaxpr, 0, env, keep_columns)


def eval_closed(closed, *args):
    if not hasattr(closed, "consts"):
        return eval_jaxpr(closed, (), *args)
    return eval_jaxpr(closed.jaxpr, closed.consts, *args)


# The variables read by each jaxpr being replayed (innermost last): a Ref
# write whose old value nobody reads must not read the Ref (an extra read of
# an output the race detector and uninitialised memory would see).
_used_vars: list[set] = []


def _eval_from(jaxpr, start: int, env: dict, keep_columns: bool = False):
    used = {v for e in jaxpr.eqns for v in e.invars if isinstance(v, jex.Var)}
    used.update(v for v in jaxpr.outvars if isinstance(v, jex.Var))
    _used_vars.append(used)
    try:
        outs = replay_equations(jaxpr, env, _replay_equation, start=start, open_scope=_open_scope)
        outs = [x.force() if isinstance(x, Deferred) else x for x in outs]
        if _layout_hints["on"] and not keep_columns:
            from pallas_mgpu import keepdims
            outs = [keepdims.materialize(x) for x in outs]
        return outs
    finally:
        _used_vars.pop()


def _replay_equation(eqn, invals):
    if _layout_hints["on"]:
        invals = _settle_deferred(eqn, invals)
        from pallas_mgpu import keepdims
        kept = keepdims.replay(eqn, invals)
        if kept is not None:
            return kept
        if eqn.primitive.name != "scan":     # a loop carries columns as vectors (_replay_scan)
            invals = [keepdims.materialize(x) for x in invals]
    name = eqn.primitive.name
    if name in _TYPE_ONLY:
        return invals if eqn.primitive.multiple_results else invals[0]
    if eqn.primitive in _RULES:
        return _RULES[eqn.primitive](eqn, invals)
    if primitive_owner(eqn.primitive) == FRONTEND_OWNER:
        rule = _FRONTEND_RULES.get(name)
        if rule is None:
            raise NotImplementedError(f"pallas_mgpu cannot lower the frontend primitive "
                                      f"'{name}'.")
        return rule(eqn, invals)
    if name in _REF_ACCESS:
        return _REF_ACCESS[name](eqn, invals)
    if name in _REPLAYED:
        return _replay_control_flow(eqn, invals)
    return eqn.primitive.bind(*invals, **eqn.params)


def _open_scope(jaxpr, k: int, env: dict):
    from jax.experimental import pallas as pl
    eqn = jaxpr.eqns[k]
    space = eqn.params.get("memory_space")
    collective = ()
    from pallas_frontend.backend_api import ScopedAllocation
    if isinstance(space, ScopedAllocation):       # run_scoped(..., collective_axes=...)
        collective = space.collective_axes
    # A collective run_scoped of several buffers traces to one allocation each,
    # back to back: they share one JAX run_scoped, whose lowering synchronises
    # the warpgroups once per scope (JAX 0.12.1 lowers each scope's buffers
    # where it opens, so one scope per buffer cost a barrier each).
    allocs = [eqn]
    while collective and k + len(allocs) < len(jaxpr.eqns):
        nxt = jaxpr.eqns[k + len(allocs)]
        nxt_space = nxt.params.get("memory_space")
        if nxt.primitive is not eqn.primitive or not isinstance(nxt_space, ScopedAllocation) \
                or nxt_space.collective_axes != collective:
            break
        allocs.append(nxt)
    types = []
    for e in allocs:
        ty, where = e.params["ty"], e.params.get("memory_space")
        where = where.memory_space if isinstance(where, ScopedAllocation) else where
        types.append(scratch_to_jax(where, ty.shape, ty.dtype))

    def body(*refs):
        for e, ref in zip(allocs, refs):
            env[e.outvars[0]] = ref
        return _eval_from(jaxpr, k + len(allocs), env)
    kw = {"collective_axes": collective} if collective else {}
    return pl.run_scoped(body, *types, **kw)


# --- Ref reads and writes, through the rebuilt kernel's Ref methods -----------------

def _target(ref, leaves, tree):
    """The rebuilt Ref seen through the transforms recorded with the access."""
    transforms = jax.tree.unflatten(tree, leaves)
    if not transforms:
        return ref
    *views, last = transforms
    ref = _jax_private.view(ref, tuple(views))
    if hasattr(last, "indices"):          # an NDIndexer: index with it
        return ref, last
    return _jax_private.view(ref, (last,)), None


def _split(eqn, invals, n_lead):
    ref, lead, leaves = invals[0], invals[1:n_lead], invals[n_lead:]
    target = _target(ref, leaves, eqn.params["tree"])
    if isinstance(target, tuple):
        return target[0], target[1], lead
    return target, None, lead


def _index(indexer, shape):
    if indexer is None:
        return tuple(slice(None) for _ in shape) or ...
    from jax.experimental import pallas as pl
    out = []
    for ix in indexer.indices:
        if hasattr(ix, "start") and hasattr(ix, "size") and hasattr(ix, "stride"):
            if ix.stride != 1:
                raise NotImplementedError("pallas_mgpu: strided Ref slices are not supported.")
            out.append(pl.ds(ix.start, ix.size))
        else:
            out.append(ix)
    return tuple(out)


# Values read whole from a Ref, by id (the value is kept alive with it): a
# matmul of two of them becomes a WGMMA reading the SMEM Refs (matmul.py).
_whole_reads: dict[int, tuple] = {}


def ref_read_whole(value):
    """The Ref ``value`` was read from as a whole, if it was."""
    hit = _whole_reads.get(id(value))
    return hit[1] if hit is not None and hit[0] is value else None


def _get(eqn, invals):
    ref, indexer, _ = _split(eqn, invals, 1)
    if _is_accumulator(ref):
        return ref[...]
    whole = indexer is None or all(isinstance(ix, type(slice(None))) or _full(ix, n)
                                   for ix, n in zip(indexer.indices, ref.shape))
    if _layout_hints["on"] and whole and _defer(ref):
        later = Deferred(ref)
        _whole_reads[id(later)] = (later, ref)
        _pending.append(later)
        return later
    value = ref[_index(indexer, ref.shape)]
    value = _with_register_layout(value)
    if indexer is None or all(isinstance(ix, type(slice(None))) or _full(ix, n)
                              for ix, n in zip(indexer.indices, ref.shape)):
        _whole_reads[id(value)] = (value, ref)
    return value


# --- reads of big tiles, deferred to their first use (compiling only) -----------------
# ``o[...] += jnp.dot(x, y)`` reads o before the matmul: with a 128x128 float32
# tile that is 128 registers a thread held across the WGMMA's 128-register
# accumulator, and ptxas spills. A whole read of a big tile is done where its
# value is first used instead; before anything that may write a Ref, every
# pending read is done (so it still sees the Ref as the kernel read it).

DEFER_ELEMENTS = 64 * 128      # tiles from this size on (64 registers a thread and up)


class Deferred:
    """A whole read of ``ref`` not done yet."""
    __slots__ = ("ref", "value")

    def __init__(self, ref):
        self.ref, self.value = ref, None

    def force(self):
        if self.value is None:
            self.value = _with_register_layout(self.ref[...])
            _whole_reads[id(self.value)] = (self.value, self.ref)
        return self.value


_pending: list[Deferred] = []


def _defer(ref) -> bool:
    shape = getattr(ref, "shape", ())
    return len(shape) == 2 and shape[0] * shape[1] >= DEFER_ELEMENTS


def _settle_deferred(eqn, invals):
    name = eqn.primitive.name
    if name != "get" and (name in ("swap", "addupdate") or any(_is_ref(x) for x in invals)):
        for d in _pending:            # a Ref may be written: do the reads still pending
            d.force()
        _pending.clear()
    if name == "dot_general":         # matmul.py reads the operands' Refs itself
        return invals
    return [x.force() if isinstance(x, Deferred) else x for x in invals]


_layout_hints = {"on": False}


def set_layout_hints(on: bool) -> None:
    """When compiling, 2-D tiles read from SMEM get the WGMMA register layout,
    which Mosaic GPU's layout inference needs for row reductions."""
    _layout_hints["on"] = on
    _pending.clear()


def _with_register_layout(value):
    if not _layout_hints["on"]:
        return value
    from pallas_mgpu import layouts
    return layouts.cast_tile(value)


def _broadcast_in_dim(eqn, invals):
    operand, *dyn = invals
    if _layout_hints["on"]:
        from pallas_mgpu import layouts
        operand = layouts.cast_broadcast_operand(operand, eqn.params["shape"],
                                                 eqn.params["broadcast_dimensions"])
    return eqn.primitive.bind(operand, *dyn, **eqn.params)


def _full(ix, n) -> bool:
    start = getattr(ix, "start", None)
    return (hasattr(ix, "size") and isinstance(start, int) and start == 0 and ix.size == n
            and getattr(ix, "stride", 1) == 1)


def _swap(eqn, invals):
    ref, indexer, (val,) = _split(eqn, invals, 2)
    idx = _index(indexer, ref.shape)
    if _layout_hints["on"]:
        from pallas_mgpu import layouts
        val = layouts.cast_stored(val)
    old = ref[idx] if _has_uses(eqn) else None
    ref[idx] = val
    return old if old is not None else val


def _addupdate(eqn, invals):
    ref, indexer, (val,) = _split(eqn, invals, 2)
    idx = _index(indexer, ref.shape)
    ref[idx] = ref[idx] + val
    return []


def _has_uses(eqn) -> bool:
    used = _used_vars[-1] if _used_vars else None
    return any(not isinstance(v, jex.DropVar) and (used is None or v in used)
               for v in eqn.outvars)


def _is_accumulator(ref) -> bool:
    if isinstance(ref, _jax_private.transformed_ref_type()):
        return False
    return type(jax.typeof(ref)).__name__ == "WGMMAAbstractAccumulatorRef"


_REF_ACCESS = {"get": _get, "swap": _swap, "addupdate": _addupdate}
register_rule(lax.broadcast_in_dim_p, _broadcast_in_dim)


# --- control flow whose bodies must be replayed ----------------------------------------

def _is_ref(x) -> bool:
    if isinstance(x, _jax_private.transformed_ref_type()):
        return True
    try:
        return isinstance(jax.typeof(x), jax.ref.AbstractRef)
    except TypeError:
        return False


def _split_refs(values):
    """Refs are closed over and the rest is passed, so ``lax`` bodies see the
    same Refs as the kernel."""
    return [x if _is_ref(x) else None for x in values], [x for x in values if not _is_ref(x)]


def _merge(ref_slots, others):
    it = iter(others)
    return [r if r is not None else next(it) for r in ref_slots]


def _closed(j):
    return j if hasattr(j, "consts") else jex.ClosedJaxpr(j, ())


def _replay_control_flow(eqn, invals):
    p, name = eqn.params, eqn.primitive.name
    if name == "cond":
        index, *ops = invals
        slots, passed = _split_refs(ops)
        branches = [lambda *xs, br=br: eval_closed(br, *_merge(slots, xs)) for br in p["branches"]]
        if len(branches) == 2:   # pl.when: no clamp (JAX's warp-level lowering has none)
            return lax.cond(index != 0, branches[1], branches[0], *passed)
        return lax.switch(index, branches, *passed)
    if name == "while":
        nc, nb = p["cond_nconsts"], p["body_nconsts"]
        cconsts, bconsts, init = invals[:nc], invals[nc:nc + nb], invals[nc + nb:]
        return list(lax.while_loop(
            lambda carry: eval_closed(p["cond_jaxpr"], *cconsts, *carry)[0],
            lambda carry: tuple(eval_closed(p["body_jaxpr"], *bconsts, *carry)), tuple(init)))
    if name == "scan":
        return _replay_scan(eqn, invals)
    body = p.get("jaxpr", p.get("call_jaxpr", p.get("fun_jaxpr")))
    if body is None:
        raise NotImplementedError(f"pallas_mgpu cannot replay a '{name}' equation in a kernel.")
    return eval_closed(_closed(body), *invals[:len(getattr(body, "jaxpr", body).invars)])


def _replay_scan(eqn, invals):
    p = eqn.params
    if "ft_in" in p:   # jax >= 0.12 groups the operands in a flat tree
        consts, init, xs = (list(g) for g in p["ft_in"].update(invals).unpack())
    else:
        n, c = p["num_consts"], p["num_carry"]
        consts, init, xs = invals[:n], invals[n:n + c], invals[n + c:]
    ncarry = len(init)
    from pallas_mgpu import keepdims
    consts, xs = ([keepdims.materialize(x) for x in g] for g in (consts, xs))
    if not xs and not p["reverse"] and len(eqn.outvars) == ncarry:
        # a loop without scanned operands: a fori_loop, which Mosaic GPU lowers
        # natively; keepdims columns are carried as their vectors
        shapes = [x.shape if isinstance(x, keepdims.Column) else None for x in init]

        def body(i, carry):
            carry = [keepdims.Column(c, sh) if sh else c for c, sh in zip(carry, shapes)]
            closed = p["jaxpr"]
            outs = eval_jaxpr(closed.jaxpr, closed.consts, *consts, *carry, keep_columns=True)
            return tuple(keepdims.as_vector(o, sh) if sh else keepdims.materialize(o)
                         for o, sh in zip(outs[:ncarry], shapes))
        outs = lax.fori_loop(0, p["length"], body, tuple(
            x.vector if sh else x for x, sh in zip(init, shapes)))
        return [keepdims.Column(o, sh) if sh else o for o, sh in zip(outs, shapes)]
    init = [keepdims.materialize(x) for x in init]

    def step(carry, x):
        outs = eval_closed(p["jaxpr"], *consts, *carry, *x)
        return tuple(outs[:ncarry]), tuple(outs[ncarry:])
    carry, ys = lax.scan(step, tuple(init), tuple(xs), length=p["length"],
                         reverse=p["reverse"], unroll=p["unroll"])
    return [*carry, *ys]


# --- the frontend's primitives ----------------------------------------------------------

@frontend_rule("multiple_of")
def _multiple_of(eqn, invals):
    from jax.experimental import pallas as pl
    values = eqn.params["values"]
    return pl.multiple_of(invals[0], list(values) if len(values) > 1 else values[0])


@frontend_rule("debug_print")
def _debug_print(eqn, invals):
    from jax.experimental import pallas as pl
    pl.debug_print(eqn.params["fmt"], *invals)
    return []
