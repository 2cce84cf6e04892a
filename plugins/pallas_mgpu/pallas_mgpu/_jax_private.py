"""The only module of pallas_mgpu that touches JAX internals (``jax._src``).

- ``bind_axis_names``: ``pallas_mgpu.kernel`` bodies read their CTA and
  thread coordinates with ``lax.axis_index(name)``, as in JAX's Mosaic GPU
  kernels; the frontend traces them, so the names must be bound while it does.
- ``view``: rebuilds a Ref view (``ref.at[...]``, ``ref.T``) on the rebuilt
  kernel's Ref from the transforms recorded in the kernel jaxpr.
- ``transformed_ref_type``: to recognise such views.
- ``written_ref_positions``: which Refs a kernel writes (its effects).
- ``register_ref_type`` / ``uninitialized`` / ``run_state_primitive``:
  ``pl.run_state(f)(plgpu.ACC.init(x))`` takes this plugin's accumulators.
- ``mpmd_map_primitive`` / ``mpmd_map``: JAX's ``mpmd_map`` (kernel code
  written for JAX calls it with ``plgpu.WarpMesh``), replayed with JAX's mesh.
- ``serialized_interpreter``: interpreted kernel runs, one at a time
  process-wide (``RUN_GATE``).
- ``gpu_interpreter_fixes``: JAX's GPU interpreter's end-of-kernel barrier
  check, made once every device of a ``shard_map`` has finished.
"""

from __future__ import annotations

import dataclasses
import functools
import threading

from pallas_frontend.backend_api import RunGate


# --- the JAX window (0.10-0.12): what an older JAX lacks, probed by feature ---------

# Fields of JAX 0.12's ``plgpu.CompilerParams`` and ``plgpu.InterpretGPUParams``
# that older releases of the window lack, with the first release that has each.
_FIELDS_SINCE = {
    "CompilerParams": {"profile_bounds_check": "0.11", "skip_device_barrier": "0.11",
                       "is_multi_process": "0.12", "collective_id": "0.12.1"},
    "InterpretGPUParams": {"inline_mgpu": "0.11", "on_race": "0.12"},
}


def jax_version() -> str:
    import jax
    return jax.__version__


def needs_newer_jax(what: str, since: str) -> str:
    """The one line ours says where this JAX lacks ``what``."""
    return f"{what} needs JAX {since} or newer; this is JAX {jax_version()}."


@functools.cache
def jax_param_fields(cls_name: str) -> frozenset[str]:
    """The fields of this JAX's ``plgpu.<cls_name>`` (CompilerParams, InterpretGPUParams)."""
    return frozenset(f.name for f in dataclasses.fields(
        getattr(_plgpu_or_interpret(cls_name), cls_name)))


def missing_param_field(cls_name: str, name: str) -> str | None:
    """None where this JAX's ``plgpu.<cls_name>`` has field ``name``; else the
    JAX release that first has it."""
    since = _FIELDS_SINCE[cls_name].get(name)
    if since is None or name in jax_param_fields(cls_name):
        return None
    return since


def fields_jax_lacks(cls_name: str) -> dict[str, str]:
    """The fields of JAX 0.12's ``plgpu.<cls_name>`` this JAX lacks, with the
    release that first has each."""
    return {name: since for name in _FIELDS_SINCE[cls_name]
            if (since := missing_param_field(cls_name, name))}


def refuse_fields_jax_lacks(params, cls_name: str, ours: str) -> None:
    """Raises (one line, naming the JAX release) where ``params`` (our dataclass
    mirroring ``plgpu.<cls_name>``) sets a field this JAX lacks to other than
    its default; a field at its default is simply not passed on."""
    for f in dataclasses.fields(params):
        value = getattr(params, f.name)
        if value != f.default and (since := missing_param_field(cls_name, f.name)):
            raise NotImplementedError(needs_newer_jax(f"{ours}({f.name}={value!r})", since))


def jax_params(cls_name: str, values: dict):
    """``plgpu.<cls_name>(**values)`` with only the fields this JAX has."""
    theirs = jax_param_fields(cls_name)
    return getattr(_plgpu_or_interpret(cls_name), cls_name)(
        **{k: v for k, v in values.items() if k in theirs})


