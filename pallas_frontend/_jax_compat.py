"""The one place where pallas_frontend touches JAX internals (``jax._src``).

Everything private that the frontend needs from JAX is imported here and
re-exported under a stable local name, so a JAX upgrade is mended in this
module alone. Other modules import from here, never from ``jax._src``.
"""

from __future__ import annotations

import os
import sys
import typing

from pallas_frontend.jax_window import JAX_VERSION  # first: refuses a JAX too old

from jax.sharding import PartitionSpec

from jax._src import api_util
from jax._src import config as _config
from jax._src import core
from jax._src import dispatch
from jax._src.debugging import debug_effect  # an unordered IO effect
from jax._src import callback as _callback
from jax._src import effects as _effects
from jax._src import linear_util as lu
from jax._src import source_info_util
from jax._src import pretty_printer as pp  # jaxpr text (pretty_equations.py)
from jax._src import tree_util as _tree_util
from jax._src.interpreters import ad
from jax._src.interpreters import batching
from jax._src.interpreters import mlir
from jax._src.interpreters import partial_eval as pe
from jax._src.state import discharge as state_discharge
from jax._src.state import indexing as state_indexing
from jax._src.state import primitives as state_primitives
from jax._src.state import types as state_types

AbstractRef = state_types.AbstractRef
ShapedArray = core.ShapedArray
# a pinned buffer (``jax._src.state.primitives.pin``): a kernel must alias it to an output
AbstractLinVal = state_types.AbstractLinVal
Tracer = core.Tracer


def kernel_aval(shape, dtype) -> core.ShapedArray:
    """A kernel's block, scratch or grid-index type, on the context mesh (replicated),
    as JAX's Pallas makes them: values the body builds (``jnp.zeros``) carry that
    mesh, and JAX's sharding rules refuse an op mixing it with a mesh-less Ref."""
    return core.ShapedArray(shape, dtype, sharding=core.get_cur_mesh_sharding())
Jaxpr = core.Jaxpr
Primitive = core.Primitive
Literal = core.Literal
DropVar = core.DropVar
Var = core.Var
Slice = state_indexing.Slice
NDIndexer = state_indexing.NDIndexer
ds = state_indexing.ds
run_state = state_discharge.run_state
tree_util = _tree_util
tree_equality_errors = _tree_util.equality_errors_pytreedef
extend_axis_env = core.extend_axis_env_nd


def bound_axis_names() -> frozenset:
    """The axis names the current trace binds (vmap, shard_map, a kernel's grid)."""
    return frozenset(core.get_axis_env().axis_sizes)
poison_buffers_flag = _config.jax_pallas_poison_buffers
# JAX's own switch (in every jit cache key and trace context): pl.enable_debug_checks sets it.
debug_checks_state = _config.jax_pallas_enable_debug_checks
# A context manager: off while tracing a kernel, so Refs may ride in loop carries (as in JAX).
mutable_array_checks = _config.mutable_array_checks


def register_discharge_rule(prim, *, partial: bool = False):
    """Registers ``rule(ctx, *args, **params)`` as ``prim``'s state-discharge
    rule (JAX 0.11+'s form; ``ctx.in_avals``/``ctx.out_avals`` hold the types).
    JAX 0.10 calls ``rule(in_avals, out_avals, *args, **params)``: adapted here.
    ``partial``: the rule honours ``ctx.should_discharge`` (JAX 0.10 keeps those apart)."""
    def register(rule):
        if _DISCHARGE_RULES_TAKE_CONTEXT:
            return state_discharge.register_discharge_rule(prim)(rule)
        if partial:
            state_discharge.register_partial_discharge_rule(prim)(
                lambda should, i, o, *args, **params: rule(
                    _DischargeContext(i, o, tuple(should), False), *args, **params))
            return rule

        def positional(in_avals, out_avals, *args, **params):
            ctx = _DischargeContext(in_avals, out_avals, (True,) * len(in_avals), False)
            return rule(ctx, *args, **params)
        state_discharge.register_discharge_rule(prim)(positional)
        return rule
    return register


_DISCHARGE_RULES_TAKE_CONTEXT = hasattr(state_discharge, "DischargeContext")


