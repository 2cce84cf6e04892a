"""Launching on CUDA/ROCm inside a jitted program: not implemented yet.

jax-triton 0.4.1 (the documented route) fails with jax 0.12 (its DCE rule
has the old signature, and its lowering needs jaxlib's private
``gpu_triton`` bindings). Emitting XLA's ``__gpu$xla.gpu.triton`` custom call
ourselves needs the same private bindings (``TritonKernel``,
``TritonKernelCall`` serialization) which backend_api does not expose. Until
then the backend compiles (``compile_for_target``) and interprets, but does
not launch.
"""

from __future__ import annotations

from pallas_frontend.backend_api import BackendUnavailableError

# Whether lower_for_gpu can launch; callers (call_options, the autotuner) fall back to
# Triton's interpreter while it cannot.
AVAILABLE = False


def lower_for_gpu(kernel, ctx, params, *args):
    raise BackendUnavailableError(
        f"pallas_triton cannot yet launch kernel '{kernel.name}' on {ctx.platform}: the GPU "
        "launch path needs XLA's Triton custom call, which jax-triton 0.4.1 cannot emit with "
        "jax 0.12 and which needs jaxlib's private gpu_triton bindings. Use "
        "interpret=pallas_triton.InterpretParams() to run the generated kernel, or "
        "pallas_triton.compile_for_target(...) to get PTX/cubin.")
