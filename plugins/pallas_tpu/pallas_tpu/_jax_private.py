"""The only module of pallas_tpu that touches JAX internals (``jax._src``).

``AbstractDevice``: JAX's ``emit_pipeline`` asks the *context* mesh which TPU
it targets; on a CPU host (AOT compilation, TPU interpret mode) we must name
one ourselves, and JAX has no public constructor for it.

``serialized_interpreter``: interpreted kernel runs, one at a time
process-wide (``RUN_GATE``).
"""

from __future__ import annotations

import functools

from pallas_frontend.backend_api import RunGate


# --- the JAX window (0.10-0.12): what an older JAX lacks, probed by feature ---------

# Fields of JAX 0.12's ``pltpu.InterpretParams`` that older JAX releases of the
# window lack, with the first release that has each.
_INTERPRET_FIELDS_SINCE = {"on_race": "0.12"}


def is_jax_tpu_pallas_object(obj) -> bool:
    """Whether ``obj`` is of a type of JAX's own TPU Pallas, told by the private
    module its type lives in, without importing ``jax.experimental.pallas.tpu``."""
    return (type(obj).__module__ or "").startswith("jax._src.pallas.mosaic.")


def jax_version() -> str:
    import jax
    return jax.__version__


def needs_newer_jax(what: str, since: str) -> str:
    """The one line ours says where this JAX lacks ``what``."""
    return f"{what} needs JAX {since} or newer; this is JAX {jax_version()}."


@functools.cache
def jax_interpret_fields() -> frozenset[str]:
    """The fields of this JAX's ``pltpu.InterpretParams``."""
    import dataclasses
    from jax.experimental.pallas import tpu as pltpu
    return frozenset(f.name for f in dataclasses.fields(pltpu.InterpretParams))


@functools.cache
def jax_compiler_fields() -> frozenset[str]:
    """The fields of this JAX's ``pltpu.CompilerParams``."""
    import dataclasses
    from jax.experimental.pallas import tpu as pltpu
    return frozenset(f.name for f in dataclasses.fields(pltpu.CompilerParams))


def missing_interpret_field(name: str) -> str | None:
    """None where this JAX's ``InterpretParams`` has field ``name``; else the
    JAX release that first has it."""
    if name not in _INTERPRET_FIELDS_SINCE or name in jax_interpret_fields():
        return None
    return _INTERPRET_FIELDS_SINCE[name]


@functools.cache
def barrier_semaphore_takes_tag() -> bool:
    """Whether this JAX's ``pltpu.get_barrier_semaphore`` takes a ``tag`` (0.11+)."""
    import inspect
    from jax.experimental.pallas import tpu as pltpu
    return "tag" in inspect.signature(pltpu.get_barrier_semaphore).parameters


# JAX ``pltpu`` functions that ours replays on TPU and JAX 0.10 lacks, with the
# release that has them.
PLTPU_SINCE = {"conv": "0.11", "has_memory_space": "0.12", "annotate": "0.11",
                "TensorCoreMesh": "0.11", "emit_pipeline_with_async_prefetch": "0.11"}


