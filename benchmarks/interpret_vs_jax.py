"""CPU time of this project's default path against XLA, with JAX's interpreter beside.

    python benchmarks/interpret_vs_jax.py [--pairs N] [--only TEXT] [--no-scaling] [--write]

Every kernel (``cpu_kernels``) is written once against a ``pl`` module and built
with ``pallas_frontend`` (the default CPU path: plain ``pallas_call``, no flags)
and with ``jax.experimental.pallas`` (``interpret=True``); the anchor is the same
math in jax.numpy, compiled by XLA. Ours and XLA are timed paired
(``paired_timing``: alternating order, per-pair ratios, median with quartiles),
next to an A/A control of XLA against a second compiled copy of itself: the
noise floor. JAX's interpreter is timed on its own (it is 10-1000x slower, and
timing it between the others would make their caches cold). First call =
trace + lower + compile of a freshly built call, paired the same way.

The tables are printed; ``--write`` also rewrites their sections of
BENCHMARKS.md (and adds the scaling table unless ``--no-scaling``).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

import jax
import numpy as np
from jax.experimental import pallas as jax_pl

import cpu_kernels as K
import paired_timing as pt
import pallas_frontend as our_pl

ROOT = Path(__file__).resolve().parent.parent
SECTION = "interpret_vs_jax"
# JAX's interpreter is timed once (its warm-up call) where that call is this slow.
JAX_INTERPRET_ONE_CALL_S = 5.0
# ... and not at all here (about 90 s per call on 2 cores; scaling.py extrapolates).
SKIP_JAX_INTERPRET = {"matmul 2048^3 (128-blocks, k on the grid)"}
# A first call is one noisy sample of tens of ms: enough pairs for a stable median.
FIRST_CALL_PAIRS = 15

KERNELS = {
    "vector add 1M (1024-blocks)": lambda: K.vector_add(1 << 20),
    "matmul 512^3 (128-blocks, k on the grid)": lambda: K.matmul(512),
    "matmul 1024^3 (128-blocks, k on the grid)": lambda: K.matmul(1024),
    "matmul 2048^3 (128-blocks, k on the grid)": lambda: K.matmul(2048),
    "row softmax 256x1024 (16 rows)": lambda: K.softmax(256),
    "row softmax 1024x1024 (16 rows)": lambda: K.softmax(1024),
    "row softmax 4096x1024 (16 rows)": lambda: K.softmax(4096),
    "layer norm 4096x1024 (16 rows)": lambda: K.layer_norm(),
    "flash attention fwd (8 heads, 1024, d64)": lambda: K.flash_attention(),
    "flash attention fwd, anchor: plain jnp attention": lambda: K.flash_attention(anchor="plain"),
    "EMA by in-kernel lax.scan (64 x 256 steps x 128)": lambda: K.scan_ema(),
    "cumsum 1M (1024-blocks, sequential grid)": lambda: K.cumsum(1 << 20),
}


def verdict(r: pt.Paired, aa: pt.Paired, same: bool) -> str:
    if same:
        return "parity (same program)"
    lo, hi = aa.quartiles
    band = max(0.05, abs(aa.median - 1) + (hi - lo) / 2)
    if abs(r.median - 1) <= band:
        return "parity"
    return "faster" if r.median < 1 else "slower"


def measure(name, factory, pairs):
    build, ref, args = factory()
    ours, xla = jax.jit(build(our_pl)), jax.jit(ref)
    xla_copy = jax.jit(lambda *a: ref(*a))
    want = np.asarray(jax.block_until_ready(xla(*args)))
    got = np.asarray(jax.block_until_ready(ours(*args)))
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3, err_msg=f"{name}: ours vs XLA")
    jax.block_until_ready(xla_copy(*args))
    same = pt.same_program(ours, xla, args)
    run = pt.paired(ours, xla, args, pairs)
    aa = pt.paired(xla_copy, xla, args, pairs)
    first = pt.paired_first_call(lambda: build(our_pl), lambda: ref, args, FIRST_CALL_PAIRS)
    if name in SKIP_JAX_INTERPRET:
        return {"run": run, "aa": aa, "first": first, "interp": None, "interp_once": False,
                "same": same}
    jfn = jax.jit(build(jax_pl))
    t = time.perf_counter()
    got = np.asarray(jax.block_until_ready(jfn(*args)))     # compiles; a warm-up run
    warm = time.perf_counter() - t
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3,
                               err_msg=f"{name}: JAX interpret vs XLA")
    if warm > JAX_INTERPRET_ONE_CALL_S:   # too slow to repeat: that one call (with compile)
        return {"run": run, "aa": aa, "first": first, "interp": warm, "interp_once": True,
                "same": same}
    single = pt.median_time(jfn, args, 1)
    interp = single if single > 1 else pt.median_time(jfn, args, 3)
    return {"run": run, "aa": aa, "first": first, "interp": interp, "interp_once": False,
            "same": same}


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 2**20:.0f} GiB memory"
    except (OSError, ValueError, IndexError):
        pass
    return (f"{os.cpu_count()} cores{mem}, {cpu}; Python {platform.python_version()}, "
            f"jax {jax.__version__}, pallas_frontend {our_pl.__version__}")


def _q(p: pt.Paired) -> str:
    lo, hi = p.quartiles
    return f"{p.median:.2f}x [{lo:.2f}-{hi:.2f}]"


def table(results) -> str:
    lines = ["| kernel | ours (ms) | XLA (ms) | ours / XLA [IQR] | A/A: XLA / XLA [IQR] | "
             "run time | same XLA program | first call ours / XLA (s) | first call ratio [IQR] | "
             "JAX interpret (ms) | JAX interpret / ours |", "|" + "---|" * 11]
    for name, r in results.items():
        run, aa, first, interp = r["run"], r["aa"], r["first"], r["interp"]
        mark = " (one call, with its compile)" if r["interp_once"] else ""
        jax_ms, jax_ratio = (f"{interp * 1e3:.1f}{mark}", f"{interp / run.a_s:.0f}x") \
            if interp is not None else ("not run (~90 s a call)", "-")
        lines.append(
            f"| {name} | {run.a_s * 1e3:.3f} | {run.b_s * 1e3:.3f} | {_q(run)} | {_q(aa)} | "
            f"{verdict(run, aa, r['same'])} | "
            f"{'yes' if r['same'] else 'no'} | {first.a_s:.3f} / {first.b_s:.3f} | "
            f"{_q(first)} | {jax_ms} | {jax_ratio} |")
    return "\n".join(lines)


def write_section(name: str, text: str) -> None:
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    path = ROOT / "BENCHMARKS.md"
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    section = f"{start}\n{text}\n{end}"
    if start in old and end in old:
        a, b = old.index(start), old.index(end) + len(end)
        new = old[:a] + section + old[b:]
    else:
        new = old.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(new)


def header(title: str, command: str, load_before: str) -> str:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"## {title} ({stamp})\n\n"
            f"Machine: {machine()}. Load average (1, 5, 15 min) at the start: {load_before}; "
            f"at the end: {pt.load_average()}.\n\n`{command}`")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=15, help="timed pairs per kernel")
    p.add_argument("--only", default="", help="run kernels whose name contains this")
    p.add_argument("--no-scaling", action="store_true", help="skip the scaling table")
    p.add_argument("--write", action="store_true",
                   help="rewrite the tables' sections of BENCHMARKS.md")
    a = p.parse_args(argv)
    load = pt.load_average()
    results = {}
    for name, factory in KERNELS.items():
        if a.only and a.only not in name:
            continue
        results[name] = measure(name, factory, a.pairs)
        print(f"  measured {name}: {_q(results[name]['run'])}", file=sys.stderr, flush=True)
    text = (header("CPU: ours vs XLA (paired), JAX Pallas interpret beside",
                   "python benchmarks/interpret_vs_jax.py --write", load) + "\n\n" +
            f"Ratios are medians over {a.pairs} alternating pairs, with quartiles; each sample "
            "times enough back-to-back calls to last a few ms. \"A/A\" runs the same procedure "
            "on XLA against a second compiled copy of itself: ratios inside its band (or within "
            "5%) are called parity, and so is a kernel that XLA compiled to the same program. "
            "\"same XLA program\": XLA compiled ours and the jax.numpy version to the same "
            "optimized HLO (names and metadata aside), so any difference in their times is "
            "noise. First call = trace + lower + compile of a freshly built call with JAX's "
            f"caches cleared ({FIRST_CALL_PAIRS} alternating pairs, median of per-pair "
            "ratios). \"ours\" is plain "
            "`pallas_frontend.pallas_call` (the default CPU path, no flags).\n\n" + table(results))
    print(text)
    sections = [(SECTION, text)]
    if not a.no_scaling and not a.only:
        import scaling
        scale = scaling.run(load)
        print(scale)
        sections.append((scaling.SECTION, scale))
    if a.write:
        for name, body in sections:
            write_section(name, body)


if __name__ == "__main__":
    main()
