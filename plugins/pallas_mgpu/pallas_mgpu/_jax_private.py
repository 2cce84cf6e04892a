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

from pallas_frontend.backend_api import RunGate


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

    @gpu_callbacks.fail_on_exception
    def check(token):
        state = gpu_callbacks._get_shared_memory()
        state.barrier.wait()
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
