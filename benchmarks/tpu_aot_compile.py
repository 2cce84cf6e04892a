"""pallas_tpu AOT compile time for a v5e chip vs JAX's own Pallas TPU, paired.

The same blocked matmul, written once against each API, is traced, lowered
and compiled (libtpu, no TPU needed) with fresh functions each round so no
cache is hit; rounds alternate which side goes first. Prints the median of
the per-pair ratios (ours / JAX) and an A/A control (JAX against itself).

    python benchmarks/tpu_aot_compile.py [--pairs 15] [--n 512]
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import statistics
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5litepod-4")
os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.experimental import pallas as jpl  # noqa: E402
from jax.experimental.pallas import tpu as jpltpu  # noqa: E402

import pallas_frontend as pl  # noqa: E402
import pallas_tpu as pltpu  # noqa: E402
from pallas_tpu import aot  # noqa: E402

import tpu_check_cases  # noqa: E402  (this folder: the matmul both sides compile)


def matmul_program(P, T, n: int, bk: int = 128):
    """A fresh jit-able blocked matmul (k on the grid, f32 accumulator), 128-blocks."""
    return functools.partial(tpu_check_cases.blocked_matmul(P, T), block_shape=(128, 128),
                             block_k=bk)


def compile_seconds(P, T, n: int) -> float:
    s = jax.ShapeDtypeStruct((n, n), jnp.bfloat16)
    fn = matmul_program(P, T, n)
    t0 = time.perf_counter()
    aot.compile_for_tpu(fn, s, s)
    return time.perf_counter() - t0


def paired(a, b, pairs: int) -> tuple[float, float, float]:
    ratios, ta, tb = [], [], []
    for i in range(pairs):
        if i % 2:
            y, x = b(), a()
        else:
            x, y = a(), b()
        ta.append(x)
        tb.append(y)
        ratios.append(x / y)
    return statistics.median(ratios), statistics.median(ta), statistics.median(tb)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=15)
    ap.add_argument("--n", type=int, default=512)
    args = ap.parse_args()
    ours = lambda: compile_seconds(pl, pltpu, args.n)
    jaxs = lambda: compile_seconds(jpl, jpltpu, args.n)
    for _ in range(2):   # warm-up: libtpu load, first-use imports
        ours(), jaxs()
    r, t_ours, t_jax = paired(ours, jaxs, args.pairs)
    aa, _, _ = paired(jaxs, jaxs, args.pairs)
    print(f"# {platform.node()} {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} "
          f"jax {jax.__version__}; v5e AOT (libtpu), matmul n={args.n} bf16, {args.pairs} pairs")
    print(f"ours {t_ours * 1e3:.1f} ms | JAX Pallas {t_jax * 1e3:.1f} ms | "
          f"ours/JAX median ratio {r:.3f} | A/A (JAX/JAX) {aa:.3f}")


if __name__ == "__main__":
    main()
