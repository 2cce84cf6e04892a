"""The Triton backend: checks, code generation cache, and the three run paths."""

from __future__ import annotations

import sys

import jax
import numpy as np

import pallas_frontend as pl
from pallas_frontend import backend_api
from pallas_triton import __version__, gpu_launch, manifests
from pallas_triton.errors import TritonCapabilityError, unsupported
from pallas_triton.generation import (  # noqa: F401  (generate_source is public here)
    _compiler_params, generate_source)
from pallas_triton.params import CompilerParams, InterpretParams


def check_kernel(backend, kernel: backend_api.KernelIR) -> None:
    backend_api.check_primitive_owners(backend, kernel)
    if kernel.num_scalar_prefetch:
        from pallas_triton import schedule
        from pallas_triton.prefetch import check_prefetch_refs
        check_prefetch_refs(kernel, schedule.all_ref_uses(kernel)[:kernel.num_scalar_prefetch])
    _check_scratch(kernel)
    # Block and scratch dims of any size: values are padded to powers of two (padding.py).
    # Code generation finds unsupported primitives and shapes; do it now, before lowering.
    generate_source(kernel)


def _check_scratch(kernel):
    """Scratch lives in registers (a tensor per buffer): whole reads and writes only."""
    from pallas_triton import schedule
    from pallas_triton.emitters import TL_DTYPES
    if not kernel.scratch_avals:
        return
    uses = schedule.ref_uses(kernel)
    first = len(kernel.mappings)
    for k, aval in enumerate(kernel.scratch_avals):
        label = schedule.scratch_label(kernel, k)
        inner = getattr(aval, "inner_aval", aval)
        where = f"kernel '{kernel.name}' ({kernel.source})"
        if np.dtype(inner.dtype).name not in TL_DTYPES:
            raise unsupported(f"{label} of {where}: only numeric scratch buffers (no semaphores)")
        if uses[first + k].partial:
            raise TritonCapabilityError(
                f"The Triton backend keeps scratch in registers, so it reads and writes scratch "
                f"buffers only whole (acc[...]); {label} of {where} has "
                f"{uses[first + k].partial}.")


class TritonBackend(backend_api.Backend):
    """The ``triton`` backend: generates a ``@triton.jit`` kernel from the
    KernelIR, compiled by the ``triton`` package and launched by XLA's Triton
    custom call on CUDA/ROCm, or run under Triton's interpreter (``InterpretParams``)."""
    name = "triton"
    distribution = "pallas-triton"
    version = __version__
    platforms = ("cuda", "rocm")
    # The default on cuda/rocm: kernels launch there through XLA's Triton custom
    # call. On CPU, call_options route to Triton's interpreter instead.
    priority = 10 if gpu_launch.AVAILABLE else -1
    compiler_params_type = CompilerParams
    interpret_params_type = InterpretParams
    pip_extra = "triton"
    api_version = (1, 8)            # source_line (1.1: parallel_grid_axes)
    # Tags the base check keys on: "aliasing", "vmap", "float64" are supported (the
    # generated kernel is indifferent to them); "scratch" is, for whole reads and writes
    # (kept in registers; check() refuses the rest); "semaphores" is not (see
    # manifests.UNSUPPORTED). "jvp" works because a JVP is just another generated kernel.
    capabilities = frozenset({
        "grid", "blocked", "element", "squeezed", "aliasing", "loops", "cond", "vmap", "jvp",
        "scratch", "element_padding", "bounded_slice", "run_scoped",
        "float64", "atomics", "interpret_on_cpu", "compile_only", "debug_print",
        "scalar_prefetch",
    })
    dtypes = frozenset({"float32", "float16", "bfloat16", "float64", "int8", "int16", "int32",
                        "int64", "uint8", "uint16", "uint32", "uint64", "bool"})

    conformance_unsupported = manifests.CONFORMANCE_UNSUPPORTED
    conformance_xfail = manifests.CONFORMANCE_XFAIL

    def call_options(self, platform, params: CompilerParams | None = None):
        """``params`` where the kernel can be launched; elsewhere (no GPU, or no launch
        path yet) the generated kernel under Triton's interpreter, compiled with them."""
        # jax.default_backend() says "gpu" where lowering says "cuda"/"rocm"
        if platform in (*self.platforms, "gpu") and gpu_launch.AVAILABLE:
            return {"compiler_params": params or CompilerParams()}
        return {"interpret": InterpretParams(compiler_params=params)}

    def is_available(self):
        # Deliberately no GPU check: lowering, export and device-less compiles for a
        # GPU target need none, and the launch itself is XLA's business.
        try:
            import triton  # noqa: F401
        except ImportError as e:
            return False, f"the triton package cannot be imported ({e})"
        return True, ""

    def compile_platform(self):
        """rocm where ``PALLAS_TRITON_AOT_GPU`` names AMD archs (Triton compiles HSACO
        without ROCm); cuda where the XLA:GPU compiler is installed (no GPU needed);
        else this machine's."""
        from pallas_triton import amd, aot
        if amd.requested_archs():
            return "rocm"
        return "cuda" if aot.cuda_compiler_installed() else super().compile_platform()

    def compile_only(self, fn, *args):
        """On cuda: XLA:GPU compiles ``fn`` device-less for the GPU named by
        ``PALLAS_TRITON_AOT_GPU`` (H100, A100 or a GpuTargetConfigProto path; default H100).
        With AMD archs there (``gfx942,gfx90a``): Triton compiles every pallas_call to
        HSACO for each; returns the rows of ``amd.compile_for_amd``."""
        from pallas_triton import amd
        if amd.requested_archs():
            return amd.compile_for_amd(fn, *args, archs=amd.requested_archs())
        if self.compile_platform() != "cuda":
            return super().compile_only(fn, *args)
        import os

        from pallas_triton import aot
        return aot.compile_for_gpu(fn, *args, gpu=os.environ.get("PALLAS_TRITON_AOT_GPU", "H100"))

    def check(self, kernel):
        if kernel.dynamic_grid_axes:     # JAX's wording: code written against JAX matches it
            raise TritonCapabilityError(
                f"Backend 'triton' lacks capability 'dynamic_grid' that kernel '{kernel.name}' "
                f"needs at grid {kernel.grid} ({kernel.source}): dynamic grid bounds not "
                "supported in the Triton backend. Give the grid Python int sizes (export with "
                "concrete shapes), or run it with interpret=True.")
        super().check(kernel)
        check_kernel(self, kernel)

    def lower(self, kernel, ctx, *args):
        if isinstance(ctx.interpret_params, InterpretParams):
            return self._lower_interpreted(kernel, ctx, *args)
        from pallas_triton.gpu_launch import lower_for_gpu
        return lower_for_gpu(kernel, ctx, _compiler_params(kernel), *args)

    def _lower_interpreted(self, kernel, ctx, *args):
        params = _compiler_params(kernel, ctx.interpret_params)
        gen = generate_source(kernel, target="interpret", params=params)
        if kernel.debug:
            print(gen.source, file=sys.stdout)
        from pallas_triton.interpret import host_runner
        run = host_runner(kernel, gen)
        out_types = [jax.ShapeDtypeStruct(m.array_shape, m.dtype) for m in kernel.out_mappings]

        def call(*xs):
            return jax.pure_callback(run, out_types, *xs, vmap_method="sequential")
        return ctx.lower_fun(call, *args)


@backend_api.hookimpl
def pallas_frontend_backend():
    return TritonBackend()


__all__ = ["TritonBackend", "generate_source", "pallas_frontend_backend"]
