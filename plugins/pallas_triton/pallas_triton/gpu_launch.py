"""Launching on CUDA/ROCm: XLA's own Triton custom call, through public ``jax.ffi``.

``lower_for_gpu`` compiles the generated kernel with the official ``triton``
for the target GPU, takes its TTIR, and emits ``__gpu$xla.gpu.triton`` (FFI
API version 4) with the kernel name, the TTIR, ``num_warps``, ``num_stages``,
the 1-D grid and the input/output aliases. XLA then recompiles that TTIR with
its own pinned Triton, so only ``num_warps``, ``num_stages`` and what the TTIR
holds reach the GPU; ``num_ctas``, ``maxnreg`` and ``enable_fp_fusion`` shape
our own ``compile_for_target`` output but not what XLA launches.
No GPU is needed to lower, export or (with jax-cuda12-plugin) compile.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import numpy as np

from pallas_triton.params import CompilerParams

# Whether kernels can be launched on a GPU (the custom call above): the backend is
# then the default on cuda/rocm. Kept as a name for callers of the old module.
AVAILABLE = True

CUSTOM_CALL = "__gpu$xla.gpu.triton"
DEFAULT_CUDA_CAPABILITY = 90
DEFAULT_ROCM_ARCH = "gfx942"

# Device kinds (as PJRT spells them) -> compute capability, for compile-only meshes.
_KIND_CAPABILITY = (("B200", 100), ("B100", 100), ("GB200", 100), ("H200", 90), ("H100", 90),
                    ("H800", 90), ("GH200", 90), ("L40", 89), ("L4", 89), ("A100", 80),
                    ("A800", 80), ("A10", 86), ("A40", 86), ("V100", 70))


def capability_of_device_kind(kind: str) -> int | None:
    """H100/H200 -> 90, A100 -> 80, B200 -> 100; None for a kind not known here."""
    kind = kind.upper()
    for name, cc in _KIND_CAPABILITY:
        if name in kind:
            return cc
    return None


def _capability_of_device(device) -> int | None:
    cc = getattr(device, "compute_capability", None)
    if cc:                                          # "9.0" on a real CUDA device
        major, _, minor = str(cc).partition(".")
        try:
            return int(major) * 10 + int(minor or 0)
        except ValueError:
            pass
    return capability_of_device_kind(getattr(device, "device_kind", "") or "")


def target_arch(ctx, params: CompilerParams):
    """The GPU the kernel is lowered for: ``(backend, arch)`` for ``triton.compile``.

    CUDA: the compute capability of the device the program is lowered for (a
    real one, or a compile-only topology's device kind); else that of the
    context mesh (``jax.set_mesh``); else ``params.compute_capability``; else 90.
    ROCm: ``params.rocm_arch`` or gfx942 (untested: no ROCm machine here).
    """
    if ctx.platform == "rocm":
        return "hip", params.rocm_arch or DEFAULT_ROCM_ARCH
    from pallas_triton import _jax_compat
    for devices in (_jax_compat.lowering_devices(ctx.mlir_ctx),
                    _jax_compat.context_mesh_devices()):
        for device in devices:
            cc = _capability_of_device(device)
            if cc is not None:
                return "cuda", cc
    if params.compute_capability is not None:
        return "cuda", int(params.compute_capability)
    return "cuda", DEFAULT_CUDA_CAPABILITY


@dataclasses.dataclass(frozen=True)
class LaunchSpec:
    """Everything the custom call carries, besides the operands."""
    name: str
    ttir: str
    num_warps: int
    num_stages: int
    grid: tuple[int, int, int]
    threads: int
    target: tuple


# Opt-in shared memory per block (bytes) by compute capability: what XLA checks a launch against.
_SHARED_LIMIT = {70: 98304, 75: 65536, 80: 166912, 86: 101376, 87: 166912, 89: 101376,
                 90: 232448, 100: 232448}


@functools.lru_cache(maxsize=128)
def _launch_spec_cached(key, keyed_kernel, target, params):
    del key
    from pallas_triton.generation import generate_source
    from pallas_triton.compile import compile_for_target
    warp = 64 if target[0] == "hip" else 32
    # Triton's default of 3 stages can overflow shared memory for large blocks;
    # when the user left num_stages unset, take the most stages that fit.
    tries = [params] if params.num_stages is not None else [
        dataclasses.replace(params, num_stages=n) for n in (3, 2, 1)]
    limit = _SHARED_LIMIT.get(target[1]) if target[0] == "cuda" else None
    for attempt in tries:
        asm = compile_for_target(keyed_kernel.kernel, target=target, params=attempt,
                                 warp_size=warp)
        if limit is None or asm["metadata"].shared <= limit:
            break
    meta = asm["metadata"]
    gen = generate_source(keyed_kernel.kernel, target=_codegen_target(target), params=params)
    return LaunchSpec(name=meta.name, ttir=asm["ttir"], num_warps=int(meta.num_warps),
                      num_stages=int(meta.num_stages), grid=(gen.num_programs, 1, 1),
                      threads=int(meta.num_warps) * warp, target=target)


def _codegen_target(target):
    return "cuda" if target[0] == "cuda" else "rocm"


def launch_spec(kernel, target, params: CompilerParams) -> LaunchSpec:
    """The TTIR and launch facts of ``kernel`` for ``target``, cached per kernel+target+params."""
    from pallas_triton.generation import _Keyed
    from pallas_triton.fingerprint import kernel_fingerprint
    key = kernel_fingerprint(kernel, ("launch", target, params))
    return _launch_spec_cached(key, _Keyed(kernel, key), target, params)


def lower_for_gpu(kernel, ctx, params: CompilerParams, *args):
    """The MLIR of one ``__gpu$xla.gpu.triton`` custom call running ``kernel``."""
    target = target_arch(ctx, params)
    spec = launch_spec(kernel, target, params)
    out_types = [jax.ShapeDtypeStruct(m.array_shape, m.dtype) for m in kernel.out_mappings]
    # the kernel's (input index, output index) pairs -> ffi's {input: output}
    aliases = {int(i): int(o) for i, o in kernel.input_output_aliases}
    call = jax.ffi.ffi_call(CUSTOM_CALL, out_types, custom_call_api_version=4,
                            input_output_aliases=aliases)
    gx, gy, gz = spec.grid

    def launch(*xs):
        outs = call(*xs, name=spec.name, ir=spec.ttir, num_stages=np.int32(spec.num_stages),
                    num_warps=np.int32(spec.num_warps), grid_x=np.int32(gx),
                    grid_y=np.int32(gy), grid_z=np.int32(gz), debug=np.bool_(params.debug))
        return list(outs)
    return ctx.lower_fun(launch, *args)


__all__ = ["AVAILABLE", "CUSTOM_CALL", "LaunchSpec", "capability_of_device_kind", "launch_spec",
           "lower_for_gpu", "target_arch"]