def jax_pltpu(name: str):
    """JAX's ``pltpu.<name>`` (JAX 0.10 has ``reciprocal`` as ``pl.reciprocal``);
    where this JAX lacks it, one line naming the release that has it."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    found = getattr(pltpu, name, None)
    if found is None and name == "reciprocal":
        found = getattr(pl, name, None)
    if found is None:
        raise NotImplementedError(needs_newer_jax(
            f"pallas_tpu.{name} on TPU (JAX's pltpu.{name})", PLTPU_SINCE.get(name, "0.12")))
    return found


def memory_space_constraint(x, space, *, to_host: bool):
    """``x`` with ``space`` on its type, through the primitive of JAX's
    ``with_memory_space_constraint``: it takes any space object (ours stays
    ours; ``spaces.jax_placed_context`` hands JAX's to JAX's lowering). A
    concrete array is returned as it is, as JAX 0.11+ does (JAX 0.10 cannot
    run the constraint outside a trace); JAX 0.10 places nothing on the host."""
    import jax
    if not isinstance(x, jax.core.Tracer):
        return x
    try:                                 # JAX 0.11+
        from jax._src.state.primitives import with_memory_space_constraint_p as prim
    except ImportError:                  # JAX 0.10
        from jax._src.pallas.core import with_memory_space_constraint_p as prim
        if to_host:
            raise NotImplementedError(needs_newer_jax(
                "pallas_tpu.with_memory_space_constraint to pallas_frontend.HOST", "0.11"))
    return prim.bind(x, memory_space=space)


# Keywords of JAX 0.12's ``pltpu.emit_pipeline`` that older JAX lacks.
_EMIT_PIPELINE_SINCE = {"output_wait_read_only": "0.12"}


@functools.cache
def _emit_pipeline_keywords() -> frozenset[str]:
    import inspect
    from jax.experimental.pallas import tpu as pltpu
    return frozenset(inspect.signature(pltpu.emit_pipeline).parameters)


def jax_emit_pipeline_options(options: dict) -> dict:
    """``options`` for this JAX's ``pltpu.emit_pipeline``: one it lacks is left
    out where it is off (its default), and refused in one line where it is on."""
    have = _emit_pipeline_keywords()
    for name, value in options.items():
        if name not in have and value:
            raise NotImplementedError(needs_newer_jax(
                f"pallas_tpu.emit_pipeline({name}={value!r}) on TPU",
                _EMIT_PIPELINE_SINCE.get(name, "0.12")))
    return {k: v for k, v in options.items() if k in have}


@functools.cache
def bitcast_takes_dim() -> bool:
    import inspect
    from jax.experimental.pallas import tpu as pltpu
    return "dim" in inspect.signature(pltpu.bitcast).parameters


def jax_bitcast(x, dtype, dim: int):
    """JAX's ``pltpu.bitcast`` scaling dim ``dim`` (non-negative) of ``x``.
    Before JAX 0.12 it scales the second minor dim only (and takes no ``dim``)."""
    from jax.experimental.pallas import tpu as pltpu
    if bitcast_takes_dim():
        return pltpu.bitcast(x, dtype, dim=dim)
    if dim != x.ndim - 2:
        raise NotImplementedError(needs_newer_jax(
            "pallas_tpu.bitcast along the minormost dim (dim=-1) on TPU", "0.12"))
    return pltpu.bitcast(x, dtype)


def abstract_tpu_device(device_kind: str = "TPU v5 lite", num_cores: int = 1):
    from jax._src.mesh import AbstractDevice
    return AbstractDevice(device_kind=device_kind, num_cores=num_cores, platform="tpu")


def transformed_ref(ref, transforms):
    """``ref`` viewed through ``transforms`` (indexers recorded at trace time).

    Rebuilt directly rather than by ``ref.at[...]``: re-indexing validates
    constant starts at trace time, which would turn an out-of-bounds slice
    into a trace-time error where TPU interpret mode reports it when it runs
    (and honours ``out_of_bounds_reads``)."""
    from jax._src.state.types import TransformedRef
    if isinstance(ref, TransformedRef):
        return TransformedRef(ref.ref, (*ref.transforms, *transforms))
    return TransformedRef(ref, tuple(transforms))


def reshape_view_shape(transform):
    """The shape a ``ref.reshape(...)`` view transform gives, or None for another transform."""
    from jax._src.state.types import ReshapeTransform
    return tuple(transform.shape) if isinstance(transform, ReshapeTransform) else None


def read_view(x, transforms):
    """The value a Ref view ``transforms`` (indexers, ``reshape``, ``bitcast``)
    reads from the array ``x``: JAX's own discharge of a view, so the
    interpreters agree with JAX on every transform's meaning."""
    from jax._src.state import discharge
    return discharge.transform_array(x, list(transforms))


