"""The ``mgpu`` backend: rebuilds a KernelIR as a JAX Mosaic GPU kernel."""

from __future__ import annotations

from pallas_frontend import backend_api
from pallas_frontend.backend_api import Backend, BackendUnavailableError, KernelIR

from pallas_mgpu import check, manifest
from pallas_mgpu.memory import MemorySpace
from pallas_mgpu.params import (CompilerParams, InterpretParams, active_interpret_mode,
                                adopt_interpret)

__version__ = "0.1.1"


class MosaicGpuBackend(Backend):
    """The ``mgpu`` backend: rebuilds a kernel as a JAX Mosaic GPU kernel
    (``plgpu.kernel`` + ``emit_pipeline``) for Hopper-class NVIDIA GPUs, or runs
    it in JAX's Mosaic GPU interpret mode (``InterpretParams``)."""
    name = "mgpu"
    distribution = "pallas-mgpu"
    version = __version__
    api_version = (1, 10)    # RunGate (1.8: source_line, 1.6: replay_equations)
    platforms = ("cuda",)
    priority = -10       # pallas_triton stays the cuda default; pass CompilerParams to pick this
    compiler_params_type = CompilerParams
    interpret_params_type = InterpretParams
    memory_spaces = tuple(MemorySpace)
    pip_extra = "mgpu"
    dtypes = None        # check.py checks dtypes of operands and scratch alike
    # Each tag is exercised by a test of this plugin or of the conformance suite.
    capabilities = frozenset({
        "grid", "blocked", "element", "squeezed", "scratch", "aliasing", "run_scoped",
        "collective_run_scoped", "pipeline", "barriers", "tma", "wgmma", "loops", "vmap",
        "jvp", "debug_print", "interpret_mode", "compile_only", "semaphores",
    })
    conformance_unsupported = manifest.UNSUPPORTED
    conformance_xfail = manifest.XFAIL

    def is_available(self) -> tuple[bool, str]:
        # Lowering needs only jaxlib's Mosaic GPU; no GPU, no CUDA plugin.
        try:
            from jax.experimental.mosaic import gpu  # noqa: F401
        except Exception as e:  # pragma: no cover - a jaxlib without Mosaic GPU
            return False, f"jaxlib has no Mosaic GPU ({e})"
        return True, ""

    def check(self, kernel: KernelIR) -> None:
        check.refuse_bounded_slices(kernel)
        super().check(kernel)
        check.check_kernel(kernel)

    def call_effects(self, kernel: KernelIR, interpret) -> frozenset:
        if isinstance(interpret, InterpretParams) or active_interpret_mode() is not None:
            from pallas_mgpu import _jax_private
            return _jax_private.interpret_effects()
        return frozenset()

    def conformance_compiler_params(self):
        """Each bool field of ``CompilerParams`` flipped in turn (as the default),
        leaving out the fields this JAX's ``plgpu.CompilerParams`` lacks (an older
        JAX of the window refuses them)."""
        import dataclasses
        from pallas_mgpu import _jax_private
        base = CompilerParams()
        return [base.replace(**{f.name: not getattr(base, f.name)})
                for f in dataclasses.fields(CompilerParams)
                if f.init and isinstance(getattr(base, f.name), bool)
                and not _jax_private.missing_param_field("CompilerParams", f.name)]

    def forced_interpret_params(self):
        return active_interpret_mode()

    def adopt_foreign_params(self, obj):
        # API 1.7's optional hook (a 1.6 frontend never calls it, so 1.6 is still declared)
        ours = adopt_interpret(obj)     # JAX's InterpretGPUParams: the same fields
        return ours if isinstance(ours, InterpretParams) else None

    def call_options(self, platform: str) -> dict:
        # jax.default_backend() says "gpu" on an NVIDIA host, where lowering says "cuda"
        if platform in ("cuda", "gpu"):
            return {"compiler_params": CompilerParams()}
        return {"interpret": InterpretParams()}

    def compile_platform(self) -> str:
        return "cuda"

    def compile_only(self, fn, *args):
        from pallas_mgpu import aot
        return aot.compile_for_cuda(fn, *args)

    def lower(self, kernel: KernelIR, ctx, *args):
        from pallas_mgpu import evaluate, matmul, rebuild
        interpret = ctx.interpret_params
        if not isinstance(interpret, InterpretParams):
            interpret = active_interpret_mode()
        if interpret is None and ctx.platform != "cuda":
            raise BackendUnavailableError(
                f"Backend 'mgpu' compiles kernel '{kernel.name}' for NVIDIA GPUs (cuda) only, but "
                f"the platform is {ctx.platform!r}. Pass interpret=pallas_mgpu.InterpretParams() "
                "to run it through JAX's Mosaic GPU interpreter here.")
        if interpret is None:
            check.check_compiled(kernel)
        matmul.set_interpreting(interpret is not None)
        # A pallas_mgpu.kernel body is JAX's Mosaic GPU code: its register layouts are
        # the author's (JAX's kernels cast them explicitly); hints are for portable kernels.
        from pallas_mgpu.mesh_kernel import MeshKernelParams
        evaluate.set_layout_hints(interpret is None
                                  and not isinstance(kernel.compiler_params, MeshKernelParams))
        build = rebuild.build_kernel(kernel, ctx.mlir_ctx.avals_out, interpret)
        if interpret is None:
            return ctx.lower_fun(build, *args)
        from pallas_mgpu import _jax_private
        # serialized: JAX's interpreter keeps one process-global simulated memory
        with _jax_private.gpu_interpreter_fixes(), _jax_private.serialized_interpreter():
            return ctx.lower_fun(build, *args)


@backend_api.hookimpl
def pallas_frontend_backend():
    return MosaicGpuBackend()
