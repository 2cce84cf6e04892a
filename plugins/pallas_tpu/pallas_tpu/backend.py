"""The ``tpu`` backend: lowers a KernelIR through Mosaic TPU (in jaxlib)."""

from __future__ import annotations

import concurrent.futures
import contextlib

from pallas_frontend import backend_api
from pallas_frontend.backend_api import Backend, BackendUnavailableError, KernelIR

from pallas_tpu import check, manifest
from pallas_tpu.memory import MemorySpace
from pallas_tpu.params import CompilerParams, InterpretParams, active_interpret_mode

__version__ = "0.1.0"


class TpuBackend(Backend):
    """The ``tpu`` backend: rebuilds a kernel for JAX's TPU Pallas and lowers it
    through Mosaic, or runs it in JAX's TPU interpret mode (``InterpretParams``)."""
    name = "tpu"
    distribution = "pallas-tpu"
    version = __version__
    api_version = (1, 12)     # tracing_kernel_params (1.11: lowering_kernel, 1.10: RunGate)
    platforms = ("tpu",)
    priority = 10
    compiler_params_type = CompilerParams
    interpret_params_type = InterpretParams
    memory_spaces = tuple(MemorySpace)
    pip_extra = "tpu"
    dtypes = None  # checked by check.check_dtypes, which also covers scratch
    # Each tag is exercised by a test of this plugin or of the conformance
    # suite; float64 is absent on purpose (Mosaic has no 64-bit vectors).
    capabilities = frozenset({
        "grid", "blocked", "squeezed", "scratch", "aliasing", "run_scoped", "scalar_prefetch",
        "semaphores", "dma", "remote_dma", "multi_device", "pipeline", "prng", "debug_print",
        "debug_check", "loops", "vmap", "jvp", "interpret_mode", "dynamic_grid", "element",
    })
    conformance_unsupported = manifest.UNSUPPORTED
    conformance_xfail = manifest.XFAIL

    def check(self, kernel: KernelIR) -> None:
        check.check_block_dims(kernel)   # before the generic tag check: it says why
        super().check(kernel)
        check.check_kernel(kernel)

    def call_effects(self, kernel: KernelIR, interpret) -> frozenset:
        if isinstance(interpret, InterpretParams) or active_interpret_mode() is not None:
            from pallas_tpu import sc_interpret
            if sc_interpret.is_sparsecore_kernel(kernel):
                # the SparseCore CPU model is one pure callback per launch: no token to
                # thread (JAX cannot lower a token beside pinned_host operands/results)
                return frozenset()
            return _interpreter_effects()
        return frozenset()

    def forced_interpret_params(self):
        return active_interpret_mode()

    def adopt_foreign_params(self, obj):
        # API 1.7's optional hook (a 1.6 frontend never calls it, so 1.6 is still declared)
        return InterpretParams.from_jax(obj)

    def call_options(self, platform: str) -> dict:
        if platform == "tpu":
            return {"compiler_params": CompilerParams()}
        return {"interpret": InterpretParams()}

    def compile_platform(self) -> str:
        return "tpu"   # a v5e chip through libtpu when this host has no TPU

    def compile_only(self, fn, *args):
        from pallas_tpu import aot
        return aot.compile_for_tpu(fn, *args)

    def lower(self, kernel: KernelIR, ctx, *args):
        from pallas_tpu import rebuild
        interpret = ctx.interpret_params
        if not isinstance(interpret, InterpretParams):
            # set_tpu_interpret_mode / force_tpu_interpret_mode (on a TPU host: the
            # frontend only sends kernels with our CompilerParams to "tpu" platforms)
            interpret = active_interpret_mode()
        # operands placed by ours' with_memory_space_constraint: JAX's spaces on their types
        from pallas_tpu import spaces
        ctx = spaces.jax_placed_context(ctx, interpreting=interpret is not None)
        if interpret is not None:
            from pallas_tpu import sc_interpret
            if sc_interpret.is_sparsecore_kernel(kernel):
                return sc_interpret.lower(kernel, ctx, *args)   # the SparseCore CPU model
        if interpret is None and ctx.platform != "tpu":
            raise BackendUnavailableError(
                f"Backend 'tpu' compiles kernel '{kernel.name}' for TPU only, but the platform "
                f"is {ctx.platform!r}. Pass interpret=pallas_tpu.InterpretParams() to run it "
                "through JAX's TPU interpreter here.")
        if interpret is None:
            from pallas_tpu import sc_rebuild
            if sc_rebuild.is_sparsecore(kernel):     # JAX's SparseCore lowering
                return sc_rebuild.lower(kernel, ctx, *args)
        if interpret is None:
            check.check_for_mosaic(kernel)
        else:
            # Block shapes the chip refuses fail here too (check() has no interpret params)
            if check.chip_checks_enabled(interpret):
                check.check_for_chip(kernel)
                # and what only the chip's compiler knows: libtpu compiles it device-less
                from pallas_tpu import chip_compile
                chip_compile.check(kernel, ctx, interpret, check.CHIP_CHECKS_OFF)
            # JAX's TPU interpreter would hang in a wait nothing can satisfy
            from pallas_tpu import semaphore_deadlock
            semaphore_deadlock.check(kernel)
            from pallas_tpu import slow_interpret
            slow_interpret.warn_if_slow(kernel)
        if interpret is not None and _empty_grid(kernel):
            # nothing runs; JAX's TPU interpreter divides by the parallel subgrid's size,
            # 0 here (a vmap over a 0-sized batch adds such an axis)
            return ctx.lower_fun(lambda *a: _outputs_of_empty_grid(kernel, ctx, a), *args)
        if interpret is None:
            # semaphores passed between kernels get JAX's semaphore dtypes
            from pallas_tpu import semaphore_operands
            ctx = semaphore_operands.typed_lowering_context(kernel, ctx)
        with rebuild.dynamic_shapes_export(kernel):
            build = rebuild.build_pallas_call(kernel, ctx.mlir_ctx.avals_out, interpret)
            # JAX stages its interpreter when the rebuilt call is lowered, here
            with _tpu_info_context(kernel), _interpreter_patches(interpret):
                return ctx.lower_fun(build, *args)