def write_view(x, transforms, value):
    """``x`` with ``value`` written through the view ``transforms`` (see ``read_view``)."""
    from jax._src.state import discharge, types, utils
    transforms = list(transforms)
    for i, t in enumerate(transforms):
        # JAX before 0.12 writes through no bitcast view: bitcast there and back
        if isinstance(t, types.BitcastTransform):
            outer = read_view(x, transforms[:i])
            inner = write_view(utils.bitcast(outer, t.dtype), transforms[i + 1:], value)
            return write_view(x, transforms[:i], utils.bitcast(inner, outer.dtype))
    return discharge.transform_swap_array(x, transforms, value)[1]


def retype_ref_inputs(closed, in_avals):
    """``closed`` (a ClosedJaxpr) with its Ref inputs retyped to ``in_avals``
    (JAX's Ref types, memory spaces included), or None where that is not a
    plain substitution (a retyped Ref used inside a nested jaxpr).

    Lets the backend re-bind a ``cond`` whose branches need no replay instead
    of re-tracing them: the frontend traced them over its own Ref types."""
    import jax
    from jax._src import core
    from jax.extend import core as jex
    jaxpr = closed.jaxpr
    env = {}
    for v, aval in zip(jaxpr.invars, in_avals):
        if isinstance(v.aval, jax.ref.AbstractRef) and v.aval != aval:
            env[v] = core.Var(aval)
    if not env:
        return closed
    eqns = []
    for e in jaxpr.eqns:
        if any(x in env for x in e.invars if isinstance(x, core.Var)):
            if list(jex.jaxprs_in_params(e.params)):
                return None
            e = e.replace(invars=[env.get(x, x) if isinstance(x, core.Var) else x
                                  for x in e.invars],
                          effects=core.subst_input_effects(e.effects, env))
        eqns.append(e)
    if any(x in env for x in jaxpr.outvars if isinstance(x, core.Var)):
        return None
    new = jaxpr.replace(invars=[env.get(v, v) for v in jaxpr.invars], eqns=eqns,
                        effects=core.subst_input_effects(jaxpr.effects, env))
    return jex.ClosedJaxpr(new, closed.consts)


def def_linear(prim, transpose_rule):
    """Marks ``prim`` linear in its one operand: its JVP applies it to the
    tangent, and ``transpose_rule(ct, x, **params) -> [ct_x]`` makes it
    reverse-differentiable (the frontend's ``def_pure_primitive`` has no
    transpose hook)."""
    from jax.interpreters import ad
    ad.deflinear2(prim, transpose_rule)


def jax_einshape_has_rules() -> bool:
    """Whether JAX's einshape has a VJP and fuser rules (JAX 0.11+)."""
    from jax._src.pallas import einshape as jax_einshape
    return hasattr(jax_einshape.Einshape, "pull_block_spec_rule")


def register_einshape_with_jax_fuser(prim) -> None:
    """Lets JAX's fuser (``jax.experimental.pallas.fuser``) pull block specs
    back through ``prim`` (this plugin's einshape; params ``equation`` and the
    split ``sizes``) and evaluate it on one block, with the rules of JAX's own
    einshape: code written for JAX fuses ``pltpu.einshape`` (JAX's fuser keys
    its rules on the primitive object, and ours is another one)."""
    from jax._src.pallas.fuser import block_spec as fuser

    if not jax_einshape_has_rules():
        # JAX 0.10's fuser has no rule for its own einshape either: say so in one line
        def refuse(ctx, *args, **params):
            raise NotImplementedError(needs_newer_jax(
                "JAX's fuser (pull_block_spec) through pallas_tpu.einshape", "0.11"))
        fuser.register_pull_block_spec_rule(prim)(refuse)
        fuser.register_eval_rule(prim)(refuse)
        return

    from jax._src.pallas import einshape as jax_einshape

    def as_jax(aval, equation, sizes):
        return jax_einshape.Einshape(aval, equation=equation, sizes=dict(sizes),
                                     assert_is_tile_preserving=False)

    def pull(ctx, out_block_spec, *, equation, sizes):
        return as_jax(ctx.avals_in[0], equation, sizes).pull_block_spec_rule(
            ctx, (out_block_spec,))

    def evaluate(ctx, x, *, equation, sizes):
        (out,) = as_jax(ctx.avals_in[0], equation, sizes).block_eval_rule(ctx, x)
        return out

    fuser.register_pull_block_spec_rule(prim)(pull)
    fuser.register_eval_rule(prim)(evaluate)


