"""CPU time of this project's default path vs JAX Pallas interpret vs plain jax.numpy.

    python benchmarks/interpret_vs_jax.py [--reps N] [--no-write]

Every kernel is written once against a ``pl`` module and built twice: with
``pallas_frontend`` (the default CPU path: plain ``pallas_call``, no flags) and
with ``jax.experimental.pallas`` (``interpret=True``). All three versions run in
this process on the same inputs, interleaved, timed as medians of jitted calls
after a warm-up. First-call cost is ``jit(...).lower(...).compile()`` on a
freshly built call. The table is printed and written to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as jax_pl

import pallas_frontend as our_pl

ROOT = Path(__file__).resolve().parent.parent
SECTION_START = "<!-- interpret_vs_jax:start -->"
SECTION_END = "<!-- interpret_vs_jax:end -->"


def _call(pl, kernel, out_shape, grid, in_specs, out_specs):
    kw = {"interpret": True} if pl is jax_pl else {}
    return pl.pallas_call(kernel, out_shape=out_shape, grid=grid, in_specs=in_specs,
                          out_specs=out_specs, **kw)


# --- the kernels: each returns (build(pl) -> fn, jnp_fn, args) --------------------

def vector_add():
    n, b = 1 << 20, 1024
    x, y = _randn(0, (n,)), _randn(1, (n,))

    def build(pl):
        def kernel(x_ref, y_ref, o_ref):
            o_ref[...] = x_ref[...] + y_ref[...]
        spec = pl.BlockSpec((b,), lambda i: (i,))
        return _call(pl, kernel, jax.ShapeDtypeStruct((n,), jnp.float32), (n // b,),
                     [spec, spec], spec)
    return build, lambda x, y: x + y, (x, y)


def matmul():
    m = n = k = 512
    bm = bn = bk = 128
    a, b = _randn(2, (m, k)), _randn(3, (k, n))

    def build(pl):
        def kernel(a_ref, b_ref, o_ref):
            @pl.when(pl.program_id(2) == 0)
            def _():
                o_ref[...] = jnp.zeros_like(o_ref)
            o_ref[...] += jnp.dot(a_ref[...], b_ref[...])
        return _call(pl, kernel, jax.ShapeDtypeStruct((m, n), jnp.float32),
                     (m // bm, n // bn, k // bk),
                     [pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
                      pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j))],
                     pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)))
    return build, lambda a, b: a @ b, (a, b)


def softmax():
    rows, cols, br = 4096, 1024, 16
    x = _randn(4, (rows, cols))

    def build(pl):
        def kernel(x_ref, o_ref):
            v = x_ref[...]
            e = jnp.exp(v - jnp.max(v, axis=1, keepdims=True))
            o_ref[...] = e / jnp.sum(e, axis=1, keepdims=True)
        spec = pl.BlockSpec((br, cols), lambda i: (i, 0))
        return _call(pl, kernel, jax.ShapeDtypeStruct((rows, cols), jnp.float32), (rows // br,),
                     [spec], spec)
    return build, lambda x: jax.nn.softmax(x, axis=1), (x,)


def layer_norm():
    rows, cols, br, eps = 4096, 1024, 16, 1e-5
    x, w, bias = _randn(5, (rows, cols)), _randn(6, (cols,)), _randn(7, (cols,))

    def build(pl):
        def kernel(x_ref, w_ref, b_ref, o_ref):
            v = x_ref[...]
            mean = jnp.mean(v, axis=1, keepdims=True)
            var = jnp.mean((v - mean) ** 2, axis=1, keepdims=True)
            o_ref[...] = (v - mean) * jax.lax.rsqrt(var + eps) * w_ref[...] + b_ref[...]
        row = pl.BlockSpec((br, cols), lambda i: (i, 0))
        vec = pl.BlockSpec((cols,), lambda i: (0,))
        return _call(pl, kernel, jax.ShapeDtypeStruct((rows, cols), jnp.float32), (rows // br,),
                     [row, vec, vec], row)

    def ref(x, w, bias):
        mean = x.mean(1, keepdims=True)
        var = ((x - mean) ** 2).mean(1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + eps) * w + bias
    return build, ref, (x, w, bias)


def flash_attention():
    heads, seq, d, bq, bk = 8, 1024, 64, 128, 128
    q, k, v = (_randn(s, (heads, seq, d)) for s in (8, 9, 10))
    scale = 1.0 / np.sqrt(d)

    def build(pl):
        def kernel(q_ref, k_ref, v_ref, o_ref):
            qb = q_ref[...] * scale

            def body(t, carry):
                m, l, acc = carry
                kb = k_ref[pl.ds(t * bk, bk), :]
                vb = v_ref[pl.ds(t * bk, bk), :]
                s = qb @ kb.T
                m_new = jnp.maximum(m, s.max(axis=1))
                p = jnp.exp(s - m_new[:, None])
                corr = jnp.exp(m - m_new)
                return m_new, l * corr + p.sum(axis=1), acc * corr[:, None] + p @ vb

            init = (jnp.full((bq,), -jnp.inf, jnp.float32), jnp.zeros((bq,), jnp.float32),
                    jnp.zeros((bq, d), jnp.float32))
            _, l, acc = jax.lax.fori_loop(0, seq // bk, body, init)
            o_ref[...] = acc / l[:, None]
        qspec = pl.BlockSpec((None, bq, d), lambda h, i: (h, i, 0))
        kvspec = pl.BlockSpec((None, seq, d), lambda h, i: (h, 0, 0))
        return _call(pl, kernel, jax.ShapeDtypeStruct((heads, seq, d), jnp.float32),
                     (heads, seq // bq), [qspec, kvspec, kvspec], qspec)

    def ref(q, k, v):
        s = jnp.einsum("hqd,hkd->hqk", q * scale, k)
        return jnp.einsum("hqk,hkd->hqd", jax.nn.softmax(s, axis=-1), v)
    return build, ref, (q, k, v)


def cumsum():
    n, b = 1 << 18, 1024
    x = _randn(11, (n,))

    def build(pl):
        # The running total is a second output revisited at every step: a
        # carried state, so the grid axis is sequential.
        def kernel(x_ref, o_ref, total_ref):
            @pl.when(pl.program_id(0) == 0)
            def _():
                total_ref[...] = jnp.zeros_like(total_ref)
            c = jnp.cumsum(x_ref[...]) + total_ref[0]
            o_ref[...] = c
            total_ref[...] = c[-1:]
        return _call(pl, kernel, (jax.ShapeDtypeStruct((n,), jnp.float32),
                                  jax.ShapeDtypeStruct((1,), jnp.float32)), (n // b,),
                     [pl.BlockSpec((b,), lambda i: (i,))],
                     (pl.BlockSpec((b,), lambda i: (i,)), pl.BlockSpec((1,), lambda i: (0,))))
    return (lambda pl: (lambda f: lambda x: f(x)[0])(build(pl)),
            lambda x: jnp.cumsum(x), (x,))


KERNELS = {
    "vector add (1M, 1024-blocks)": vector_add,
    "matmul 512^3 (128-blocks, k axis)": matmul,
    "row softmax 4096x1024 (16 rows)": softmax,
    "layer norm 4096x1024 (16 rows)": layer_norm,
    "flash attention fwd (8h, 1024, d64)": flash_attention,
    "cumsum 256K (1024-blocks, sequential)": cumsum,
}


def _randn(seed, shape):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), jnp.float32)


# --- measurement -------------------------------------------------------------

def _first_call_seconds(make, args):
    """trace + lower + compile of a freshly built call, with JAX's caches empty."""
    jax.clear_caches()
    t = time.perf_counter()
    jax.jit(make()).lower(*args).compile()
    return time.perf_counter() - t