def _empty_grid(kernel: KernelIR) -> bool:
    return any(isinstance(g, int) and g == 0 for g in kernel.grid)


def _outputs_of_empty_grid(kernel: KernelIR, ctx, args) -> list:
    """What a kernel that runs at no grid point leaves: an aliased output its input,
    any other output undefined (zeros here)."""
    import jax.numpy as jnp
    aliased = {o: i for i, o in kernel.input_output_aliases}
    return [args[aliased[k]] if k in aliased else jnp.zeros(aval.shape, aval.dtype)
            for k, aval in enumerate(ctx.mlir_ctx.avals_out)]


def _interpreter_patches(interpret):
    """JAX 0.12's TPU interpreter checks for revisited output blocks by
    scanning every earlier grid point, quadratic in the grid size (16384
    points: 73 s); ours keeps a dict (see ``_jax_private``)."""
    if interpret is None:
        return contextlib.nullcontext()
    from pallas_tpu import _jax_private
    patches = contextlib.ExitStack()
    patches.enter_context(_jax_private.linear_revisit_check())
    # JAX's interpreter keeps one process-global simulated memory: runs from
    # several threads must not overlap (backend_api.RunGate)
    patches.enter_context(_jax_private.serialized_interpreter())
    return patches


def _interpreter_effects() -> frozenset:
    """The effects JAX's TPU interpreter puts on a pallas_call (ordered host
    callbacks), found by tracing a trivial interpreted call: the frontend's
    primitive must declare them so that JAX threads a token into our lowering."""
    global _INTERPRET_EFFECTS
    if _INTERPRET_EFFECTS is None:
        import jax
        import jax.numpy as jnp
        from jax.experimental import pallas as pl
        from jax.experimental.pallas import tpu as pltpu

        def copy(x_ref, o_ref):
            o_ref[...] = x_ref[...]
        probe = pl.pallas_call(copy, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                               interpret=pltpu.InterpretParams())
        x = jax.ShapeDtypeStruct((8, 128), jnp.float32)
        # traced in a thread of its own: JAX's tracing context is per thread, and the
        # first kernel may be traced inside a shard_map, whose check_vma would refuse
        # the probe's out_shape (it has no manual axes)
        with concurrent.futures.ThreadPoolExecutor(1) as clean:
            _INTERPRET_EFFECTS = frozenset(clean.submit(jax.make_jaxpr(probe), x).result().effects)
    return _INTERPRET_EFFECTS


_INTERPRET_EFFECTS = None


def _tpu_info_context(kernel: KernelIR):
    """JAX's emit_pipeline reads chip details from the context mesh's device;
    on a host without a TPU we name a v5e when the context names none."""
    from pallas_tpu.pipeline import uses_pipeline
    if not uses_pipeline(kernel):
        return contextlib.nullcontext()
    import jax
    mesh = jax.sharding.get_abstract_mesh()
    if getattr(mesh, "abstract_device", None) is not None or jax.default_backend() == "tpu":
        return contextlib.nullcontext()
    if mesh.shape_tuple:
        return contextlib.nullcontext()
    from pallas_tpu import _jax_private
    return jax.sharding.use_abstract_mesh(
        jax.sharding.AbstractMesh((), (), abstract_device=_jax_private.abstract_tpu_device()))


@backend_api.hookimpl
def pallas_frontend_backend():
    return TpuBackend()