def _visits_of(shared_memory, key):
    """This core's record of output blocks: ``(last ranges, per output a dict
    block range -> [first, last] iteration)``, kept on JAX's shared memory so
    that it lives and dies with it (a reset or a finished kernel clears it)."""
    table = shared_memory.__dict__.setdefault("_pallas_tpu_visits", {})
    return table.setdefault(key, [None, {}])


def _check_for_revisiting_linear(token, device_id, local_core_id, loop_idx, output_blocks):
    """JAX 0.12's revisit check with a dict in place of its scan over every
    earlier iteration (quadratic in the grid size); the same rule and message."""
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc
    from jax._src.pallas.mosaic.interpret import utils as interpret_utils
    import jax
    loop_idx = tuple(int(x) for x in loop_idx)
    try:
        output_blocks = jax.tree.map(int, output_blocks)
    except Exception:
        raise ValueError("Advanced indexers are not supported on TPU") from None
    ranges = [interpret_utils.to_range(b) if b is not None else None for b in output_blocks]
    record = _visits_of(ipc._get_shared_memory(), (int(device_id), int(local_core_id)))
    last, seen = record
    if last is not None:
        for i, r in enumerate(ranges):
            if r is None or last[i] == r:
                continue
            key = (i, _hashable(r))
            if key in seen:
                first, latest = seen[key]
                raise RuntimeError(
                    f"Revisited block {r} of output {i} in iteration {loop_idx}. The block was "
                    f"previously visited in iterations {first} through {latest} .")
    for i, r in enumerate(ranges):
        if r is not None:
            seen.setdefault((i, _hashable(r)), [loop_idx, loop_idx])[1] = loop_idx
    record[0] = ranges
    return token


def _hashable(r):
    return tuple((s.start, s.stop, s.step) if isinstance(s, slice) else s for s in r)


_linear_check = None


def interpreter_module():
    """JAX's TPU interpreter module (tests swap its callbacks)."""
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc
    return ipc


def output_block(start: int, rows: int, cols: int, shape):
    """A 2-D output block as JAX's interpreter hands it to the revisit check."""
    from jax._src.state import indexing
    return [(indexing.NDIndexer((indexing.ds(start, rows), indexing.ds(0, cols)), shape, ()),)]


def linear_revisit_check():
    """A context manager: JAX TPU interpret kernels traced inside it check
    revisited output blocks in constant time per grid point (the callback is
    chosen when the kernel is traced)."""
    import contextlib
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc
    global _linear_check
    if _linear_check is None:
        _linear_check = ipc.fail_on_exception(_check_for_revisiting_linear)

    @contextlib.contextmanager
    def swapped():
        original = ipc._check_for_revisiting
        ipc._check_for_revisiting = _linear_check
        try:
            yield
        finally:
            ipc._check_for_revisiting = original
    return swapped()


def access_assumption_transform(**flags):
    """JAX's Ref transform carrying Mosaic access assumptions (``pltpu.annotate``),
    and the class of it, to merge with one already on a view."""
    try:
        from jax._src.pallas.mosaic.core import AccessAssumption, AccessAssumptionTransform
    except ImportError:     # JAX 0.10 has no access assumptions
        raise NotImplementedError(needs_newer_jax(
            "pallas_tpu.annotate (Mosaic access assumptions)", "0.11")) from None
    return AccessAssumptionTransform(AccessAssumption(**flags)), AccessAssumptionTransform


