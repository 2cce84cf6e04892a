"""Replays a kernel jaxpr inside a JAX TPU Pallas kernel.

Most equations are re-bound unchanged: they are JAX primitives that JAX's
Mosaic lowering already knows (arithmetic, Ref get/swap, control flow). The
frontend's own primitives and this plugin's primitives are *substituted*:
each has a rule here that calls the ``jax.experimental.pallas`` function of
the same meaning. Loops, conditionals and nested calls are rebuilt with
``lax`` and their bodies replayed recursively: their bodies were traced over
the frontend's Ref types, so they cannot be re-bound as they are.

Scoped allocations (``run_scoped`` traces to ``empty_ref`` ... ``free_ref``)
become ``pl.run_scoped`` around the rest of the enclosing body: the buffer
lives a little longer than the user asked, which only costs memory.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend import core as jex

from pallas_frontend.backend_api import FRONTEND_OWNER, primitive_owner, replay_equations

from pallas_tpu import _jax_private, interpret_mode, key_operands, layout_ops
from pallas_tpu import primitives as tpu_prims
from pallas_tpu.spaces import scratch_type

_RULES: dict[object, Callable] = {}          # primitive -> rule(eqn, invals) -> outvals
# primitive -> applies(eqn): a rule that rewrites only some equations of its primitive
_APPLIES: dict[object, Callable] = {}
_EVERY_EQUATION = lambda eqn: True  # noqa: E731
# view transforms of this plugin's own -> JAX's (sc_rebuild: a subcore's slice of VMEM_SHARED)
TRANSFORM_RULES: dict[type, Callable] = {}
_FRONTEND_RULES: dict[str, Callable] = {}    # frontend primitive name -> rule
_SCOPE_START, _SCOPE_END = "empty_ref", "free_ref"
# shard_map's varying-manual-axes casts: types only. The frontend traces the
# kernel inside shard_map, JAX Pallas does not, and Mosaic has no rule for them.
_TYPE_ONLY = ("pvary", "pcast")


def _rule(table, key):
    def register(fn):
        table[key] = fn
        return fn
    return register


def _has_rule(eqn) -> bool:
    return eqn.primitive in _RULES and _APPLIES.get(eqn.primitive, _EVERY_EQUATION)(eqn)


def _needs_replay(eqn) -> bool:
    prim = eqn.primitive
    return (_has_rule(eqn) or prim.name in (_SCOPE_START, _SCOPE_END)
            or primitive_owner(prim) == FRONTEND_OWNER)


# Keyed by the jaxpr itself, weakly: an id() key outlives its jaxpr, and a later
# jaxpr at the same address was then told it needed no replay.
_replay_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def jaxpr_needs_replay(jaxpr) -> bool:
    """Whether ``jaxpr`` (or a body nested in it) holds a substituted primitive."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    found = _replay_cache.get(jaxpr)
    if found is None:
        found = _replay_cache[jaxpr] = any(
            _needs_replay(e) or any(jaxpr_needs_replay(j) for j in jex.jaxprs_in_params(e.params))
            for e in jaxpr.eqns)
    return found


def eval_jaxpr(jaxpr, consts, *args):
    """Evaluates ``jaxpr`` on (traced) ``args``, substituting as described above."""
    env = {}
    for v, x in zip(jaxpr.constvars, consts):
        env[v] = x
    for v, x in zip(jaxpr.invars, args):
        env[v] = x
    return _eval_from(jaxpr, 0, env)


def eval_closed(closed, *args):
    return eval_jaxpr(closed.jaxpr, closed.consts, *args)


def _eval_from(jaxpr, start: int, env: dict):
    return replay_equations(jaxpr, env, _replay_equation, start=start, open_scope=_open_scope)