def gpu_interpret_api():
    """The module holding JAX's GPU interpret mode (``InterpretGPUParams``,
    ``force_gpu_interpret_mode``, ``set_gpu_interpret_mode``): ``plgpu`` from
    JAX 0.11; JAX 0.10 has them only in its interpreter's package."""
    from jax.experimental.pallas import mosaic_gpu as plgpu
    if hasattr(plgpu, "InterpretGPUParams"):
        return plgpu
    from jax._src.pallas.mosaic_gpu.interpret import params
    return params


def _plgpu_or_interpret(cls_name: str):
    if cls_name == "InterpretGPUParams":
        return gpu_interpret_api()
    from jax.experimental.pallas import mosaic_gpu as plgpu
    return plgpu


# Functions of JAX 0.12's ``plgpu`` that older releases of the window lack, with
# the first release that has each.
_PLGPU_SINCE = {"mma": "0.11", "wait_gmem_to_smem": "0.11", "im2col_ref": "0.12",
                "barrier_arrive_and_wait": "0.12", "store": "0.12", "alloc_semaphore": "0.12"}


def _barrier_arrive_then_wait(barrier):
    # JAX 0.12 lowers barrier_arrive_and_wait as exactly these two operations
    from jax.experimental.pallas import mosaic_gpu as plgpu
    plgpu.barrier_arrive(barrier)
    plgpu.barrier_wait(barrier)


# What ours does with an older JAX where the same thing can be said in its operations.
_PLGPU_FALLBACKS = {"barrier_arrive_and_wait": _barrier_arrive_then_wait}


def jax_block_spec(*args, oob_fill_mode=None, **kw):
    """``plgpu.BlockSpec(*args, **kw)``, with ``oob_fill_mode`` where this JAX has
    it (0.11 on). JAX 0.10's pipeline always fills an edge block's out-of-bounds
    part with zeros, which every mode allows (UNDEFINED and PROMISE_IN_BOUNDS
    only permit faster copies), so there the mode is dropped."""
    from jax.experimental.pallas import mosaic_gpu as plgpu
    if oob_fill_mode is not None and hasattr(plgpu.BlockSpec, "oob_fill_mode"):
        kw["oob_fill_mode"] = oob_fill_mode
    return plgpu.BlockSpec(*args, **kw)


@functools.cache
def gpu_interpreter_clips_edge_blocks() -> bool:
    """Whether JAX's GPU interpreter zero-fills a TMA read past an array's end and
    drops such a write, as the GPU does (JAX 0.11 on; 0.10 has neither)."""
    from jax._src.pallas.mosaic_gpu.interpret import gpu_callbacks
    return hasattr(gpu_callbacks, "AsyncCopySmemToGmemTask")


@functools.cache
def gpu_interpreter_has_cluster_cancel() -> bool:
    """Whether JAX's GPU interpreter runs ``try_cluster_cancel`` (JAX 0.11 on)."""
    import inspect
    from jax._src.pallas.mosaic_gpu.interpret import jaxpr_interpret
    return "try_cluster_cancel" in inspect.getsource(jaxpr_interpret)


@functools.cache
def jax_default_lowering_semantics() -> str:
    """The name of the lowering semantics this JAX's ``plgpu.CompilerParams`` defaults
    to: "Warpgroup" from JAX 0.11, "Lane" under 0.10."""
    from jax.experimental.pallas import mosaic_gpu as plgpu
    return plgpu.CompilerParams().lowering_semantics.name


def warpgroup_semantics_is_jax_default() -> bool:
    """Whether this JAX lowers with warpgroup semantics by default (JAX 0.11 on);
    JAX 0.10 defaults to lane semantics, its warpgroup layout inference still partial."""
    return jax_default_lowering_semantics() == "Warpgroup"


def plgpu_lacks(name: str) -> str | None:
    """None where this JAX's ``plgpu`` has ``name`` (or ours its equivalent);
    else the first JAX release that has it."""
    from jax.experimental.pallas import mosaic_gpu as plgpu
    if hasattr(plgpu, name) or name in _PLGPU_FALLBACKS:
        return None
    return _PLGPU_SINCE.get(name, "(none known)")


# Keywords of JAX 0.12's ``plgpu`` functions that JAX 0.11 has too (others: 0.12 only).
_KEYWORD_SINCE = {("try_cluster_cancel", "collective_axes"): "0.11"}


