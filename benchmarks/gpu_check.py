"""One command for the first NVIDIA GPU (H100/H200): numerics and speed of both GPU
backends, written to BENCHMARKS-GPU.md.

    python benchmarks/gpu_check.py [--budget 330] [--repeat 20] [--out BENCHMARKS-GPU.md]
    python benchmarks/gpu_check.py --dry-run [--quick]     # CPU: the same logic, interpret paths

1. numerics: the conformance kernels (``pallas_frontend.testing.kernels``) on
   ``pallas_triton`` and ``pallas_mgpu``, and JAX's GPU ops (our copy of
   ``jax/experimental/pallas/ops/gpu``) on the device, each against an XLA ``jnp``
   reference: max |ours - ref| / max |ref| against a tolerance per dtype.
2. timing: matmul bf16 4096^3, flash attention forward and forward+backward,
   softmax, layer norm: ours-Triton, ours-MGPU, JAX's Pallas (Triton, Mosaic GPU),
   XLA; compile + warm-up, then the median of ``--repeat`` timed batches.
3. the report (date, device kind, versions, commit).

Every row that fails is reported with its error's first line; a global time
budget skips what is left once spent. Without a GPU (and no ``--dry-run``) it
prints ``SKIP: no GPU (...)`` and exits 0."""

from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

START = time.monotonic()
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402


class Budget:
    def __init__(self, seconds: float):
        self.end = START + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


def error_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    line = f"{type(e).__name__}: {lines[0] if lines else ''}"
    frames = traceback.extract_tb(e.__traceback__)
    if not lines and frames:      # no message: say where it was raised
        f = frames[-1]
        line += f"(at {Path(f.filename).name}:{f.lineno} `{(f.line or '').strip()}`)"
    return line[:240]


def rel_error(got, ref) -> float:
    """max |got - ref| / max |ref| over all outputs (inf on a NaN/inf mismatch)."""
    worst = 0.0
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(ref), strict=True):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if a.shape != b.shape or not np.array_equal(np.isfinite(a), np.isfinite(b)):
            return float("inf")
        ok = np.isfinite(b)
        if ok.any():
            scale = max(float(np.max(np.abs(b[ok]))), 1e-30)
            worst = max(worst, float(np.max(np.abs(a[ok] - b[ok]))) / scale)
    return worst


def check(name, backend, fn, args, ref, tol, rows, budget):
    if budget.left() <= 0:
        rows.append((name, backend, "skipped", "", "time budget spent"))
        return
    try:
        got = jax.block_until_ready(jax.jit(fn)(*args))
        with jax.default_matmul_precision("highest"):
            want = jax.block_until_ready(jax.jit(ref)(*args))
        err = rel_error(got, want)
        rows.append((name, backend, "ok" if err <= tol else "FAIL", f"{err:.2e}", f"tol {tol:.0e}"))
    except Exception as e:  # noqa: BLE001  (a failing row is a row, the run goes on)
        rows.append((name, backend, "error", "", error_line(e)))
    print(f"  {rows[-1][1]:<7}{rows[-1][0]:<44}{rows[-1][2]:<8}{rows[-1][3]:<10}{rows[-1][4]}",
          flush=True)