class _DischargeContext(typing.NamedTuple):
    in_avals: tuple
    out_avals: tuple
    should_discharge: tuple
    strip_memory_space: bool
internal_ref_effect = core.internal_mutable_array_effect   # a Ref allocated inside a jaxpr
JaxprInputEffect = _effects.JaxprInputEffect   # an effect on one input (a Var)
# Host-callback effects of an interpreter's launch (pallas_frontend.launch_effects).
io_callback_effects = (_callback._IOEffect, _callback._OrderedIOEffect)
ordered_io_effect = _callback._OrderedIOEffect
TokenSet = mlir.TokenSet


def lowering_for_export(module_context) -> bool:
    """Whether a lowering is ``jax.export``'s (whose module cannot carry host callbacks)."""
    return bool(getattr(getattr(module_context, "lowering_parameters", None), "for_export", False))


def host_callback_count(module_context) -> int:
    """How many Python callbacks (and objects they keep alive) a module holds so far."""
    return (len(getattr(module_context, "host_callbacks", ()))
            + len(getattr(module_context, "keepalives", ())))


def register_pure_ordered_effect(effect_type) -> None:
    """Declares ``effect_type`` ordered (JAX threads a token through it) and
    allowed in loops, branches, custom derivatives and ``jax.checkpoint``."""
    for kind in (_effects.ordered_effects, _effects.shardable_ordered_effects,
                 _effects.lowerable_effects, _effects.control_flow_allowed_effects,
                 _effects.custom_derivatives_allowed_effects, _effects.remat_allowed_effects):
        kind.add_type(effect_type)


def trace_kernel_jaxpr(fun, in_avals, *, traced_for: str):
    """Traces ``fun(*in_avals)`` (which returns a flat list) to a closed jaxpr.

    Returns ``(jaxpr, out_avals)``; constants captured by ``fun`` stay attached
    to the jaxpr as its ``consts``.
    """
    dbg = api_util.debug_info(traced_for, fun, tuple(in_avals), {})
    wrapped = lu.wrap_init(fun, debug_info=dbg)
    jaxpr, out_avals, consts = pe.trace_to_jaxpr_dynamic(wrapped, list(in_avals))
    return with_consts(jaxpr, consts), out_avals


# JAX 0.11 made a Jaxpr carry its constants (``jaxpr.consts``, ``with_consts``);
# before, a ClosedJaxpr wrapped a Jaxpr and its constants. The frontend passes
# "a jaxpr with its constants" around and reads only what both share:
# ``.jaxpr``, ``.consts``, ``.constvars``, ``.invars``, ``.outvars``, ``.eqns``,
# ``.effects``, ``.debug_info`` (0.11+ keeps ``.jaxpr`` as an alias of itself).
JAXPR_CARRIES_CONSTS = hasattr(core.Jaxpr, "with_consts")


def with_consts(jaxpr, consts):
    """``jaxpr`` (plain, or already with constants) with ``consts`` as the values
    of its first ``len(consts)`` inputs."""
    if JAXPR_CARRIES_CONSTS:
        return jaxpr.with_consts(consts)
    plain = getattr(jaxpr, "jaxpr", jaxpr)
    consts = list(consts)
    if len(consts) != len(plain.constvars):   # constvars and leading invars repartitioned
        every = [*plain.constvars, *plain.invars]
        plain = plain.replace(constvars=every[:len(consts)], invars=every[len(consts):])
    return core.ClosedJaxpr(plain, consts)


def replace_jaxpr(jaxpr, **changes):
    """``jaxpr`` (plain or with constants) with its fields changed (``eqns=``,
    ``invars=``, ...), constants kept."""
    if JAXPR_CARRIES_CONSTS or isinstance(jaxpr, core.Jaxpr):
        return jaxpr.replace(**changes)
    return jaxpr.replace(jaxpr=jaxpr.jaxpr.replace(**changes))


# Before JAX 0.11, an exception raised in a host callback of an eagerly
# dispatched program surfaced only when its results were waited for (as a
# generic runtime error); from 0.11 the call itself raises. Not probeable
# without running a program, hence the version.
CALLBACK_ERRORS_SURFACE_ON_WAIT = JAX_VERSION < (0, 11)


