"""The two parameter objects a user passes to choose this backend."""

from __future__ import annotations

import dataclasses

import pallas_frontend as pl


@dataclasses.dataclass(frozen=True)
class CompilerParams(pl.CompilerParams):
    """Options for compiling a kernel with Triton (fields of Triton's CUDA/HIP options).

    ``None`` means Triton's default: 4 warps, 3 stages (1 on ROCm).
    What reaches a GPU launch (XLA's Triton custom call): ``num_warps``,
    ``num_stages``, ``debug`` and the TTIR (``dot_input_precision`` is in it).
    XLA recompiles the TTIR with its own Triton, so ``num_ctas``, ``maxnreg``
    and ``enable_fp_fusion`` apply to ``compile_for_target`` only.
    ``compute_capability`` (e.g. 80) / ``rocm_arch`` (e.g. "gfx942") name the
    GPU to lower for when neither a device nor a compile-only mesh says it.
    ``ptx_version`` overrides the PTX ISA that ``compile_for_target`` writes
    (default: the newest that every local ptxas accepts).
    ``dot_input_precision`` applies to float32 ``dot``s whose JAX precision is
    not ``HIGHEST`` ("tf32", "tf32x3" or "ieee"); ``HIGHEST`` always uses "ieee".
    """
    BACKEND = "triton"
    num_warps: int | None = None
    num_stages: int | None = None
    num_ctas: int | None = None
    maxnreg: int | None = None
    enable_fp_fusion: bool = True
    dot_input_precision: str = "tf32"
    debug: bool = False
    compute_capability: int | None = None
    rocm_arch: str | None = None
    ptx_version: int | None = None

    def triton_options(self) -> dict:
        """The ``options`` dict for ``triton.compile``; unset fields are left to Triton."""
        opts = {"enable_fp_fusion": self.enable_fp_fusion}
        for name in ("num_warps", "num_stages", "num_ctas", "maxnreg", "ptx_version"):
            value = getattr(self, name)
            if value is not None:
                opts[name] = value
        if self.debug:
            opts["debug"] = True
        return opts


@dataclasses.dataclass(frozen=True)
class InterpretParams:
    """Run the generated Triton kernel under Triton's interpreter on host buffers.

    Works on any JAX platform (the kernel runs on the host behind
    ``jax.pure_callback``). Unwritten output elements read as NaN (floats) or
    the lowest integer, as in the frontend's reference interpreter.
    """
    compiler_params: CompilerParams | None = None
