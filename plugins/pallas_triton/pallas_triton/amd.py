"""Compile-only for AMD GPUs: every pallas_call of a function to HSACO, with register figures.

Triton compiles for AMD without ROCm or a GPU (``GPUTarget("hip", arch, 64)``;
it bundles the LLVM AMDGPU backend and the linker). What this does not
exercise is XLA:ROCm's Triton custom call, which recompiles the TTIR with its
own Triton and launches it: that needs XLA built for ROCm and an AMD GPU.
"""

from __future__ import annotations

import os
import re

# the AMDHSA kernel metadata LLVM writes into the assembly, per kernel
_FIGURES = {"vgpr": "vgpr_count", "agpr": "agpr_count", "sgpr": "sgpr_count",
            "vgpr_spills": "vgpr_spill_count", "sgpr_spills": "sgpr_spill_count",
            "scratch_bytes": "private_segment_fixed_size", "lds_bytes": "group_segment_fixed_size"}

WARP_SIZE = 64          # a wavefront on CDNA (gfx90a, gfx942)


def requested_archs() -> list[str]:
    """The AMD archs ``PALLAS_TRITON_AOT_GPU`` names (``gfx942,gfx90a``), or []."""
    value = os.environ.get("PALLAS_TRITON_AOT_GPU", "")
    archs = [a.strip() for a in value.split(",") if a.strip()]
    return archs if archs and all(a.startswith("gfx") for a in archs) else []


def figures(amdgcn: str) -> dict[str, int]:
    """Registers, spills and scratch of the (one) kernel in an AMDGCN assembly listing."""
    out = {}
    for name, key in _FIGURES.items():
        m = re.search(rf"\.{key}:\s+(\d+)", amdgcn)
        if m is None:
            raise ValueError(f"no .{key} in the AMDGCN assembly (LLVM's metadata changed?)")
        out[name] = int(m.group(1))
    return out


def compile_for_amd(fn, *args, archs=("gfx942",), params=None) -> list[dict]:
    """Compiles every pallas_call inside ``fn(*args)`` for each arch.

    Returns one row per (kernel, arch): ``{"kernel", "arch", "hsaco_bytes", **figures}``.
    """
    from pallas_triton.compile import compile_for_target, kernel_irs_of
    kernels = kernel_irs_of(fn, *args)
    if not kernels:
        raise ValueError(f"no pallas_call inside {fn}")
    rows = []
    for kernel in kernels:
        for arch in archs:
            asm = compile_for_target(kernel, target=("hip", arch), params=params,
                                     warp_size=WARP_SIZE)
            if not asm.get("hsaco"):
                raise RuntimeError(f"Triton produced no HSACO for kernel '{kernel.name}' "
                                   f"on {arch}")
            rows.append({"kernel": kernel.name, "arch": arch, "hsaco_bytes": len(asm["hsaco"]),
                         **figures(asm["amdgcn"])})
    return rows
