"""Compile-only to PTX for sm_80/sm_90 (no GPU needed: Triton bundles ptxas)."""

import jax
import jax.numpy as jnp

import kernels as K
import pallas_triton as pt

TRITON = dict(interpret=pt.InterpretParams())


def ptx_instructions(ptx: str) -> int:
    """Instruction lines: not comments, directives, braces, labels."""
    return sum(1 for line in ptx.splitlines()
               if (s := line.strip()) and not s.startswith(("//", ".", "{", "}", "$", "@@"))
               and not s.endswith(":"))


def _matmul_ir():
    a = jax.ShapeDtypeStruct((256, 256), jnp.float16)
    return pt.kernel_ir_of(lambda x, y: K.matmul(x, y, bm=128, bn=128, bk=64, **TRITON), a, a)


def test_sm90_matmul_uses_wgmma():
    asm = pt.compile_for_target(_matmul_ir(), target=("cuda", 90),
                                params=pt.CompilerParams(num_warps=8, num_stages=3))
    assert "wgmma.mma_async" in asm["ptx"]
    assert ".target sm_90a" in asm["ptx"]
    assert isinstance(asm["cubin"], bytes) and len(asm["cubin"]) > 0


def test_sm80_matmul_uses_mma_sync():
    asm = pt.compile_for_target(_matmul_ir(), target=("cuda", 80),
                                params=pt.CompilerParams(num_warps=8, num_stages=3))
    assert "mma.sync.aligned" in asm["ptx"]
    assert "wgmma" not in asm["ptx"]


def _handwritten(fn, signature, constexprs, divisible):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    attrs = {(k,): [["tt.divisibility", 16]] for k in divisible}
    src = ASTSource(fn, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4}).asm


def test_add_ptx_size_matches_handwritten():
    import ref_kernels
    n, block = 1024 * 63 + 512, 1024          # ragged: the last block is masked
    x = jax.ShapeDtypeStruct((n,), jnp.float32)
    ir = pt.kernel_ir_of(lambda a, b: K.add(a, b, block=block, **TRITON), x, x)
    ours = ptx_instructions(pt.compile_for_target(ir, params=pt.CompilerParams(num_warps=4))["ptx"])
    ref = ptx_instructions(_handwritten(
        ref_kernels.handwritten_add,
        {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
        {"BLOCK": block}, divisible=range(4))["ptx"])
    print(f"add PTX instructions: generated {ours}, hand-written {ref}")
    assert abs(ours - ref) <= 0.1 * ref


def test_softmax_ptx_size_matches_handwritten():
    import ref_kernels
    rows, cols = 128, 781
    x = jax.ShapeDtypeStruct((rows, cols), jnp.float32)
    ir = pt.kernel_ir_of(lambda a: K.softmax(a, **TRITON), x)
    ours = ptx_instructions(pt.compile_for_target(ir, params=pt.CompilerParams(num_warps=4))["ptx"])
    ref = ptx_instructions(_handwritten(
        ref_kernels.handwritten_softmax,
        {"out_ptr": "*fp32", "in_ptr": "*fp32", "in_stride": "i32", "out_stride": "i32",
         "n_cols": "i32", "BLOCK": "constexpr"}, {"BLOCK": 1024}, divisible=range(4))["ptx"])
    print(f"softmax PTX instructions: generated {ours}, hand-written {ref}")
    assert abs(ours - ref) <= 0.1 * ref


def test_compiled_source_is_the_interpreted_source():
    ir = _matmul_ir()
    asm = pt.compile_for_target(ir, target=("cuda", 80))
    assert asm["source"] == pt.generate_source(ir, target="cuda").source
    assert "tl.dot(" in asm["source"] and "for it" in asm["source"]