def _run_failed(memory) -> bool:
    return getattr(memory, "_failure", None) is not None


# JAX's TPU interpreter keeps a run's simulated memory in one module global
RUN_GATE = RunGate(failed=_run_failed)


def serialized_interpreter():
    """A context manager: JAX TPU interpret kernels traced inside it run one
    at a time, process-wide (``backend_api.RunGate``), entering the gate in
    their shared-memory set-up and leaving it in their clean-up."""
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc
    return RUN_GATE.gating(
        ipc, set_up="_initialize_shared_memory", clean_up="_clean_up_shared_memory",
        parties=lambda token, device_id, num_devices, *_, **__: int(num_devices),
        memory=lambda: ipc._shared_memory)


def debug_effect():
    """JAX's unordered debug effect: keeps an output-less kernel primitive (the
    SparseCore barrier) from being dropped as dead code."""
    from jax._src.debugging import debug_effect as effect
    return effect


def jax_has_shared_slice() -> bool:
    """JAX 0.12 added SparseCore's VMEM_SHARED -> subcore VMEM view."""
    try:
        from jax._src.pallas.mosaic.sc_core import SharedMemRefSliceTransform  # noqa: F401
    except ImportError:
        return False
    return True


def pretty_text(text: str):
    """A jaxpr pretty-printer leaf (for a view transform of ours)."""
    from jax._src import pretty_printer as pp
    return pp.text(text)


def shared_slice_transform():
    """JAX's view transform from a VMEM_SHARED Ref to the running vector
    subcore's VMEM (JAX 0.12; ``jax_has_shared_slice`` says whether it exists)."""
    try:
        from jax._src.pallas.mosaic.sc_core import SharedMemRefSliceTransform
    except ImportError:
        raise NotImplementedError(needs_newer_jax(
            "plsc.slice_subcore_vmem_from_shared (a VMEM_SHARED Ref sliced per subcore)",
            "0.12")) from None
    return SharedMemRefSliceTransform()


def switch_unclamped(index, branches, *operands):
    """``lax.switch`` without its clamp of ``index``: a replayed ``cond``
    equation's index is in range already (the clamp, if any, is an equation
    of its own), and JAX's kernel has none (``pl.when``)."""
    from jax import lax
    try:
        from jax._src.lax.control_flow.conditionals import _switch_internal
    except ImportError:
        return lax.switch(index, branches, *operands)
    return _switch_internal(index, tuple(branches), operands, branches_platforms=None)


def fresh_var(aval):
    """A new jaxpr variable of type ``aval`` (for an equation rewritten before replay)."""
    from jax._src import core
    return core.Var(aval)


def ndindexer_type():
    """JAX's ``ref.at[...]`` view transform class (``NDIndexer``)."""
    from jax._src.state.indexing import NDIndexer
    return NDIndexer


def register_pretty_printer(prim, pieces) -> None:
    """Prints ``prim``'s jaxpr equations on one line, in JAX's notation: the
    strs and docs ``pieces(eqn, show)`` returns, where ``show(ref, transforms)``
    is a Ref or view as JAX's state ops print it (``ref[...]`` without
    transforms); ``pieces`` returning None keeps the generic form."""
    from jax._src import core
    from jax._src import pretty_printer as pp
    from jax._src.state import primitives as state_primitives

    def rule(eqn, context, settings):
        parts = pieces(eqn, lambda ref, transforms=(): state_primitives.pp_ref_transforms(
            context, ref, transforms))
        if parts is None:
            return core._pp_eqn(eqn, context, settings)
        return pp.concat([pp.text(p) if isinstance(p, str) else p for p in parts])
    core.pp_eqn_rules[prim] = rule
