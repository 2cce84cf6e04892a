"""The two parameter objects a user passes to choose this backend."""

from __future__ import annotations

import dataclasses

import pallas_frontend as pl


@dataclasses.dataclass(frozen=True)
class CompilerParams(pl.CompilerParams):
    """Options for compiling a kernel with Triton (fields of Triton's CUDA/HIP options).

    ``None`` means Triton's default: 4 warps, 3 stages (1 on ROCm).
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

    def triton_options(self) -> dict:
        """The ``options`` dict for ``triton.compile``; unset fields are left to Triton."""
        opts = {"enable_fp_fusion": self.enable_fp_fusion}
        for name in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
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