def numerics(dev: bool, quick: bool, budget: Budget, seed: int) -> list[tuple]:
    import gpu_check_cases as C
    rows: list[tuple] = []
    rng = np.random.default_rng(seed)
    for backend in ("triton", "mgpu"):
        try:
            options = C.route(backend, dev)
        except Exception as e:  # noqa: BLE001
            rows.append(("(route)", backend, "error", "", error_line(e)))
            continue
        print(f"conformance kernels on {backend}: {C.route_name(options)}", flush=True)
        if dev and "interpret" in options:    # an interpreter's numbers are no device check
            rows.append(("(route)", backend, "error", "", f"routes to {C.route_name(options)} on a GPU"))
            continue
        for case in C.conformance_cases(quick):
            args = case.inputs(rng)
            try:
                fn = case.build(options)
            except Exception as e:  # noqa: BLE001
                rows.append((case.name, backend, "error", "", error_line(e)))
                continue
            check(case.name, backend, fn, args, case.ref, C.TOL[("float32", case.kind)], rows, budget)
    print("JAX's GPU ops, our copy:", flush=True)
    for case, backend in C.ops_cases():
        if quick and backend == "triton" and case.name not in ("gpu.softmax", "gpu.layer_norm"):
            continue
        args = tuple(jnp.asarray(a) for a in case.inputs(rng, "small" if quick or not dev else "large"))
        # the least precise float operand sets the tolerance (an int8 x bf16 matmul is bf16)
        floats = {str(a.dtype) for a in args if jnp.issubdtype(a.dtype, jnp.floating)}
        dtype = next((d for d in ("bfloat16", "float16") if d in floats), "float32")
        tol = max(case.rtol, C.TOL[(dtype, "dot" if "norm" not in case.name and "softmax"
                                     not in case.name else "reduction")])
        try:
            mod, ref = C.ops_module(case, dev), C.ops_reference(case.name)
        except Exception as e:  # noqa: BLE001
            rows.append((case.name, backend, "error", "", error_line(e)))
            continue
        fwd = lambda *xs, case=case, mod=mod: case.call(mod, xs)  # noqa: E731
        sides = [("", fwd, ref)]
        if case.grad:
            nums = tuple(i for i, a in enumerate(args) if jnp.issubdtype(a.dtype, jnp.floating))
            sides.append((" grad", *(jax.grad(lambda *xs, f=f: sum(
                jnp.sum(o.astype(jnp.float32)) for o in jax.tree.leaves(f(*xs))), argnums=nums)
                for f in (fwd, ref))))
        for suffix, fn, reference in sides:
            with _mgpu_interpret(case.kind == "mgpu" and not dev):
                check(case.name + suffix, backend, fn, args, reference, tol, rows, budget)
    return rows


def lower_for_cuda(rows: list) -> None:
    """--dry-run --lower-cuda: each of our device-path kernels (conformance at its
    size, timed entries at full size) traced and lowered for cuda without a GPU
    (no compile, no launch): what the GPU run would refuse before it starts."""
    import gpu_check_cases as C
    import gpu_check_timing as T
    rng = np.random.default_rng(0)
    jobs = [(c.name, b, lambda c=c, b=b: c.build(C.route(b, True)), c.inputs(rng))
            for b in ("triton", "mgpu") for c in C.conformance_cases(False)]
    jobs += [(bench.name + " / " + src, impl, make, bench.inputs(rng))
             for bench in T.benches(True, tiny=False) for impl, src, make in bench.impls
             if impl.startswith("ours")]
    for name, backend, make, args in jobs:
        structs = [jax.ShapeDtypeStruct(np.shape(a), a.dtype) for a in args]
        try:
            text = jax.jit(make()).trace(*structs).lower(lowering_platforms=("cuda",)).as_text()
            calls = sorted({w.split('"')[0].split("(")[0] for w in text.split("custom_call @")[1:]})
            rows.append((name, backend, "lowers", "", "cuda custom calls: " + ", ".join(calls)))
        except Exception as e:  # noqa: BLE001
            rows.append((name, backend, "refused", "", error_line(e)))
        print(f"  cuda lowering {backend:<12}{name:<60}{rows[-1][2]:<8}{rows[-1][4][:100]}",
              flush=True)


def _mgpu_interpret(on: bool, jax_side: bool = False):
    """Mosaic GPU interpret mode forced (CPU dry run): ours, or JAX's for its own kernels."""
    import contextlib
    if not on:
        return contextlib.nullcontext()
    if jax_side:
        from jax.experimental.pallas import mosaic_gpu as jplgpu
        return jplgpu.force_gpu_interpret_mode()
    import pallas_mgpu
    return pallas_mgpu.force_gpu_interpret_mode()


def seconds_per_call(fn, args, repeat: int):
    """(median seconds per call over ``repeat`` batches, the last output); a batch
    queues enough calls to span >= 20 ms."""
    jax.block_until_ready(fn(*args))                    # compiles
    t0 = time.perf_counter()
    for _ in range(2):
        jax.block_until_ready(fn(*args))
    once = max((time.perf_counter() - t0) / 2, 1e-6)
    inner = int(min(max(0.02 / once, 1), 200))
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = None
        for _ in range(inner):
            out = fn(*args)
        jax.block_until_ready(out)
        times.append((time.perf_counter() - t0) / inner)
    return float(np.median(times)), out


