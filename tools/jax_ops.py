"""Run every kernel JAX ships in ``jax/experimental/pallas/ops/`` under JAX's
Pallas and, with only the Pallas imports swapped, under ours; tabulate.

    python tools/jax_ops.py --out docs/jax-ops.md      # the page, every column (one command)
    python tools/jax_ops.py [--sizes small large] [--only NAME ...]
        [--columns cpu v5e H100 A100] [--jobs 2] [--results FILE.json] [--out PAGE.md]

The copy is made by ``tools/jax_ops_copy.py`` (the import rewriting of
``tools/jax_suite.py``); the calls and inputs are in ``tools/jax_ops_cases.py``.
Column ``cpu``: each row runs on CPU the way JAX's tests do (interpret mode) on
fresh random inputs: JAX's outcome, ours, the max relative difference of ours
from JAX's (forward, and the gradient of the output's sum where the file
defines a VJP), and ours/JAX wall time (best of three compiled calls).
Columns ``v5e``, ``H100``, ``A100``: the same calls compiled for that device
without one (``tools/jax_ops_aot.py``). ``--results`` keeps every row run so
far in a JSON file: a subset run (``--only``/``--columns``) updates its rows
there and the page is written from all of them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# several CPU devices for the collective kernels (all_gather), as tests/conftest.py has
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
# libtpu (the TPU interpret mode imports it) needs to be told it has no TPU
# and JAX's TPU interpret mode runs blocks the chip refuses: ours' chip checks are off
for _k, _v in (("TPU_ACCELERATOR_TYPE", "v5litepod-4"), ("TPU_WORKER_HOSTNAMES", "localhost"),
               ("ALLOW_MULTIPLE_LIBTPU_LOAD", "1"), ("PALLAS_TPU_CHIP_CHECKS", "0")):
    os.environ.setdefault(_k, _v)

import jax  # noqa: E402
import numpy as np  # noqa: E402

import jax_ops_aot  # noqa: E402
import jax_ops_cases  # noqa: E402
import jax_ops_page  # noqa: E402
from jax_ops_copy import jax_ops, ours_ops  # noqa: E402


def _float_argnums(args) -> tuple[int, ...]:
    return tuple(i for i, a in enumerate(args)
                 if hasattr(a, "dtype") and np.issubdtype(np.asarray(a).dtype, np.floating))


def _interpret_mode(case, ours: bool):
    """JAX's TPU tests on CPU: the TPU kernels under force_tpu_interpret_mode
    (Mosaic GPU kernels: force_gpu_interpret_mode)."""
    if case.kind in ("mgpu", "mgpu_multi", "blackwell"):
        if ours:
            import pallas_mgpu as plgpu
        else:
            from jax.experimental.pallas import mosaic_gpu as plgpu
        return plgpu.force_gpu_interpret_mode()
    if case.kind != "tpu" or not case.force:
        return contextlib.nullcontext()
    if ours:
        import pallas_tpu as pltpu
    else:
        from jax.experimental.pallas import tpu as pltpu
    if case.interpret_params:
        return pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(**dict(case.interpret_params)))
    return pltpu.force_tpu_interpret_mode()


def run_side(case, module, args, grad: bool, ours: bool, repeats: int = 3):
    """Outputs (a flat list of float64 arrays) and the best time of ``repeats``
    compiled calls (nan when 0)."""
    with _interpret_mode(case, ours):
        return _run_side(case, module, args, grad, repeats)


def _run_side(case, module, args, grad: bool, repeats: int):
    if grad:
        nums = _float_argnums(args)

        def loss(*xs):
            return sum(jax.numpy.sum(o.astype(np.float32)) for o in
                       jax.tree.leaves(case.call(module, xs)))
        fn = jax.jit(jax.grad(loss, argnums=nums))
    else:
        fn = jax.jit(lambda *xs: case.call(module, xs))
    out = jax.block_until_ready(fn(*args))      # compiles
    dt = float("inf") if repeats else float("nan")
    for _ in range(repeats):    # the best of three compiled calls (a shared machine is noisy)
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        dt = min(dt, time.perf_counter() - t0)
    return [np.asarray(o, np.float64) for o in jax.tree.leaves(out)], dt


def max_rel_diff(ours, theirs) -> float:
    worst = 0.0
    for a, b in zip(ours, theirs):
        scale = max(float(np.max(np.abs(b))) if b.size else 0.0, 1e-30)
        both = np.isfinite(a) & np.isfinite(b)
        if not np.array_equal(np.isfinite(a), np.isfinite(b)):
            return float("inf")
        if both.any():
            worst = max(worst, float(np.max(np.abs(a[both] - b[both]))) / scale)
    return worst


def _outcome(thunk):
    try:
        return "ok", thunk(), ""
    except Exception as e:   # a row records the failure; the table goes on
        return "fail", None, _error_line(e)


def _error_line(e) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    # the copy of the ops tree lives in a fresh temporary directory: name it by its package
    lines = [re.sub(r"\S*/(pf_jax_ops/)", r"\1", ln) for ln in lines]
    line = f"{type(e).__name__}: {lines[0] if lines else ''}"
    if len(lines) > 1 and "Traceback" in lines[0]:    # a host callback's error: its last line
        line += f" ... {lines[-1]}"
    frames = traceback.extract_tb(e.__traceback__)
    if not lines and frames:     # no message: where it was raised
        f = frames[-1]
        line += f"(at {Path(f.filename).name}:{f.lineno} `{(f.line or '').strip()}`)"
    return line[:300]


def _side_in_subprocess(case, size: str, grad: bool, seed: int, ours: bool):
    """One side in a fresh process: for modules that register global state on
    import (a PRNG implementation under a fixed name)."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "side.npz"
        env = {**os.environ, "JAX_PLATFORMS": "cpu"}
        cmd = [sys.executable, str(Path(__file__).resolve()), "--side", case.name, size,
               str(int(grad)), str(seed), str(int(ours)), str(out)]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if r.returncode != 0 or not out.exists():
            said = [ln for ln in r.stderr.splitlines() if ln.startswith("SIDE-ERROR: ")]
            tail = [ln for ln in r.stderr.splitlines() if ln.strip()]
            raise RuntimeError(said[-1][len("SIDE-ERROR: "):] if said else
                               tail[-1] if tail else f"exit status {r.returncode}")
        data = np.load(out)
        n = int(data["n"])
        return [data[f"o{i}"] for i in range(n)], float(data["seconds"])