def _replay_equation(eqn, invals):
    name = eqn.primitive.name
    if name in _TYPE_ONLY:
        return invals if eqn.primitive.multiple_results else invals[0]
    if any(isinstance(x, key_operands.KeyRefView) for x in invals):
        if name in _REF_ACCESS:                  # a Ref of PRNG keys in interpret mode
            return key_operands.key_access(eqn, invals)
        if _has_rule(eqn):                       # a copy of keys (a DMA) moves their data
            return _RULES[eqn.primitive](*key_operands.as_key_data(eqn, invals))
        return _replay_control_flow(eqn, invals)
    if _has_rule(eqn):
        return _RULES[eqn.primitive](eqn, invals)
    if primitive_owner(eqn.primitive) == FRONTEND_OWNER:
        rule = _FRONTEND_RULES.get(name)
        if rule is None:
            raise NotImplementedError(
                f"pallas_tpu cannot lower the frontend primitive '{name}' yet.")
        return rule(eqn, invals)
    if name in _REF_ACCESS and _is_view(invals[0]):
        return _access_through_view(eqn, invals)
    if name in _REF_ACCESS and TRANSFORM_RULES:
        n_lead = _REF_ACCESS[name]
        transforms = jax.tree.unflatten(eqn.params["tree"], invals[n_lead:])
        if any(type(t) in TRANSFORM_RULES for t in transforms):
            flat, tree = jax.tree.flatten(jax_transforms(transforms))
            return eqn.primitive.bind(*invals[:n_lead], *flat, **{**eqn.params, "tree": tree})
    if name in ("pjit", "jit") and _is_plain_call(eqn, invals):
        return eqn.primitive.bind(*invals, **eqn.params)
    if name in _REPLAYED or any(jaxpr_needs_replay(j) for j in jex.jaxprs_in_params(eqn.params)):
        return _replay_control_flow(eqn, invals)
    # get_bind_params: a custom_jvp/custom_vjp call (jax.nn.softplus) binds
    # functions made from its jaxpr params, not the params themselves.
    return eqn.primitive.bind(*invals, **eqn.primitive.get_bind_params(eqn.params))


def _open_scope(jaxpr, k: int, env: dict):
    """Consecutive allocations (a pytree given to ``pl.run_scoped``, a pipeline's
    buffers and semaphores) open one ``pl.run_scoped`` together: a region nested
    per buffer made Mosaic's relayout pass recurse deep enough to overflow
    (libtpu 0.0.42, a pipeline with nine operands)."""
    from jax.experimental import pallas as pl
    end = k
    while end < len(jaxpr.eqns) and jaxpr.eqns[end].primitive.name == _SCOPE_START:
        end += 1
    allocations = jaxpr.eqns[k:end]
    # JAX's TPU interpreter cannot hold keys: a scratch of keys holds their data
    key_dtypes = [e.params["ty"].dtype if interpret_mode.active()
                  and key_operands.is_key(e.params["ty"].dtype) else None for e in allocations]
    types = [scratch_type(*(key_operands.physical_type(kd, e.params["ty"].shape) if kd
                            else (e.params["ty"].shape, e.params["ty"].dtype)),
                          e.params.get("memory_space"))
             for e, kd in zip(allocations, key_dtypes)]

    def body(*refs):
        for e, ref, kd in zip(allocations, refs, key_dtypes):
            env[e.outvars[0]] = ref if kd is None else key_operands.KeyRefView(ref, kd)
        return _eval_from(jaxpr, end, env)
    return pl.run_scoped(body, *types)


# --- control flow whose bodies must be replayed --------------------------------------

def _is_view(x) -> bool:
    return hasattr(x, "transforms") and hasattr(x, "ref")


def _is_ref(x) -> bool:
    return _is_view(x) or isinstance(jax.typeof(x), jax.ref.AbstractRef)


# Ref reads/writes: operands (ref, [value,] *transform leaves), param ``tree``.
_REF_ACCESS = {"get": 1, "swap": 2, "addupdate": 2}


def _access_through_view(eqn, invals):
    """A read/write whose Ref is a view (JAX hands emit_pipeline bodies views
    of its buffers): prepend the view's transforms and bind on the base Ref."""
    n_lead = _REF_ACCESS[eqn.primitive.name]
    view, lead, leaves = invals[0], invals[1:n_lead], invals[n_lead:]
    transforms = jax_transforms((*view.transforms,
                                 *jax.tree.unflatten(eqn.params["tree"], leaves)))
    flat, tree = jax.tree.flatten(transforms)
    return eqn.primitive.bind(view.ref, *lead, *flat, **{**eqn.params, "tree": tree})


def _is_plain_call(eqn, invals) -> bool:
    """A jit call (a jnp function: ``x % 2``) on values whose body holds no Ref
    and nothing to substitute: re-bound as it is, as JAX's own kernel has it.
    Inlined, its constant operands became one Mosaic constant per use."""
    body = eqn.params["jaxpr"]
    return (not any(_is_ref(x) for x in invals) and not jaxpr_needs_replay(body)
            and not any(isinstance(v.aval, jax.ref.AbstractRef) for v in _jaxpr(body).invars)
            and not _holds_keys(_jaxpr(body)))