@functools.cache
def _as_in_jax_012(name: str, fn):
    """``fn`` (this JAX's ``plgpu.<name>``) called as JAX 0.12's: JAX 0.10's
    ``load`` takes a required index (None: the whole Ref, what 0.12 loads); a
    keyword this JAX's function lacks is dropped when unset (None, (), False) and
    refused otherwise, in one line naming the release that has it."""
    import inspect
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return fn
    index_first = name == "load" and "idx" in params and \
        params["idx"].default is inspect.Parameter.empty

    def call(*args, **kw):
        for k in [k for k in kw if k not in params]:
            value = kw.pop(k)
            if value is not None and value != () and value is not False:
                since = _KEYWORD_SINCE.get((name, k), "0.12")
                raise NotImplementedError(needs_newer_jax(f"plgpu.{name}({k}={value!r})", since))
        if index_first:
            args = (args[0], None, *args[1:])
        return fn(*args, **kw)
    return call


def plgpu_function(name: str, what: str | None = None):
    """``plgpu.<name>``, called as in JAX 0.12; where this JAX lacks it, its
    equivalent in this JAX's operations, or one line naming the JAX release that has it."""
    from jax.experimental.pallas import mosaic_gpu as plgpu
    fn = getattr(plgpu, name, None)
    if fn is not None:
        return _as_in_jax_012(name, fn)
    fn = _PLGPU_FALLBACKS.get(name)
    if fn is None:
        what = what or f"pallas_mgpu.{name}"
        if name in _PLGPU_SINCE:
            raise NotImplementedError(needs_newer_jax(what, _PLGPU_SINCE[name]))
        raise NotImplementedError(f"{what}: this JAX ({jax_version()}) has no "
                                  f"jax.experimental.pallas.mosaic_gpu.{name}.")
    return fn


def bind_axis_names(sizes: dict[str, int]):
    """A context in which ``lax.axis_index(name)`` traces for every ``name``."""
    from jax._src import core
    return core.extend_axis_env_nd(tuple(sizes.items()))


def transformed_ref_type():
    from jax._src.state.types import TransformedRef
    return TransformedRef


def view(ref, transforms: tuple):
    """``ref`` (a Ref or already a view) seen through ``transforms``."""
    if not transforms:
        return ref
    from jax._src.state.types import TransformedRef
    if isinstance(ref, TransformedRef):
        return TransformedRef(ref.ref, (*ref.transforms, *transforms))
    return TransformedRef(ref, tuple(transforms))


def interpret_effects() -> frozenset:
    """The effects JAX's GPU interpreter puts on a launch (ordered host callbacks)."""
    from jax._src.pallas.mosaic_gpu.interpret import params
    return frozenset(params.get_interpret_effects())


def allow_effect_in_kernels(effect_type) -> None:
    """Lets ``effect_type`` appear inside loops, branches and custom
    derivatives of a kernel body (JAX refuses unknown effects there)."""
    from jax._src import effects
    for allowed in (effects.control_flow_allowed_effects,
                    effects.custom_derivatives_allowed_effects, effects.remat_allowed_effects):
        allowed.add_type(effect_type)


def mosaic_gpu_modules(lowered) -> list[str]:
    """The Mosaic GPU modules of a ``Lowered`` (for cuda), as MLIR text: each
    ``mosaic_gpu_v2`` custom call carries its module as MLIR bytecode."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir
    from jax.experimental.mosaic.gpu import dialect_lowering  # noqa: F401  (loads the dialects)
    from jax._src.lib import mosaic_gpu_dialect
    out = []
    module = lowered.compiler_ir("stablehlo")

    def walk(op):
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    if inner.operation.name == "stablehlo.custom_call" and \
                            ir.StringAttr(inner.attributes["call_target_name"]).value == "mosaic_gpu_v2":
                        config = ir.DictAttr(inner.attributes["mhlo.backend_config"])
                        out.append(ir.StringAttr(config["module"]).value_bytes)
                    walk(inner.operation)
    walk(module.operation)
    texts = []
    for blob in out:
        ctx = mlir.make_ir_context()
        mosaic_gpu_dialect.register_dialect(ctx)
        ctx.allow_unregistered_dialects = True   # Mosaic's stable wrapper dialect
        with ctx:
            texts.append(str(ir.Module.parse(blob)))
    return texts


def jax_forced_interpret_mode():
    """What JAX's own ``force_gpu_interpret_mode`` / ``set_gpu_interpret_mode``
    set (they share a config entry with the TPU ones), or None."""
    from jax._src import config
    return config.pallas_tpu_interpret_mode_context_manager.value


def written_ref_positions(jaxpr) -> set[int]:
    """Positions of the invars of ``jaxpr`` that it writes or accumulates into
    (its write effects cover nested loops and branches)."""
    from jax._src.state import types as state_types
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    index = {id(v): k for k, v in enumerate(jaxpr.invars)}
    out = set()
    for e in jaxpr.effects:
        if isinstance(e, (state_types.WriteEffect, state_types.AccumEffect)):
            at = e.input
            out.add(at if isinstance(at, int) else index.get(id(at), -1))
    out.discard(-1)
    return out


def mpmd_map_primitive():
    """JAX's ``mpmd_map`` primitive (what ``jax._src.pallas.mpmd.mpmd_map`` binds)."""
    from jax._src.pallas import mpmd
    return mpmd.mpmd_map_p