def timing(dev: bool, quick: bool, budget: Budget, repeat: int, seed: int,
           rows: list, saved=lambda: None) -> list[tuple]:
    """(bench, impl, source, metric, value or None, note) rows. On CPU (dry run)
    each entry is built and traced at full size (jax.eval_shape) and run once at
    a tiny size (not with --quick); only XLA's entry is timed there."""
    import gpu_check_timing as T
    rng = np.random.default_rng(seed)
    plans = [(b, None) for b in T.benches(dev, tiny=False)] if dev else \
        list(zip(T.benches(dev, tiny=True), T.benches(dev, tiny=False)))
    for bench, full in plans:
        args = bench.inputs(rng)
        # the full-size inputs' shapes, made once per benchmark (not once per entry:
        # at full size they are hundreds of MB of random numbers)
        structs = None if dev else [jax.ShapeDtypeStruct(a.shape, a.dtype)
                                    for a in full.inputs(np.random.default_rng(0))]
        outs = {}
        for impl, source, make in bench.impls:
            if budget.left() <= 0:
                rows.append((bench.name, impl, source, bench.metric, None, "skipped: time budget spent"))
                continue
            try:
                fn = jax.jit(make())
                if dev:
                    secs, outs[len(rows)] = seconds_per_call(fn, args, repeat)
                    rows.append((bench.name, impl, source, bench.metric,
                                 bench.work / secs * (1e-12 if bench.metric == "TFLOP/s" else 1e-9),
                                 f"{secs * 1e3:.3f} ms"))
                else:
                    full_fn = jax.jit(next(m for i, s, m in full.impls if (i, s) == (impl, source))())
                    with _mgpu_interpret(impl.endswith("MGPU"), impl.startswith("JAX")):
                        jax.eval_shape(full_fn, *structs)
                    value, note = None, "traced at full size"
                    if impl == "XLA" or not quick:    # the timing and ratio code, on CPU
                        with _mgpu_interpret(impl.endswith("MGPU"), impl.startswith("JAX")):
                            secs, outs[len(rows)] = seconds_per_call(fn, args, 3 if impl == "XLA"
                                                                     else 1)
                        value = bench.work / secs * (1e-12 if bench.metric == "TFLOP/s" else 1e-9)
                        note += f"; tiny on CPU {secs * 1e3:.3f} ms"
                    rows.append((bench.name, impl, source, bench.metric, value, note))
            except Exception as e:  # noqa: BLE001
                rows.append((bench.name, impl, source, bench.metric, None, error_line(e)))
            r = rows[-1]
            print(f"  {r[0]:<40}{r[1]:<12}{r[2]:<34}"
                  f"{(f'{r[4]:.4g} {r[3]}' if r[4] is not None else ''):<16}{r[5]}", flush=True)
        xla = [i for i in outs if rows[i][1] == "XLA"]
        for i in outs:     # a fast wrong kernel must not pass for a fast one
            if xla and i not in xla:
                try:
                    err = f"{rel_error(outs[i], outs[xla[0]]):.1e}"
                except Exception as e:  # noqa: BLE001  (outputs of another structure)
                    err = error_line(e)
                rows[i] = (*rows[i][:5], rows[i][5] + f"; err vs XLA {err}")
        del outs
        saved()     # the report so far: a run killed by an outer timeout still leaves it
    return rows