def is_jaxpr(x) -> bool:
    """Whether ``x`` is a jaxpr, plain or with constants (a ClosedJaxpr before 0.11)."""
    return isinstance(x, core.Jaxpr) or (not JAXPR_CARRIES_CONSTS
                                         and isinstance(x, core.ClosedJaxpr))


def like_jaxpr(new, old):
    """``new`` (a jaxpr with constants, as traced here) in the form of ``old``,
    which it replaces in an equation's params: before JAX 0.11 some params hold
    a plain Jaxpr (no constants) and others a ClosedJaxpr."""
    if JAXPR_CARRIES_CONSTS or not isinstance(old, core.Jaxpr) \
            or not isinstance(new, core.ClosedJaxpr):
        return new
    if new.consts:
        raise NotImplementedError(
            "a rewritten nested jaxpr captured constants where JAX 0.10 allows none; "
            "JAX 0.11 or newer takes it")
    return new.jaxpr


def all_invars(jaxpr) -> list:
    """The constant inputs followed by the ordinary ones."""
    return [*jaxpr.constvars, *jaxpr.invars]


# Library code that a kernel's "line" must not point into: the frontend, and each
# loaded backend's package (added by discovery). JAX skips its own frames already.
_library_dirs: set[str] = {os.path.dirname(os.path.abspath(__file__)) + os.sep}


def add_library_package(module_name: str) -> None:
    """Frames in ``module_name``'s top-level package are library code, not the user's."""
    top = sys.modules.get(module_name.split(".")[0])
    for path in getattr(top, "__path__", None) or ():
        _library_dirs.add(os.path.abspath(path) + os.sep)


def jaxpr_source_line(eqn) -> str:
    """``file:line`` of the user code that produced a jaxpr equation, or '': the
    innermost frame outside JAX and this project's packages (else JAX's choice)."""
    frames = list(source_info_util.user_frames(eqn.source_info.traceback))
    frame = next(_outside_library(frames), frames[0] if frames else None)
    if frame is None:
        return ""
    return f"{frame.file_name}:{frame.start_line}"


def _outside_library(frames):
    return (f for f in frames if not os.path.abspath(f.file_name).startswith(tuple(_library_dirs)))


def sub_jaxprs(eqn):
    """The jaxprs nested in an equation's params (loop bodies, cond branches)."""
    return list(core.jaxprs_in_params(eqn.params))


def eval_jaxpr(jaxpr, *args):
    return core.eval_jaxpr(jaxpr, consts_of(jaxpr), *args)


def consts_of(jaxpr) -> list:
    """A jaxpr's attached constants (none for a plain Jaxpr before JAX 0.11)."""
    return list(getattr(jaxpr, "consts", ()))


def bind_equation(eqn, args) -> list:
    """Binds one jaxpr equation's primitive on ``args``; always a list of outputs."""
    out = eqn.primitive.bind(*args, **eqn.primitive.get_bind_params(eqn.params))
    return list(out) if eqn.primitive.multiple_results else [out]


def jvp_jaxpr(jaxpr, nonzeros, instantiate):
    return ad.jvp_jaxpr(jaxpr, nonzeros, instantiate)


def varying_axes(aval) -> frozenset:
    """Manual mesh axes (inside shard_map) that a value varies over."""
    mat = getattr(aval, "mat", None)
    return frozenset(getattr(mat, "varying", ())) if mat is not None else frozenset()


def vary_like(out_aval, in_avals):
    """``out_aval`` varying over every manual axis any of ``in_avals`` varies over."""
    varying = [a for a in in_avals if varying_axes(a)]
    if not varying:
        return out_aval
    axes = frozenset().union(*(varying_axes(a) for a in varying))
    # The manual axes must belong to the output's mesh: take the input's mesh,
    # replicated over the output's dims.
    sharding = varying[0].sharding.update(spec=PartitionSpec())
    return out_aval.update(sharding=sharding).update_manual_axis_type(
        core.ManualAxisType(varying=axes))


def invariant(aval):
    """``aval`` with no varying manual axes (a shard's local view)."""
    if not varying_axes(aval):
        return aval
    return aval.update_manual_axis_type(core.ManualAxisType(varying=frozenset()))