def mpmd_map(meshes_and_fns):
    """JAX's ``mpmd_map`` of functions that take no operands (a function to call)."""
    from jax._src.pallas import mpmd
    return mpmd.mpmd_map(meshes_and_fns)


def register_ref_type(cls, to_aval_and_value) -> None:
    """Lets ``pl.run_state`` take objects of ``cls``: ``to_aval_and_value(x)``
    gives the Ref type and the initial value (or ``uninitialized()``)."""
    from jax._src.state import types as state_types
    state_types._ref_type_aval_mappings[cls] = to_aval_and_value


def uninitialized():
    """JAX's marker of a ``run_state`` Ref without an initial value."""
    from jax._src.state import types as state_types
    return state_types.uninitialized


def run_state_primitive():
    """The primitive ``pl.run_state`` binds."""
    from jax._src.state import discharge
    return discharge.run_state_p


def _barriers_freed_on_every_device():
    """JAX's end-of-kernel check that no barrier is left allocated, made once
    every device has finished the kernel. JAX's checks the whole process's
    memory as each device finishes, so under ``shard_map`` a device that
    finishes first sees the barriers another device still holds and fails a
    correct kernel ("Barrier remains allocated", at random). The wait uses the
    interpreter's device barrier (one party per device of the kernel, as its
    clean-up barrier; nothing else in GPU interpret mode waits on it, and a
    failure on any device aborts it)."""
    from jax._src.pallas.mosaic_gpu.interpret import gpu_callbacks
    # JAX 0.11+ records a callback's exception for the run (fail_on_exception);
    # JAX 0.10's callbacks let it propagate.
    fail_on_exception = getattr(gpu_callbacks, "fail_on_exception", lambda f: f)

    @fail_on_exception
    def check(token):
        state = gpu_callbacks._get_shared_memory()
        try:
            state.barrier.wait()
        except threading.BrokenBarrierError:
            # another device failed and aborted the barrier: its error is the one to
            # report (JAX re-reports one of a run's errors, at random, at effects_barrier)
            return token
        state.assert_no_barriers_allocated()
        return token
    return check


_end_check = None


def gpu_interpreter_fixes():
    """A context manager: kernels lowered inside it through JAX's Mosaic GPU
    interpreter check for leftover barriers once every device has finished
    (``_barriers_freed_on_every_device``; the callback is chosen when a
    kernel is lowered, so JAX's own kernels keep JAX's)."""
    import contextlib
    from jax._src.pallas.mosaic_gpu.interpret import gpu_callbacks
    global _end_check
    if _end_check is None:
        _end_check = _barriers_freed_on_every_device()

    @contextlib.contextmanager
    def swapped():
        original = gpu_callbacks._assert_no_barriers_allocated
        gpu_callbacks._assert_no_barriers_allocated = _end_check
        try:
            yield
        finally:
            gpu_callbacks._assert_no_barriers_allocated = original
    return swapped()


def _run_failed(memory) -> bool:
    return getattr(memory, "_failure", None) is not None


# JAX's Mosaic GPU interpreter keeps a run's simulated memory in one module global
RUN_GATE = RunGate(failed=_run_failed)


def serialized_interpreter():
    """A context manager: JAX Mosaic GPU interpret kernels lowered inside it
    run one at a time, process-wide (``backend_api.RunGate``), entering the
    gate in their shared-memory set-up and leaving it in their clean-up."""
    from jax._src.pallas.mosaic_gpu.interpret import gpu_callbacks
    return RUN_GATE.gating(
        gpu_callbacks, set_up="_initialize_shared_memory", clean_up="_clean_up_shared_memory",
        parties=lambda *, num_gpus, **_: int(num_gpus),
        memory=lambda: gpu_callbacks._shared_memory)