def _holds_keys(jaxpr) -> bool:
    """Typed PRNG keys in a call's body (jax.random's jits): replayed, so this
    plugin's Pallas keys become JAX's (key_operands) before JAX lowers them."""
    values = [*jaxpr.invars, *jaxpr.outvars, *(v for e in jaxpr.eqns for v in e.outvars)]
    return any(key_operands.is_key(getattr(v.aval, "dtype", None)) for v in values
               if hasattr(v, "aval"))


# Always replayed, never re-bound: their bodies were traced over the
# frontend's Ref types, which JAX's TPU lowering and interpreter do not know.
_REPLAYED = ("cond", "while", "scan", "pjit", "jit", "closed_call")


def _replay_control_flow(eqn, invals):
    name = eqn.primitive.name
    if name == "cond":
        return _replay_cond(eqn, invals)
    if name == "while":
        return _replay_while(eqn, invals)
    if name == "scan":
        return _replay_scan(eqn, invals)
    # A kernel is never differentiated inside: a custom_jvp/vjp call runs its primal body.
    body = eqn.params.get("jaxpr", eqn.params.get("call_jaxpr"))
    if body is not None and name in ("pjit", "jit", "closed_call", "core_call",
                                     "custom_jvp_call", "custom_vjp_call", "remat"):
        return eval_closed(_closed(body), *invals[:len(_jaxpr(body).invars)])
    raise NotImplementedError(
        f"pallas_tpu cannot replay a '{name}' equation whose body uses frontend or TPU "
        "primitives; move those primitives out of it.")


def _jaxpr(j):
    return getattr(j, "jaxpr", j)


def _closed(j):
    if hasattr(j, "consts"):
        return j
    return jex.ClosedJaxpr(j, ())


def _split_refs(values):
    """Refs are closed over, the rest is passed: ``lax`` bodies then see the
    same Refs the kernel does, whatever ``lax`` accepts as operands."""
    return [x if _is_ref(x) else None for x in values], [x for x in values if not _is_ref(x)]


def _merge(ref_slots, others):
    it = iter(others)
    return [r if r is not None else next(it) for r in ref_slots]


def _rebind_cond(eqn, invals):
    """The cond re-bound with its branches retyped, when they hold nothing to
    substitute: re-tracing them (``lax.switch``) costs as much as the user's
    tracing did. None when that does not apply."""
    from pallas_tpu import _jax_private
    branches = eqn.params["branches"]
    if any(_is_view(x) for x in invals) or any(jaxpr_needs_replay(br) for br in branches):
        return None
    avals = [jax.typeof(x) for x in invals[1:]]
    retyped = [_jax_private.retype_ref_inputs(br, avals) for br in branches]
    if any(br is None for br in retyped):
        return None
    return eqn.primitive.bind(*invals, **{**eqn.params, "branches": tuple(retyped)})


def _replay_cond(eqn, invals):
    outs = _rebind_cond(eqn, invals)
    if outs is not None:
        return outs
    index, *ops = invals
    ref_slots, passed = _split_refs(ops)
    branches = [lambda *xs, br=br: eval_closed(br, *_merge(ref_slots, xs))
                for br in eqn.params["branches"]]
    return _jax_private.switch_unclamped(index, branches, *passed)


def _replay_while(eqn, invals):
    p = eqn.params
    nc, nb = p["cond_nconsts"], p["body_nconsts"]
    cconsts, bconsts, init = invals[:nc], invals[nc:nc + nb], invals[nc + nb:]
    # a literal operand (a NumPy value) closed over by the bodies would be inlined
    # in them; as a JAX array it stays an operand of the loop, where it was
    cconsts, bconsts = ([jnp.asarray(x) if isinstance(x, (np.ndarray, np.generic)) else x
                         for x in xs] for xs in (cconsts, bconsts))
    if any(_is_ref(x) for x in init):
        raise NotImplementedError("pallas_tpu: Refs as while-loop carries are not supported.")

    def cond_fun(carry):
        return eval_closed(p["cond_jaxpr"], *cconsts, *carry)[0]

    def body_fun(carry):
        return tuple(eval_closed(p["body_jaxpr"], *bconsts, *carry))
    return list(lax.while_loop(cond_fun, body_fun, tuple(init)))