def _side_main(name, size, grad, seed, ours, out) -> int:
    case = next(c for c in jax_ops_cases.CASES if c.name == name)
    args = case.inputs(np.random.default_rng(int(seed)), size)
    mod = ours_ops().load(case.module) if ours == "1" else jax_ops(case.module)
    try:
        outs, seconds = run_side(case, mod, args, grad == "1", ours == "1")
    except Exception as e:     # the parent reports this line
        print(f"SIDE-ERROR: {_error_line(e)}", file=sys.stderr)
        raise
    np.savez(out, n=len(outs), seconds=seconds, **{f"o{i}": o for i, o in enumerate(outs)})
    return 0


def run_case(case, size: str, grad: bool, seed: int = 0, repeats: int = 3) -> dict:
    """One row: both sides on the same fresh inputs (``repeats``: timed calls)."""
    args = case.inputs(np.random.default_rng(seed), size)
    mod = case.module
    j_status, j_res, j_err = _outcome(lambda: run_side(case, jax_ops(mod), args, grad, False,
                                                       repeats))
    if case.isolate:     # our copy of the module would clash with JAX's in this process
        o_status, o_res, o_err = _outcome(lambda: _side_in_subprocess(case, size, grad, seed,
                                                                      True))
    else:
        o_status, o_res, o_err = _outcome(lambda: run_side(case, ours_ops().load(mod), args,
                                                           grad, True, repeats))
    if case.expect is not None and not grad:     # the known answer, for both sides
        want = [np.asarray(w, np.float64) for w in case.expect(args)]
        if j_res is not None and not max_rel_diff(j_res[0], want) <= case.rtol:
            j_status, j_res, j_err = "wrong", None, "differs from the exact result (NumPy)"
        if o_res is not None and not max_rel_diff(o_res[0], want) <= case.rtol:
            o_status, o_res, o_err = "wrong", None, "differs from the exact result (NumPy)"
    row = dict(name=case.name + (" grad" if grad else ""), size=size, jax=j_status, ours=o_status,
               jax_error=j_err, ours_error=o_err, rel=None, ratio=None)
    if j_res is not None and o_res is not None:
        if len(j_res[0]) != len(o_res[0]):
            row.update(ours="fail", ours_error="a different number of outputs")
        else:
            row["rel"] = max_rel_diff(o_res[0], j_res[0])
            row["ratio"] = o_res[1] / max(j_res[1], 1e-9)
            if not row["rel"] <= case.rtol:
                row.update(ours="wrong", ours_error=f"max rel diff {row['rel']:.2e} > {case.rtol}")
    return row