def whole(aval):
    """``aval`` unsharded: under ``jax.jit`` over explicitly sharded arrays a
    kernel is lowered on the global arrays (XLA partitions around the call), and
    a backend rebuilding JAX's pallas_call must not pass on the sharded spec
    JAX refuses ('pallas_call requires all mesh axes to be Manual')."""
    sharding = getattr(aval, "sharding", None)
    if not any(p is not None for p in getattr(sharding, "spec", ())):
        return aval
    return aval.update(sharding=sharding.update(spec=PartitionSpec()))


def lower_fun_per_shard(fun, ctx, *args):
    """Lowers ``fun(*args) -> list`` in place of a primitive. Inside
    ``shard_map`` it is traced on each shard's local types, without varying
    manual axes: a kernel computes on its own shard, so a sharded block meeting
    a constant, a replicated operand or a grid index is no type error (the
    primitive's abstract eval states how its outputs vary). Explicitly sharded
    types are traced whole (``whole``)."""
    local = ctx.replace(avals_in=[whole(invariant(a)) for a in ctx.avals_in],
                        avals_out=[whole(invariant(a)) for a in ctx.avals_out])
    outs = mlir.lower_fun(fun, multiple_results=True)(local, *args)
    if local.tokens_out is not None:     # effects: hand the tokens back to the real context
        ctx.set_tokens_out(local.tokens_out)
    return outs


def is_ref_value(x) -> bool:
    """Whether ``x`` (an array, a tracer or a ``jax.new_ref`` Ref) is a Ref."""
    return isinstance(core.typeof(x), AbstractRef)


def lowered_value_problem(ctx, value, aval) -> str | None:
    """Why ``value``, a lowering rule's (context ``ctx``) result for an output of
    type ``aval``, is not an MLIR value of that type (None when it is): a
    backend's ``lower`` that returns arrays, or values of another shape or
    dtype, is named before MLIR's verifier reports it as a module dump."""
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    if not isinstance(value, mlir.ir.Value):
        return f"a {type(value).__module__}.{type(value).__qualname__}, not an MLIR value"
    if any(is_symbolic_dim(d) for d in getattr(aval, "shape", ())):
        return None      # shape polymorphism: the types hold dynamic dims
    expected = mlir.aval_to_ir_type(ctx.module_context, invariant(aval))
    if value.type != expected:
        return f"of type {value.type}, not {expected}"
    return None


def trace_with_explicit_consts(fun, in_avals, *, traced_for: str):
    """Traces ``fun(*in_avals) -> list`` to ``(jaxpr, consts)`` where the jaxpr
    takes ``*consts, *args``: values ``fun`` closes over (possibly tracers of an
    enclosing trace) become explicit leading operands."""
    dbg = api_util.debug_info(traced_for, fun, tuple(in_avals), {})
    jaxpr, _, consts = pe.trace_to_jaxpr_dynamic(lu.wrap_init(fun, debug_info=dbg), list(in_avals))
    if jaxpr.constvars:     # JAX 0.10 keeps them apart; 0.11+ already made them invars
        jaxpr = pe.convert_constvars_jaxpr(jaxpr)
    return jaxpr, list(consts)


def lowering_traces_python(prim) -> bool:
    """Whether ``prim`` is lowered (on some platform) by tracing a Python function at
    lowering time (``mlir.lower_fun``, or a rule that delegates to one, as JAX 0.12.1's
    threefry2x32): such lowerings can fail on operands abstract evaluation accepted."""
    tables = [mlir._lowerings, *mlir._platform_specific_lowerings.values()]
    rules = [t[prim].rule for t in tables if prim in t]
    for _ in range(3):      # the rules, then the functions they close over
        if any("lower_fun" in getattr(r, "__qualname__", "") for r in rules):
            return True
        rules = [c.cell_contents for r in rules for c in getattr(r, "__closure__", None) or ()]
    return False