def versions() -> dict:
    from importlib import metadata
    out = {}
    for name in ("jax", "jaxlib", "triton", "jax-cuda12-plugin", "jax-cuda12-pjrt",
                 "jax-cuda13-plugin", "jax-cuda13-pjrt"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def commit() -> str:
    """HEAD, or GPU_CHECK_COMMIT where the copy has no git (the lent machine's)."""
    if os.environ.get("GPU_CHECK_COMMIT"):
        return os.environ["GPU_CHECK_COMMIT"]
    try:
        head = subprocess.run(["git", "-C", str(HERE.parent), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(HERE.parent), "status", "--porcelain", "-uno"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (head or "unknown") + (" (uncommitted changes)" if dirty else "")
    except Exception:  # noqa: BLE001
        return "unknown (no git)"


def report(path: Path, dev: bool, num_rows, time_rows, wall: float) -> None:
    kind = jax.devices()[0].device_kind
    lines = [f"# GPU check ({'measured' if dev else 'CPU dry run: tiny sizes, interpret paths, no GPU figure'})", "",
             f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
             f"- device: {kind} ({jax.devices()[0].platform}, "
             f"{getattr(jax.devices()[0].client, 'platform_version', '?')})",
             "- versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()),
             f"- commit: {commit()}", f"- wall time: {wall:.0f} s",
             "- command: `python benchmarks/gpu_check.py`", "",
             "## Numerics: max |ours - XLA jnp| / max |XLA jnp|", "",
             "| kernel | backend | result | rel. error | note |", "|---|---|---|---|---|"]
    lines += [f"| {n} | {b} | {r} | {e} | {note.replace('|', '/')} |" for n, b, r, e, note in num_rows]
    bad = sum(r[2] not in ("ok", "lowers") for r in num_rows)
    lines += ["", f"{len(num_rows) - bad} of {len(num_rows)} ok.", "",
              "## Timing (median of batches; ratio = this rate / the other's best rate, > 1 is faster)", "",
              "| benchmark | implementation | kernel source | rate | vs XLA | vs JAX same backend | note |",
              "|---|---|---|---|---|---|---|"]
    best = {}
    for b, impl, _, _, v, _ in time_rows:
        if v is not None:
            best[(b, impl)] = max(v, best.get((b, impl), 0.0))
    for b, impl, src, metric, v, note in time_rows:
        jax_same = {"ours-Triton": "JAX-Triton", "ours-MGPU": "JAX-MGPU"}.get(impl)
        ratio = lambda other: (f"{v / best[(b, other)]:.2f}" if v is not None and (b, other)  # noqa: E731
                               in best else "")
        rate = f"{v:.4g} {metric}" if v is not None else ""
        lines.append(f"| {b} | {impl} | {src} | {rate} | {ratio('XLA') if impl != 'XLA' else ''} | "
                     f"{ratio(jax_same) if jax_same else ''} | {note.replace('|', '/')} |")
    path.write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="on CPU: interpret paths, tiny sizes")
    ap.add_argument("--quick", action="store_true", help="fewer cases (for the CI test)")
    ap.add_argument("--budget", type=float, default=330.0, help="seconds for the whole run")
    ap.add_argument("--repeat", type=int, default=20, help="timed batches per row (median)")
    ap.add_argument("--lower-cuda", action="store_true",
                    help="with --dry-run: also lower our device-path kernels for cuda (minutes)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--out", type=Path, default=None,
                    help="report path (default BENCHMARKS-GPU.md on a GPU; none for a dry run)")
    a = ap.parse_args(argv)
    devices = jax.devices()
    dev = devices[0].platform == "gpu"
    if not dev and not a.dry_run:
        print(f"SKIP: no GPU (jax.devices() = {devices})")
        return 0
    if dev and a.dry_run:
        print("note: --dry-run on a GPU machine still runs the interpret paths only")
        dev = False
    seed = a.seed if a.seed is not None else int(np.random.SeedSequence().entropy % 2 ** 32)
    budget = Budget(a.budget)
    print(f"device {devices[0].device_kind}; seed {seed}; budget {a.budget:.0f} s", flush=True)
    # numerics may use up to 40% of the budget; timing gets the rest
    num_rows = numerics(dev, a.quick, Budget(min(a.budget, (time.monotonic() - START) + 0.4 * a.budget)),
                        seed)
    out = a.out or (HERE.parent / "BENCHMARKS-GPU.md" if dev else None)
    time_rows: list[tuple] = []
    if a.lower_cuda and not dev:
        lower_for_cuda(num_rows)

    def saved():
        if out is not None:
            report(out, dev, num_rows, time_rows, time.monotonic() - START)
    saved()
    timing(dev, a.quick, budget, a.repeat, seed, time_rows, saved)
    if out is not None:
        print(f"wrote {out}")
    bad = [r for r in num_rows if r[2] not in ("ok", "lowers")]
    print(f"numerics: {len(num_rows) - len(bad)} of {len(num_rows)} ok; timing rows: "
          f"{sum(r[4] is not None for r in time_rows)} of {len(time_rows)} measured; "
          f"{time.monotonic() - START:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
