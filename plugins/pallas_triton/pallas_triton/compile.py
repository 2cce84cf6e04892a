"""Compile-only: the generated kernel to TTIR/TTGIR/LLIR/PTX/cubin for an explicit GPU target.

Needs no GPU: Triton ships ptxas. Uses ``JITFunction`` directly, so it works
whether or not the process also runs kernels under the interpreter.
"""

from __future__ import annotations

import jax
import numpy as np

from pallas_frontend.backend_api import KernelIR
from pallas_triton.emitters import tl_dtype
from pallas_triton.params import CompilerParams
from pallas_triton.triton_runtime import load_module


def kernel_ir_of(fn, *example_args) -> KernelIR:
    """The KernelIR of the (single) pallas_call inside ``fn(*example_args)``."""
    found = kernel_irs_of(fn, *example_args)
    if len(found) != 1:
        raise ValueError(f"expected exactly one pallas_call in {fn}, found {len(found)}")
    return found[0]


def kernel_irs_of(fn, *example_args) -> list[KernelIR]:
    """The KernelIRs of every pallas_call inside ``fn(*example_args)``, in trace order."""
    from jax.extend.core import jaxprs_in_params
    found = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "pallas_call":
                found.append(eqn.params["kernel"])
            for sub in jaxprs_in_params(eqn.params):
                walk(getattr(sub, "jaxpr", sub))
    walk(jax.make_jaxpr(fn)(*example_args).jaxpr)
    return found


def _pointer_type(dtype) -> str:
    # Triton's signature names: fp32, bf16, i8, u32 (unsigned ints are u<bits>, not ui<bits>)
    name = tl_dtype(dtype)[3:]
    return "*" + {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64",
                  "int1": "i1"}.get(name, name.replace("uint", "u").replace("int", "i"))


# AMD archs with tf32 (xf32) matrix instructions: CDNA3 (MI300) and later
_AMD_TF32_ARCHS = ("gfx94", "gfx95")


def compile_for_target(kernel_or_fn, *example_args, target=("cuda", 90),
                       params: CompilerParams | None = None, warp_size: int = 32) -> dict:
    """Compiles a kernel for ``target`` = (backend, arch), e.g. ("cuda", 80) or ("hip", "gfx942").

    ``kernel_or_fn`` is a ``KernelIR`` or a function containing one pallas_call (then
    ``example_args`` trace it). Returns ``{"source", "ttir", "ttgir", "llir", "ptx"|"amdgcn",
    "cubin"|"hsaco", "metadata"}``.
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    from pallas_triton.generation import _compiler_params, generate_source
    kernel = kernel_or_fn if isinstance(kernel_or_fn, KernelIR) else kernel_ir_of(
        kernel_or_fn, *example_args)
    params = params or _compiler_params(kernel)
    backend_name, arch = target
    if backend_name == "hip" and not str(arch).startswith(_AMD_TF32_ARCHS) and \
            params.dot_input_precision.startswith("tf32"):
        # CDNA2 (gfx90a) and older have no tf32 (xf32) matrix instructions: Triton
        # refuses input_precision='tf32' there; full float32 is what they offer
        import dataclasses
        params = dataclasses.replace(params, dot_input_precision="ieee")
    gen = generate_source(kernel, target="cuda" if backend_name == "cuda" else "rocm",
                          params=params)
    namespace = load_module(gen.source, gen.name)
    fn = namespace[gen.name]
    fn = fn if isinstance(fn, JITFunction) else JITFunction(fn)
    signature = {n: _pointer_type(d) for n, d in zip(gen.arg_names, gen.arg_dtypes)}
    # XLA buffers are at least 16-byte aligned: tell Triton so it can vectorize.
    attrs = {(k,): [["tt.divisibility", 16]] for k in range(len(gen.arg_names))}
    src = ASTSource(fn, signature=signature, constexprs={}, attrs=attrs)
    options = params.triton_options()
    if backend_name == "cuda" and "ptx_version" not in options:
        from pallas_triton.ptx_version import ptx_version_for
        picked = ptx_version_for(int(arch))
        if picked is not None:
            options["ptx_version"] = picked
    compiled = triton.compile(src, target=GPUTarget(backend_name, arch, warp_size),
                              options=options)
    out = {k: v for k, v in compiled.asm.items()}
    out["source"] = gen.source
    out["metadata"] = compiled.metadata
    return out


__all__ = ["compile_for_target", "kernel_ir_of", "kernel_irs_of", "np"]