def eval_jaxpr_rewriting(jaxpr, args, before_eqn, rewrite_param, inherit_line=False):
    """``eval_jaxpr`` calling ``before_eqn(eqn, invals)`` ahead of each equation (a list
    it returns replaces its results), rebinding each with ``rewrite_param`` on its params.
    Source lines are kept; with ``inherit_line`` (a nested body: JAX cuts its tracebacks
    at the body's trace) an equation with no user line takes the enclosing one's."""
    env = {}
    outer = source_info_util.current().traceback if inherit_line else None

    def read(v):
        return v.val if isinstance(v, Literal) else env[v]

    for v, val in zip(all_invars(jaxpr), [*consts_of(jaxpr), *args]):
        env[v] = val
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        params = {k: rewrite_param(p) for k, p in eqn.primitive.get_bind_params(eqn.params).items()}
        name_stack = source_info_util.current_name_stack() + eqn.source_info.name_stack
        tb = eqn.source_info.traceback
        if outer is not None and not next(_outside_library(source_info_util.user_frames(tb)), 0):
            tb = outer
        with source_info_util.user_context(tb, name_stack=name_stack), eqn.ctx.manager:
            replaced = before_eqn(eqn, invals)
            ans = eqn.primitive.bind(*invals, **params) if replaced is None else None
        outs = replaced if replaced is not None else (
            ans if eqn.primitive.multiple_results else [ans])
        for v, val in zip(eqn.outvars, outs):
            env[v] = val
    return [read(v) for v in jaxpr.outvars]


def ref_indexers(eqn):
    """For a Ref read/write equation (``get``, ``swap``, ``addupdate``): the
    position where its indexer operands start, else None."""
    first = {"get": 1, "swap": 2, "addupdate": 2}.get(eqn.primitive.name)
    return first if first is not None and "tree" in eqn.params else None


def is_symbolic_dim(d) -> bool:
    """Whether ``d`` is a ``jax.export`` symbolic dimension (e.g. ``b // 8``)."""
    return core.is_dim(d) and not core.is_constant_dim(d)


def jax_dynamic_shapes_export_enabled() -> bool:
    """JAX's own ``pallas_export_experimental(dynamic_shapes=True)`` switch, so
    code written against JAX's context manager is honoured too."""
    import sys
    pcore = sys.modules.get("jax._src.pallas.core")   # never imported here: only read if loaded
    return bool(pcore is not None and pcore.dynamic_shapes_export_enabled())


_in_jax_fuser: set = set()


def register_elementwise_with_jax_fuser(prim) -> None:
    """Gives ``prim`` (elementwise, one operand) JAX's fuser rules for
    elementwise primitives (``jax.experimental.pallas.fuser``), once: code
    written for JAX fuses ``pl.multiple_of``, and JAX's fuser keys its rules on
    the primitive object. Imported on first use (about 0.1 s), not with the
    frontend; without JAX's Pallas there is nothing to register with."""
    if prim in _in_jax_fuser:
        return
    _in_jax_fuser.add(prim)
    try:
        from jax._src.pallas.fuser import block_spec as fuser
    except ImportError:
        return
    fuser.register_eltwise_rule(prim)


def select_view(idx, refs):
    """JAX's view choosing one of ``refs`` by the run-time ``idx`` (what
    ``jax.experimental.pallas.select_ref`` builds), so a backend replaying a
    DMA into JAX hands JAX's own view over."""
    return state_types.TransformedRef(ref=tuple(refs),
                                      transforms=(state_types.SelectTransform(idx),))



def hide_frames_under(path: str) -> None:
    """Frames of files under ``path`` are library code to JAX: left out of the
    tracebacks JAX filters (as JAX's own frames are) and never taken as the user's
    line of an operation (``source_info``). JAX 0.10-0.12 keep both lists here."""
    from jax._src import traceback_util
    traceback_util.register_exclusion(path)
    source_info_util.register_exclusion(path)


def is_user_file(file_name: str) -> bool:
    """Whether JAX counts ``file_name`` as the user's code (not JAX's, not Python's,
    not a path given to ``hide_frames_under``)."""
    return source_info_util.is_user_filename(file_name)


def api_boundary(fun):
    """``fun`` as a JAX API boundary: an exception leaving it has the frames of
    JAX and of ``hide_frames_under`` paths filtered from its traceback."""
    from jax._src import traceback_util
    return traceback_util.api_boundary(fun)
