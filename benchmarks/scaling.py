"""How run time grows with problem size: ours, XLA and JAX's interpreter.

    python benchmarks/scaling.py

Vector add for N = 2^12 .. 2^24 (1024-element blocks) and the blocked matmul
(128-blocks, k on the grid) for n = 128 .. 2048. Ours and XLA are timed paired
(``paired_timing``); JAX's interpreter alone, and only while one call stays
under a few seconds (its time grows with the number of grid points; the next
size is skipped once the extrapolated call would exceed the limit). The growth
exponent is the least-squares slope of log(time) against log(size).
"""

from __future__ import annotations

import sys

import jax
import numpy as np
from jax.experimental import pallas as jax_pl

import cpu_kernels as K
import paired_timing as pt
import pallas_frontend as our_pl

SECTION = "scaling"
PAIRS = 7
JAX_INTERPRET_MAX_S = 4.0

SERIES = {
    "vector add, N elements": ("N", [1 << k for k in range(12, 25, 2)], K.vector_add),
    "matmul n^3, k on the grid": ("n", [128, 256, 512, 1024, 2048], K.matmul),
}


def _exponent(sizes, times) -> str:
    pts = [(s, t) for s, t in zip(sizes, times) if t is not None]
    if len(pts) < 2:
        return "-"
    x = np.log([s for s, _ in pts])
    y = np.log([t for _, t in pts])
    return f"{np.polyfit(x, y, 1)[0]:.2f}"


def series(label, sizes, factory):
    rows, ours_t, xla_t, jax_t = [], [], [], []
    last_jax = None
    for i, size in enumerate(sizes):
        build, ref, args = factory(size)
        ours, xla = jax.jit(build(our_pl)), jax.jit(ref)
        jax.block_until_ready(ours(*args))
        jax.block_until_ready(xla(*args))
        run = pt.paired(ours, xla, args, PAIRS)
        interp = None
        growth = (sizes[i] / sizes[i - 1]) ** (3 if label == "n" else 1) if i else 1
        if last_jax is None and i > 0:
            pass          # already skipped at a smaller size
        elif last_jax is None or last_jax * growth <= JAX_INTERPRET_MAX_S:
            jfn = jax.jit(build(jax_pl))
            jax.block_until_ready(jfn(*args))
            interp = pt.median_time(jfn, args, 1 if (last_jax or 0) * growth > 1 else 3)
        last_jax = interp
        ours_t.append(run.a_s)
        xla_t.append(run.b_s)
        jax_t.append(interp)
        rows.append((size, run, interp))
        print(f"  scaling {label}={size}: {run.median:.2f}x", file=sys.stderr, flush=True)
    return rows, (_exponent(sizes, ours_t), _exponent(sizes, xla_t), _exponent(sizes, jax_t))


def run(load_before: str | None = None) -> str:
    from interpret_vs_jax import header
    out = [header("CPU scaling: ours, XLA, JAX Pallas interpret",
                  "python benchmarks/scaling.py (also run by interpret_vs_jax.py)",
                  load_before or pt.load_average()), ""]
    for title, (label, sizes, factory) in SERIES.items():
        rows, (e_ours, e_xla, e_jax) = series(label, sizes, factory)
        out += [f"**{title}** (growth exponent of time in {label}: ours {e_ours}, XLA {e_xla}, "
                f"JAX interpret {e_jax})", "",
                f"| {label} | ours (ms) | XLA (ms) | ours / XLA [IQR] | JAX interpret (ms) |",
                "|---|---|---|---|---|"]
        for size, r, interp in rows:
            lo, hi = r.quartiles
            jax_ms = f"{interp * 1e3:.2f}" if interp is not None else \
                f"skipped (> {JAX_INTERPRET_MAX_S:.0f} s extrapolated)"
            out.append(f"| {size} | {r.a_s * 1e3:.3f} | {r.b_s * 1e3:.3f} | "
                       f"{r.median:.2f}x [{lo:.2f}-{hi:.2f}] | {jax_ms} |")
        out.append("")
    return "\n".join(out).rstrip()


if __name__ == "__main__":
    print(run())
