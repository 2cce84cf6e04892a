"""Hand-written Triton kernels: the baseline the generated code is measured against."""

import triton
import triton.language as tl


@triton.jit
def handwritten_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    start = tl.program_id(0) * BLOCK
    offs = start + tl.arange(0, BLOCK)
    inside = offs < n
    total = tl.load(x_ptr + offs, mask=inside) + tl.load(y_ptr + offs, mask=inside)
    tl.store(out_ptr + offs, total, mask=inside)


@triton.jit
def handwritten_softmax(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    x = tl.load(in_ptr + row * in_stride + cols, mask=inside, other=-float("inf")).to(tl.float32)
    shifted = x - tl.max(x, axis=0)
    num = tl.exp(shifted)
    tl.store(out_ptr + row * out_stride + cols, num / tl.sum(num, axis=0), mask=inside)
