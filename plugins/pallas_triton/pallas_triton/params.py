"""The two parameter objects a user passes to choose this backend."""

from __future__ import annotations

import dataclasses
import numbers

import pallas_frontend as pl


MAX_NUM_WARPS = 32        # 1024 threads per block on NVIDIA GPUs (16 wavefronts of 64 on AMD)
MAX_NUM_CTAS = 16         # the largest (non-portable) thread-block cluster on sm_90
MAX_REGISTERS = 255       # registers a PTX thread may use
MIN_COMPUTE_CAPABILITY = 70
MIN_PTX_VERSION = 60
DOT_INPUT_PRECISIONS = ("tf32", "tf32x3", "ieee")


def _check_count(field, value, low, high, *, power_of_two, why, example):
    """Refuses a bad integer option of CompilerParams, naming the field, the rule and the fix."""
    if value is None:
        return
    rule = (f"a power of two from {low} to {high}" if power_of_two
            else f"an integer >= {low}" if high is None else f"an integer from {low} to {high}")
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"pallas_triton.CompilerParams.{field} must be {rule} or None, got "
                        f"{value!r} ({type(value).__name__}). Pass e.g. {field}={example}.")
    ok = value >= low and (high is None or value <= high) and (
        not power_of_two or value & (value - 1) == 0)
    if not ok:
        raise ValueError(f"pallas_triton.CompilerParams({field}={value!r}): {field} must be {rule} "
                         f"({why}). Pass e.g. {field}={example}, or leave it None for "
                         f"Triton's default.")


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

    def __post_init__(self):
        # Triton takes these unchecked and fails (or hangs) only when it compiles or launches.
        _check_count("num_warps", self.num_warps, 1, MAX_NUM_WARPS, power_of_two=True,
                     why=f"a program runs 32 x num_warps threads, at most "
                         f"{32 * MAX_NUM_WARPS} on a GPU", example=4)
        _check_count("num_stages", self.num_stages, 1, None, power_of_two=False,
                     why="the software pipeline keeps that many copies of each loop's loads in "
                         "flight; 1 means no pipelining", example=3)
        _check_count("num_ctas", self.num_ctas, 1, MAX_NUM_CTAS, power_of_two=False,
                     why="the CTAs of one thread-block cluster (sm_90 and newer)", example=1)
        _check_count("maxnreg", self.maxnreg, 1, MAX_REGISTERS, power_of_two=False,
                     why="ptxas' cap on registers per thread", example=128)
        _check_count("compute_capability", self.compute_capability, MIN_COMPUTE_CAPABILITY,
                     None, power_of_two=False,
                     why="the NVIDIA GPU generation as major * 10 + minor, e.g. 80 for an "
                         "A100, 90 for an H100", example=90)
        _check_count("ptx_version", self.ptx_version, MIN_PTX_VERSION, None, power_of_two=False,
                     why="the PTX ISA version as major * 10 + minor, e.g. 84 for PTX 8.4",
                     example=84)
        if self.dot_input_precision not in DOT_INPUT_PRECISIONS:
            raise ValueError(
                f"pallas_triton.CompilerParams(dot_input_precision={self.dot_input_precision!r}): "
                f"dot_input_precision must be one of {', '.join(map(repr, DOT_INPUT_PRECISIONS))} "
                "(how float32 dots that are not Precision.HIGHEST multiply). Pass e.g. "
                "dot_input_precision='ieee'.")

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