def _time_once(fn, args):
    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - t


def measure(name, factory, reps):
    build, ref, args = factory()
    impls = {"ours": jax.jit(build(our_pl)), "jax_interpret": jax.jit(build(jax_pl)),
             "jnp": jax.jit(ref)}
    outs = {k: np.asarray(jax.block_until_ready(f(*args))) for k, f in impls.items()}
    for k in ("ours", "jax_interpret"):
        np.testing.assert_allclose(outs[k], outs["jnp"], rtol=2e-3, atol=2e-3,
                                   err_msg=f"{name}: {k} disagrees with jax.numpy")
    for f in impls.values():          # a second warm-up call each
        _time_once(f, args)
    times = {k: [] for k in impls}
    for _ in range(reps):
        for k, f in impls.items():    # interleaved
            times[k].append(_time_once(f, args))
    med = {k: statistics.median(v) for k, v in times.items()}
    first = {}
    for _ in range(3):
        for k, pl in (("ours", our_pl), ("jax_interpret", jax_pl)):
            first.setdefault(k, []).append(_first_call_seconds(lambda: build(pl), args))
    med.update({f"first_{k}": statistics.median(v) for k, v in first.items()})
    return med


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


def table(results) -> str:
    head = ("| kernel | ours (ms) | JAX interpret (ms) | jnp (ms) | ours / jnp | "
            "JAX interpret / ours | first call ours (s) | first call JAX interpret (s) |")
    lines = [head, "|" + "---|" * 8]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r['ours'] * 1e3:.3f} | {r['jax_interpret'] * 1e3:.2f} | "
            f"{r['jnp'] * 1e3:.3f} | {r['ours'] / r['jnp']:.2f}x | "
            f"{r['jax_interpret'] / r['ours']:.1f}x | {r['first_ours']:.3f} | "
            f"{r['first_jax_interpret']:.3f} |")
    return "\n".join(lines)


def write_section(text: str) -> None:
    path = ROOT / "BENCHMARKS.md"
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    section = f"{SECTION_START}\n{text}\n{SECTION_END}"
    if SECTION_START in old and SECTION_END in old:
        a, b = old.index(SECTION_START), old.index(SECTION_END) + len(SECTION_END)
        new = old[:a] + section + old[b:]
    else:
        new = old.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(new)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=15, help="timed calls per implementation")
    p.add_argument("--only", default="", help="run kernels whose name contains this")
    p.add_argument("--no-write", action="store_true", help="do not update BENCHMARKS.md")
    a = p.parse_args(argv)
    results = {}
    for name, factory in KERNELS.items():
        if a.only and a.only not in name:
            continue
        results[name] = measure(name, factory, a.reps)
        print(f"  measured {name}", file=sys.stderr, flush=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    text = (f"## CPU interpreter vs JAX Pallas interpret vs jax.numpy ({stamp})\n\n"
            f"Machine: {machine()}.\n\n"
            "`benchmarks/interpret_vs_jax.py`: medians of "
            f"{a.reps} interleaved jitted calls after warm-up, same inputs; first call = "
            "trace + lower + compile of a freshly built call (median of 3). \"ours\" is plain "
            "`pallas_frontend.pallas_call` (the default CPU path, no flags).\n\n" + table(results))
    print(text)
    if not a.no_write and not a.only:
        write_section(text)


if __name__ == "__main__":
    main()
