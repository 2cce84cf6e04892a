"""The Triton-interpreter path (``interpret=pallas_triton.InterpretParams()``) on CPU:
generated kernels against hand-written Triton under the same interpreter, paired.

Rows:
- add 1M f32: the generated kernel vs a hand-written ``@triton.jit`` add (both under
  Triton's interpreter over the same NumPy buffers; launch overhead excluded);
- matmul 256^3 f32: the generated kernel vs a hand-written one, and how much of it is
  Triton's interpreter ``tl.dot`` (timed alone against ``numpy.matmul`` on the blocks);
- softmax 1000x256 f32: a whole pallas_call through the Triton interpreter path.

Timing: ours and the baseline alternate (A B B A ...), the median of per-pair ratios is
reported beside an A/A control (the baseline against itself): the noise floor.
Usage: python benchmarks/triton_interpret.py [--pairs N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402

import pallas_triton as pt  # noqa: E402
from pallas_triton import triton_runtime  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "plugins", "pallas_triton", "tests"))
import kernels as K  # noqa: E402

HANDWRITTEN = '''
import triton
import triton.language as tl


@triton.jit
def add(x_ptr, y_ptr, out_ptr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < N
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=inside) + tl.load(y_ptr + offs, mask=inside),
             mask=inside)


@triton.jit
def matmul(a_ptr, b_ptr, out_ptr):
    rows = tl.program_id(0) // (NN // BN) * BM + tl.arange(0, BM)
    cols = tl.program_id(0) % (NN // BN) * BN + tl.arange(0, BN)
    acc = tl.full((BM, BN), 0.0, tl.float32)
    for k in range(0, KK, BK):
        ks = k + tl.arange(0, BK)
        a = tl.load(a_ptr + rows[:, None] * KK + ks[None, :])
        b = tl.load(b_ptr + ks[:, None] * NN + cols[None, :])
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(out_ptr + rows[:, None] * NN + cols[None, :], acc)
'''


def handwritten(constants: dict) -> dict:
    src = "\n".join(f"{k} = tl.constexpr({v})" for k, v in constants.items())
    source = HANDWRITTEN.replace("import triton.language as tl\n",
                                 "import triton.language as tl\n" + src + "\n", 1)
    return triton_runtime.interpreted(triton_runtime.load_module(source, "handwritten"))


def generated(fn, *args):
    """(interpreted kernel, programs) of the single pallas_call in ``fn(*args)``."""
    ir = pt.kernel_ir_of(fn, *args)
    gen = pt.generate_source(ir, target="interpret", params=pt.CompilerParams(
        dot_input_precision="ieee"))
    ns = triton_runtime.interpreted(triton_runtime.load_module(gen.source, gen.name))
    return ns[gen.name], gen.num_programs


def launch(kernel, programs, buffers):
    triton_runtime.run_interpreted(kernel, programs, buffers)


def seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def paired(ours, base, pairs: int):
    """Median per-pair ratio ours/base and the A/A ratio base/base, alternating order."""
    ours(), base()                                 # warm both
    ratios, control, t_ours, t_base = [], [], [], []
    for k in range(pairs):
        if k % 2:
            a, b, c = seconds(ours), seconds(base), seconds(base)
        else:
            b, a, c = seconds(base), seconds(ours), seconds(base)
        ratios.append(a / b)
        control.append(c / b)
        t_ours.append(a)
        t_base.append(b)
    return (float(np.median(t_ours)), float(np.median(t_base)), float(np.median(ratios)),
            float(np.median(control)))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=7)
    pairs = parser.parse_args().pairs
    rng = np.random.default_rng(0)
    print(f"Triton interpreter path, {jax.devices()[0].device_kind}, triton "
          f"{__import__('triton').__version__}, {time.strftime('%Y-%m-%d')}")
    print(f"{'row':<34}{'ours ms':>10}{'base ms':>10}{'ours/base':>11}{'A/A':>7}")

    n, block = 1 << 20, 1024
    x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    gen_add, programs = generated(
        lambda a, b: K.add(a, b, block=block, interpret=pt.InterpretParams()), x, y)
    hw = handwritten({"BLOCK": block, "N": n})
    out1, out2 = np.empty_like(x), np.empty_like(x)
    row = paired(lambda: launch(gen_add, programs, [x, y, out1]),
                 lambda: launch(hw["add"], programs, [x, y, out2]), pairs)
    np.testing.assert_allclose(out1, out2)
    print(f"{'add 1M f32 (block 1024)':<34}{row[0] * 1e3:>10.1f}{row[1] * 1e3:>10.1f}"
          f"{row[2]:>11.2f}{row[3]:>7.2f}")

    m = 256
    a, b = (rng.standard_normal((m, m)).astype(np.float32) for _ in range(2))
    gen_mm, programs = generated(
        lambda p, q: K.matmul(p, q, bm=64, bn=64, bk=64, interpret=pt.InterpretParams()), a, b)
    hw = handwritten({"BM": 64, "BN": 64, "BK": 64, "NN": m, "KK": m})
    o1, o2 = np.empty((m, m), np.float32), np.empty((m, m), np.float32)
    row = paired(lambda: launch(gen_mm, programs, [a, b, o1]),
                 lambda: launch(hw["matmul"], programs, [a, b, o2]), max(3, pairs // 2))
    np.testing.assert_allclose(o1, o2, rtol=1e-4, atol=1e-4)
    print(f"{'matmul 256^3 f32 (64x64x64)':<34}{row[0] * 1e3:>10.1f}{row[1] * 1e3:>10.1f}"
          f"{row[2]:>11.2f}{row[3]:>7.2f}")

    # Where the matmul time goes: Triton's interpreter dot vs NumPy on the same blocks.
    dot_src = '''
import triton
import triton.language as tl


@triton.jit
def dots(a_ptr, b_ptr, out_ptr):
    r = tl.arange(0, 64)
    a = tl.load(a_ptr + r[:, None] * 64 + r[None, :])
    b = tl.load(b_ptr + r[:, None] * 64 + r[None, :])
    acc = tl.dot(a, b, input_precision="ieee")
    for _ in range(63):
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(out_ptr + r[:, None] * 64 + r[None, :], acc)
'''
    dots = triton_runtime.interpreted(triton_runtime.load_module(dot_src, "dots"))["dots"]
    blk_a, blk_b, blk_o = a[:64, :64].copy(), b[:64, :64].copy(), np.empty((64, 64), np.float32)
    t_interp = min(seconds(lambda: launch(dots, 1, [blk_a, blk_b, blk_o])) for _ in range(3))
    t_numpy = min(seconds(lambda: [blk_a @ blk_b for _ in range(64)]) for _ in range(3))
    print(f"{'64 x tl.dot 64^3 (interpreter)':<34}{t_interp * 1e3:>10.1f}{t_numpy * 1e3:>10.1f}"
          f"{t_interp / t_numpy:>11.1f}{'':>7}   base = numpy.matmul")

    x = rng.standard_normal((1000, 256)).astype(np.float32)
    f = jax.jit(lambda v: K.softmax(v, interpret=pt.InterpretParams()))
    jax.block_until_ready(f(x))
    t = float(np.median([seconds(lambda: jax.block_until_ready(f(x))) for _ in range(3)]))
    print(f"{'softmax 1000x256 f32 (pallas_call)':<34}{t * 1e3:>10.1f}{'':>10}{'':>11}{'':>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