def _replay_scan(eqn, invals):
    p = eqn.params
    if "ft_in" in p:   # jax >= 0.12 groups the operands in a flat tree
        consts, init, xs = (list(g) for g in p["ft_in"].update(invals).unpack())
    else:
        n, c = p["num_consts"], p["num_carry"]
        consts, init, xs = invals[:n], invals[n:n + c], invals[n + c:]
    ncarry = len(init)

    def body(carry, x):
        outs = eval_closed(p["jaxpr"], *consts, *carry, *x)
        return tuple(outs[:ncarry]), tuple(outs[ncarry:])
    carry, ys = lax.scan(body, tuple(init), tuple(xs), length=p["length"],
                         reverse=p["reverse"], unroll=p["unroll"])
    return [*carry, *ys]


# --- the frontend's primitives --------------------------------------------------------

def _sem_view(ref, idx):
    """The frontend passes a semaphore as its Ref plus one index per dim."""
    return ref.at[tuple(idx)] if idx else ref


@_rule(_FRONTEND_RULES, "multiple_of")
def _multiple_of(eqn, invals):
    from jax.experimental import pallas as pl
    values = eqn.params["values"]
    return pl.multiple_of(invals[0], list(values) if len(values) > 1 else values[0])


@_rule(_FRONTEND_RULES, "debug_print")
def _debug_print(eqn, invals):
    from jax.experimental import pallas as pl
    pl.debug_print(eqn.params["fmt"], *invals)
    return []


@_rule(_FRONTEND_RULES, "debug_check")
def _debug_check(eqn, invals):
    from jax.experimental import pallas as pl
    if interpret_mode.active():
        interpret_mode.debug_check(invals[0], eqn.params["message"])
        return []
    # The frontend only records a check when checks were enabled at trace time.
    with pl.enable_debug_checks(True):
        pl.debug_check(invals[0], eqn.params["message"])
    return []


@_rule(_FRONTEND_RULES, "semaphore_read")
def _semaphore_read(eqn, invals):
    from jax.experimental import pallas as pl
    if interpret_mode.active():
        raise NotImplementedError(
            "pallas_tpu: semaphore_read does not run in TPU interpret mode (JAX 0.12's TPU "
            "interpreter has no rule for it); it compiles for TPU.")
    return pl.semaphore_read(_sem_view(invals[0], invals[1:]))


@_rule(_FRONTEND_RULES, "semaphore_signal")
def _semaphore_signal(eqn, invals):
    from jax.experimental import pallas as pl
    # Operands: ref, *idx, inc, then device_id's leaves (described by device_id_tree).
    tree = eqn.params["device_id_tree"]
    n_dev = tree.num_leaves if tree is not None else 0
    ref, *idx, inc = invals[:len(invals) - n_dev]
    device_id = jax.tree.unflatten(tree, invals[len(invals) - n_dev:]) if tree is not None else None
    device_id, core_index = interpret_mode.split_core_axes(device_id, eqn.params["core_index"])
    pl.semaphore_signal(_sem_view(ref, idx), inc, device_id=device_id, core_index=core_index,
                        **_device_id_type(eqn))
    return []


@_rule(_FRONTEND_RULES, "semaphore_wait")
def _semaphore_wait(eqn, invals):
    from jax.experimental import pallas as pl
    ref, *idx, value = invals
    pl.semaphore_wait(_sem_view(ref, idx), value,
                      decrement=eqn.params["decrement"])
    return []


# --- this plugin's primitives ----------------------------------------------------------

def jax_transforms(transforms) -> tuple:
    """``transforms`` with each of this plugin's own replaced by JAX's (``TRANSFORM_RULES``)."""
    return tuple(TRANSFORM_RULES[type(t)](t) if type(t) in TRANSFORM_RULES else t
                 for t in transforms)


def _unflatten(eqn, invals):
    return [tpu_prims.join_view(p, jax_transforms)
            for p in jax.tree.unflatten(eqn.params["tree"], invals)]


def _descriptor(eqn, invals):
    from jax.experimental.pallas import tpu as pltpu
    src, dst, dst_sem, src_sem, device_id = _unflatten(eqn, invals)
    if device_id is not None:
        return pltpu.make_async_remote_copy(src, dst, src_sem, dst_sem, device_id=device_id,
                                            **_device_id_type(eqn))
    return pltpu.make_async_copy(src, dst, dst_sem)