def rows_for(cases, sizes):
    for case in cases:
        for size in sizes:
            for grad in (False, True) if case.grad else (False,):
                yield run_case(case, size, grad)


def _log(row) -> None:
    print(f"{row['name']:45s} {row['size']:6s} jax={row['jax']:5s} ours={row['ours']:5s} "
          f"rel={row['rel']} ratio={row['ratio']} {row['ours_error'] or row['jax_error']}",
          flush=True)


def _log_cell(target, side, key, cell) -> None:
    name, size, grad = json.loads(key)
    print(f"{target:5s} {side:4s} {name + (' grad' if grad else ''):45s} {size:6s} "
          f"{cell['status']:4s} {cell.get('seconds')} s {cell.get('error', '')}", flush=True)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--side"]:      # one side of an isolated case (see _side_in_subprocess)
        return _side_main(*argv[1:])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="+", default=list(jax_ops_cases.SIZES))
    p.add_argument("--only", nargs="*", help="case names (prefixes) to run")
    p.add_argument("--columns", nargs="+", default=["cpu", *jax_ops_aot.TARGETS],
                   choices=["cpu", *jax_ops_aot.TARGETS])
    p.add_argument("--jobs", type=int, default=2, help="compile-only worker processes at once")
    p.add_argument("--results", type=Path, default=None,
                   help="JSON of every row run so far: updated, and the page written from it")
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    cases = [c for c in jax_ops_cases.CASES
             if not a.only or any(c.name.startswith(o) for o in a.only)]
    results = jax_ops_page.load(a.results)
    full = not a.only and set(a.sizes) == set(jax_ops_cases.SIZES)
    bad = 0
    if "cpu" in a.columns:
        t0 = time.perf_counter()
        rows = []
        for row in rows_for(cases, a.sizes):
            rows.append(row)
            _log(row)
        bad += sum(r["jax"] == "ok" and r["ours"] != "ok" for r in rows)
        jax_ops_page.merge_cpu(results, rows, time.perf_counter() - t0, full)
    targets = [c for c in a.columns if c in jax_ops_aot.TARGETS]
    if targets:
        t0 = time.perf_counter()
        cells = jax_ops_aot.compile_columns(cases, a.sizes, targets, jobs=a.jobs, log=_log_cell)
        bad += sum(c["jax"]["status"] == "ok" and c["ours"]["status"] != "ok"
                   for by_key in cells.values() for c in by_key.values())
        jax_ops_page.merge_aot(results, cells, time.perf_counter() - t0, a.jobs,
                               full and set(targets) == set(jax_ops_aot.TARGETS))
    if a.results is not None:
        jax_ops_page.save(a.results, results)
    if a.out is not None:
        jax_ops_page.write_page(a.out, results)
    return 1 if bad else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(2)