def _device_id_type(eqn) -> dict:
    """JAX's ``device_id_type`` keyword for logical ids; none for mesh ids,
    every JAX's default (JAX 0.12 deprecates passing it, JAX 0.10 refuses None)."""
    from jax.experimental import pallas as pl
    if eqn.params.get("device_id_type") == "logical":
        return {"device_id_type": pl.DeviceIdType.LOGICAL}
    return {}


@_rule(_RULES, tpu_prims.dma_start_p)
def _dma_start(eqn, invals):
    _descriptor(eqn, invals).start(priority=eqn.params["priority"], add=eqn.params["add"])
    return []


@_rule(_RULES, tpu_prims.dma_wait_p)
def _dma_wait(eqn, invals):
    desc = _descriptor(eqn, invals)
    {"all": desc.wait, "recv": desc.wait_recv, "send": desc.wait_send}[eqn.params["wait_for"]]()
    return []


@_rule(_RULES, tpu_prims.load_p)
def _load(eqn, invals):
    from jax.experimental.pallas import tpu as pltpu
    ref, mask = _unflatten(eqn, invals)
    # JAX 0.12 implements masked loads neither in Mosaic nor in its TPU
    # interpreter: load the whole (in-bounds) view, then keep the masked-in
    # lanes; masked-off lanes read as zero.
    value = pltpu.load(ref)
    if mask is None:
        return value
    return jax.numpy.where(mask, value, jax.numpy.zeros_like(value))


@_rule(_RULES, tpu_prims.store_p)
def _store(eqn, invals):
    from jax.experimental.pallas import tpu as pltpu
    ref, val, mask = _unflatten(eqn, invals)
    pltpu.store(ref, val, mask=mask)
    return []


@_rule(_RULES, tpu_prims.prng_seed_p)
def _prng_seed(eqn, invals):
    from jax.experimental.pallas import tpu as pltpu
    if interpret_mode.active():
        interpret_mode.prng_seed(invals)
    else:
        pltpu.prng_seed(*invals)
    return []


@_rule(_RULES, tpu_prims.prng_random_bits_p)
def _prng_random_bits(eqn, invals):
    from jax.experimental.pallas import tpu as pltpu
    if interpret_mode.active():
        return interpret_mode.prng_random_bits(eqn.params["shape"])
    return pltpu.prng_random_bits(eqn.params["shape"])


@_rule(_RULES, tpu_prims.reciprocal_approx_p)
def _reciprocal_approx(eqn, invals):
    return _jax_private.jax_pltpu("reciprocal")(invals[0], approx=True)


@_rule(_RULES, layout_ops.roll_p)
def _roll(eqn, invals):
    from jax.experimental.pallas import tpu as pltpu
    p = eqn.params
    return pltpu.roll(*invals, p["axis"], stride=p["stride"], stride_axis=p["stride_axis"])


@_rule(_RULES, layout_ops.bitcast_p)
def _bitcast(eqn, invals):
    return _jax_private.jax_bitcast(invals[0], eqn.params["dtype"], eqn.params["dim"])


@_rule(_RULES, layout_ops.einshape_p)
def _einshape(eqn, invals):
    from jax.experimental.pallas import tpu as pltpu
    out = pltpu.einshape(eqn.params["equation"], invals[0], **dict(eqn.params["sizes"]))
    if out.shape != eqn.outvars[0].aval.shape:     # both sides read the equation alike
        raise AssertionError(f"pallas_tpu: einshape {eqn.params['equation']!r} gave "
                             f"{out.shape}, expected {eqn.outvars[0].aval.shape}")
    return out


def register_rule(prim, rule: Callable, applies: Callable | None = None) -> None:
    """Adds a substitution (used by ``pipeline.py`` for ``emit_pipeline``);
    ``applies(eqn)``: only for the equations it accepts (the rest re-bind as they are)."""
    _RULES[prim] = rule
    if applies is not None:
        _APPLIES[prim] = applies


def register_frontend_rule(name: str, rule: Callable) -> None:
    """Adds a rule for the frontend primitive ``name`` (``kernel_globals.py``)."""
    _FRONTEND_RULES[name] = rule
