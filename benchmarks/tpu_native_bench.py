"""The TPU table, natively: the project installed on the TPU host, one process.

For every kernel of ``benchmarks/tpu_check_cases.py`` (the rows of BENCHMARKS.md's
TPU table): ours (pallas_tpu), JAX's Pallas and XLA on the same device arrays,
the error against NumPy float64, ours = JAX bit for bit, the time per call by
pallas_tpu's ``seconds_per_call`` hook (the device loop of
``pallas_frontend/device_timing.py``). Kernels with launch parameters are then
tuned by ``pl.autotune`` live, over ``pallas_tpu.tuning_spaces``' generated
space (cache keyed by the device kind); flash attention forward, forward +
backward and the 8192^3 matmul also over a wide grid, in chunks while time is
left, so the report says how close the space's pick is to the wide grid's best.

    python benchmarks/tpu_native_bench.py --out DIR            # on the chip (tools/tpu_native.py run --parts bench)
    python benchmarks/tpu_native_bench.py --out DIR --dry-run  # CPU, tiny sizes, TPU interpret modes
    python benchmarks/tpu_check.py --results DIR/bench.json --write   # here: BENCHMARKS.md

``DIR/bench.json`` is rewritten after every kernel: a run cut short keeps what
it finished. Python 3.11 syntax (the chip host's).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "tools")]

START = time.monotonic()


def say(text):
    print(f"[{time.monotonic() - START:6.1f} s] {text}", flush=True)


# --- the kernels tuned, beyond the table's fixed rows -----------------------------------

def _flash_setup(cases, size, backward):
    import jax.numpy as jnp
    from pallas_tpu import tuning_spaces
    ours = cases._ops("tpu.flash_attention")[0]
    b, h, s, d = (2, 8, 2048, 128) if size == "full" else (1, 2, 256, 128)
    kw = dict(causal=False, sm_scale=d ** -0.5)
    if backward:
        def fn(q, k, v, do, *, block_sizes):
            return cases._vjp(functools.partial(ours.flash_attention, block_sizes=block_sizes,
                                                **kw))(q, k, v, do)
    else:
        fn = functools.partial(ours.flash_attention, **kw)
    smallest = 256 if size == "full" else 128

    def space(limit, fwd=None):
        return tuning_spaces.flash_attention(b, h, s, s, d, jnp.bfloat16,
                                             block_sizes_type=ours.BlockSizes,
                                             backward=backward, limit=limit, fwd=fwd,
                                             smallest=smallest)

    def wide(fwd=None):
        from pallas_frontend import tile_sizes
        qs = tile_sizes(s, 128, smallest=smallest)
        ks = tile_sizes(s, 128, smallest=min(512, s))
        params = ({"block_q": qs, "block_k_major": ks, "block_k": qs} if fwd is None else
                  {k: [fwd[k]] for k in ("block_q", "block_k_major", "block_k")})
        if backward:
            params |= {"bwd_q": [q for q in qs if q <= 1024], "bwd_k_major": ks,
                       "bwd_k": [q for q in qs if q <= 1024]}
        one = space(1, fwd)         # the config maker of the generated space
        return _wide_from(params, one, backward)
    return fn, space, wide


def _wide_from(params, one, backward):
    """Every combination the kernel's rules allow (no VMEM estimate, no limit)."""
    from pallas_frontend import search_space

    def check(p):
        if p["block_k_major"] % p["block_k"]:
            return "block_k does not divide block_k_major"
        if backward and p["bwd_k_major"] % p["bwd_k"]:
            return "bwd_k does not divide bwd_k_major"
        return None
    blocks = type(one[0]["block_sizes"])

    def config(p):
        bwd = (p["bwd_q"], p["bwd_k_major"], p["bwd_k"]) if backward else (
            p["block_q"], p["block_k_major"], p["block_k"])
        return {"block_sizes": blocks(
            block_q=p["block_q"], block_k_major=p["block_k_major"], block_k=p["block_k"],
            block_b=1, block_q_major_dkv=bwd[0], block_k_major_dkv=bwd[1], block_k_dkv=bwd[2],
            block_q_dkv=bwd[0], block_k_major_dq=bwd[1], block_k_dq=bwd[2], block_q_dq=bwd[0])}
    return search_space(params, check=check, config=config)


def tuned_kernels(cases, size):
    """Case name -> what to tune: fn(*inputs, **config), the generated space, the
    wide grid (or None), the baseline config and what the baseline is."""
    import jax.numpy as jnp
    from pallas_frontend import search_space, tile_sizes
    from pallas_tpu import tuning_spaces
    full = size == "full"
    out = {}
    for backward, name in ((False, "ops.tpu.flash_attention"),
                           (True, "ops.tpu.flash_attention.bwd")):
        fn, space, wide = _flash_setup(cases, size, backward)
        default = {"block_sizes": cases._flash_blocks(cases._ops("tpu.flash_attention")[0])}
        out[name] = dict(fn=fn, space=space, wide=wide, baseline=default,
                         baseline_label="128 every block", baseline_kind="JAX's default",
                         side_is_baseline=True)
    matmul = cases._ops("tpu.matmul")[0].matmul
    n = 8192 if full else 256
    small = 256 if full else 128

    def mm_wide(**extra):
        sizes = tile_sizes(n, 128, smallest=512 if full else 128, largest=2048)
        return search_space({"bm": sizes, "bn": sizes, "bk": tile_sizes(n, 128, smallest=small,
                                                                          largest=2048)},
                            config=lambda p: {"block_shape": (p["bm"], p["bn"]),
                                              "block_k": p["bk"]} | extra)
    out[f"ops.tpu.matmul {n}^3 bf16 block {512 if full else 128}x{512 if full else 128}x"
        f"{512 if full else 128}"] = dict(
        fn=matmul, wide=mm_wide,
        space=lambda limit, fwd=None: tuning_spaces.matmul(n, n, n, jnp.bfloat16, limit=limit,
                                                           smallest=small),
        baseline={"block_shape": (512, 512) if full else (128, 128),
                  "block_k": 512 if full else 128},
        baseline_label="512x512x512" if full else "128x128x128",
        baseline_kind="ours' choice (JAX's matmul has no default block)", side_is_baseline=True)
    raised = cases.RAISED_VMEM
    block = (1024, 1024, 512) if full else (128, 128, 128)
    out[f"matmul {n}^3 bf16, VMEM limit {raised >> 20} MiB, block {'x'.join(map(str, block))}"] = dict(
        fn=cases.blocked_matmul(*cases.pallas_modules("ours")),
        wide=functools.partial(mm_wide, vmem_limit_bytes=raised),
        # at 8192^3 a block edge under 512 is 4x the grid steps (512^3 blocks already
        # take 1.27x XLA's time on v5e): the floor keeps the space to what a chip
        # session can time (53 candidates)
        space=lambda limit, fwd=None: tuning_spaces.matmul(n, n, n, jnp.bfloat16, limit=limit,
                                                           smallest=512 if full else small,
                                                           vmem_limit_bytes=raised),
        baseline={"block_shape": block[:2], "block_k": block[2], "vmem_limit_bytes": raised},
        baseline_label="x".join(map(str, block)),
        baseline_kind="ours' choice (JAX's matmul's best within the default 16 MiB)",
        side_is_baseline=True)
    dims = (16, 32, 8, 128, 16, 128) if full else (2, 8, 2, 128, 16, 8)
    paged = cases._ops("tpu.paged_attention.paged_attention_kernel")[0].paged_attention
    out["ops.tpu.paged_attention"] = dict(
        fn=paged, wide=None,
        space=lambda limit, fwd=None: tuning_spaces.paged_attention(
            dims[5], dims[4], dims[3], jnp.bfloat16, limit=limit,
            tokens=(128, 4096) if full else (16, 4096)),
        baseline={"pages_per_compute_block": 4}, baseline_label="4 pages a block",
        baseline_kind="ours' choice (JAX's paged attention has no default)",
        side_is_baseline=True)
    m, k, nn = (8192, 2048, 2048) if full else (256, 256, 256)
    gmm = cases._ops("tpu.megablox.gmm")[0].gmm
    out["ops.tpu.megablox.gmm"] = dict(
        fn=gmm, wide=None,
        space=lambda limit, fwd=None: tuning_spaces.gmm(m, k, nn, jnp.bfloat16, limit=limit),
        baseline={"tiling": (128, 128, 128)}, baseline_label="128x128x128",
        baseline_kind="JAX's default", side_is_baseline=True)
    return out


# --- running -------------------------------------------------------------------------------

def _reference(case, args):
    import numpy as np
    import tpu_check_refs
    kind, _, name = case.ref.rpartition(":")
    if kind == "conformance":
        from pallas_frontend.testing import kernels
        module = kernels
    else:
        module = tpu_check_refs
    result = getattr(module, name)(*[np.asarray(a) for a in args], **case.ref_kwargs)
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _short(params):
    return "/".join(str(v) for v in params.values())


def _trials(tuned, key, space):
    """label -> {seconds | error, params}: every candidate of a tuner's last run."""
    rows = {}
    for trial in tuned.trials.get(key, []):
        if trial.error.startswith("pruned: "):
            rows[_short(trial.config)] = {"pruned": trial.error[8:]}
            continue
        params = space.params_of(trial.config)
        cell = {"seconds": trial.seconds} if trial.seconds is not None else {
            "error": trial.error[:300]}
        rows[_short(params)] = cell | {"params": dict(params)}
    return rows


def autotune_row(pl, spec, args, out, budget_left, dry_run, fwd=None):
    """pl.autotune live over the generated space, then the wide grid in chunks."""
    space = spec["space"](2 if dry_run else None, fwd)
    tuned = pl.autotune(spec["fn"], configs=space, name=f"tpu_native_bench.{out['name']}",
                        cache=out["cache"], measure=True)
    began = time.monotonic()
    tuned(*args)                       # the first call on the chip measures: live
    key = tuned.cache_key(*args)
    row = {"space": _trials(tuned, key, space), "space_seconds": time.monotonic() - began,
           "pick": _short(space.params_of(tuned.best_config(*args))),
           "pick_params": dict(space.params_of(tuned.best_config(*args))),
           "device_kind_key": json.loads(key)["device_kind"]}
    say(f"  autotune: {len(space)} candidates, {len(space.pruned)} pruned, pick {row['pick']} "
        f"in {row['space_seconds']:.0f} s")
    if spec["wide"] is None:
        return row
    wide = spec["wide"](fwd) if fwd is not None else spec["wide"]()
    seen = {label for label, cell in row["space"].items() if "pruned" not in cell}
    todo = [(c, p) for c, p in zip(wide.configs, wide.params) if _short(p) not in seen]
    todo.sort(key=lambda cp: _fits(space, cp[1]))      # estimated to fit VMEM first
    row["wide"], row["wide_total"] = {}, len(todo)
    began = time.monotonic()
    chunk = 2 if dry_run else 6
    for start in range(0, min(len(todo), 2 if dry_run else len(todo)), chunk):
        if budget_left() < 30 or time.monotonic() - began > WIDE_SHARE * budget_left.total:
            row["wide_cut"] = f"time budget: {start} of {len(todo)} wide-grid candidates run"
            say(f"  wide grid cut: {row['wide_cut']}")
            break
        part = todo[start:start + chunk]
        piece = type(space)([c for c, _ in part], [p for _, p in part], ())
        wide_tuned = pl.autotune(spec["fn"], configs=piece, measure=True, cache=False,
                                 name=f"tpu_native_bench.{out['name']}.wide{start}")
        try:
            wide_tuned.tune(*args)
        except RuntimeError as error:      # every candidate of the chunk failed
            say(f"  wide chunk {start}: {str(error).splitlines()[0][:200]}")
        row["wide"] |= _trials(wide_tuned, wide_tuned.cache_key(*args), piece)
        say(f"  wide grid: {len(row['wide'])} of {len(todo)} run")
    return row


# The most of the run's budget one wide grid may take (three kernels have one).
WIDE_SHARE = 0.2


class Budget:
    """Seconds left before ``deadline`` when called; ``total``: the whole run's."""

    def __init__(self, deadline, total):
        self.deadline, self.total = deadline, total

    def __call__(self):
        return self.deadline - time.monotonic()


def _ours_interpreted(fn):
    """``fn`` (with its keyword arguments) in pallas_tpu's TPU interpret mode."""
    import pallas_tpu

    def call(*args, **kwargs):
        with pallas_tpu.force_tpu_interpret_mode():
            return fn(*args, **kwargs)
    return call


def _fits(space, params):
    """0 for a wide-grid candidate the space's VMEM rule would keep, 1 otherwise."""
    over = {_short(p.params) for p in space.pruned if p.reason.startswith("VMEM")}
    return 1 if _short(params) in over else 0


def run(out_dir: Path, size: str, dry_run: bool, budget: float, only=None) -> dict:
    import jax
    import numpy as np
    import pallas_frontend as pl
    import tpu_check_cases as cases
    from pallas_frontend import registry
    from tpu_remote import _bits_equal, _interpreted, compare

    out_dir.mkdir(parents=True, exist_ok=True)
    try:          # the wide grid and the space share compiles through the disk cache
        # outside out_dir: the chip host's results folder travels back, the cache need not
        import tempfile
        cache = Path(tempfile.gettempdir()) / "tpu_native_bench_jax_cache"
        jax.config.update("jax_compilation_cache_dir", str(cache))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    except Exception as error:  # noqa: BLE001 - a JAX without the option: compile again
        say(f"no persistent compilation cache: {error}")
    device = jax.devices()[0]
    from pallas_tpu import tuning
    info = tuning.chip(None)
    from importlib import metadata

    def version(dist):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"
    results = {"route": "native", "device_kind": device.device_kind, "platform": device.platform,
               "jax": jax.__version__, "jaxlib": version("jaxlib"), "libtpu": version("libtpu"),
               "python": sys.version.split()[0], "size": size, "dry_run": dry_run,
               "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "chip": {"name": info.chip_version.value,
                        "vmem_bytes": info.vmem_capacity_bytes,
                        "scoped_vmem_bytes": tuning.scoped_vmem_bytes(info),
                        "hbm_bytes_per_second": info.mem_bw_bytes_per_second,
                        "bf16_flops_per_second": info.bf16_ops_per_second},
               "timed": True, "cases": []}
    if dry_run:
        from pallas_frontend import device_timing

        def timer(fn, args):
            return device_timing.time_per_call(fn, *args, max_calls=1, repetitions=1).seconds
    else:
        timer = registry.get_backend("tpu").seconds_per_call
    deadline = START + budget
    tuned = tuned_kernels(cases, size)
    if dry_run:
        for spec in tuned.values():
            spec["fn"] = _ours_interpreted(spec["fn"])
    path = out_dir / "bench.json"
    say(f"{device.device_kind} ({device.platform}), JAX {jax.__version__}; budget {budget:.0f} s")
    picks = {}
    # the tuned kernels first: a run cut by its budget loses fixed rows, not the tuning
    ordered = sorted(cases.cases(size, on_cpu=dry_run), key=lambda c: c.name not in tuned)
    for case in ordered:
        if only and not any(word in case.name for word in only):
            continue
        row = {"name": case.name, "group": case.group, "flops": case.flops,
               "bytes": cases.traffic_bytes(case), "rtol": case.rtol, "default": case.default,
               "sides": {}, "tune": {}}
        results["cases"].append(row)
        if time.monotonic() > deadline - 20:
            row["error"] = "not run: the time budget was spent"
            continue
        say(case.name)
        try:
            args = jax.block_until_ready(jax.jit(case.inputs)())
            references = _reference(case, args)
        except Exception as error:  # noqa: BLE001 - a row, not a crash
            row["error"] = f"inputs/reference: {type(error).__name__}: {error}"[:400]
            continue
        outputs = {}
        for side, fn in case.sides.items():
            if dry_run and side != "xla":       # each side in its own TPU interpret mode
                fn = _interpreted(fn, side)
            cell = row["sides"][side] = {}
            try:
                got = jax.tree_util.tree_leaves(jax.block_until_ready(jax.jit(fn)(*args)))
                outputs[side] = [np.asarray(g) for g in got]
                cell["max_abs"], cell["rel"] = compare(got, references)
                cell["ok"] = bool(cell["rel"] <= case.rtol)
                cell["seconds"] = float(timer(fn, tuple(args)))
            except Exception as error:  # noqa: BLE001
                cell["error"] = f"{type(error).__name__}: {error}"[:400]
        if "ours" in outputs and "jax" in outputs:
            row["ours_equals_jax"] = all(_bits_equal(a, b)
                                         for a, b in zip(outputs["ours"], outputs["jax"]))
        say("  " + ", ".join(f"{s} {c.get('seconds', 0) * 1e3:.3f} ms" if "error" not in c
                             else f"{s} ERROR {c['error'][:120]}"
                             for s, c in row["sides"].items())
            + f"; bits equal: {row.get('ours_equals_jax')}")
        spec = tuned.get(case.name)
        if spec is not None:
            path.write_text(json.dumps(results, indent=1))   # the timed sides, before tuning
            base = row["sides"].get("ours", {})
            tune = {"name": case.name, "cache": str(out_dir / "autotune.json"),
                    "baseline": {"label": spec["baseline_label"], "kind": spec["baseline_kind"],
                                 "seconds": base.get("seconds")}}
            fwd = picks.get("ops.tpu.flash_attention") if case.name.endswith(".bwd") else None
            try:
                tune |= autotune_row(pl, spec, args, tune, Budget(deadline, budget),
                                     dry_run, fwd)
            except Exception as error:  # noqa: BLE001
                tune["error"] = f"{type(error).__name__}: {error}"[:400]
                say(f"  autotune failed: {tune['error']}")
            if "pick_params" in tune:
                picks[case.name] = tune["pick_params"]
            row["autotune"] = tune
        path.write_text(json.dumps(results, indent=1))
        del args, outputs
    path.write_text(json.dumps(results, indent=1))
    say(f"wrote {path}")
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dry-run", action="store_true",
                        help="CPU, tiny sizes, TPU interpret modes: every code path, no figures")
    parser.add_argument("--budget", type=float, default=450.0,
                        help="seconds for the whole run; wide grids stop when it runs short")
    parser.add_argument("--only", nargs="*", help="cases whose name contains one of these")
    args = parser.parse_args(argv)
    if args.dry_run:
        run(args.out, "small", True, args.budget, args.only)
        return 0
    import jax
    if jax.default_backend() != "tpu":
        print(f"SKIP: no TPU here (JAX's default backend is {jax.default_backend()}); "
              "--dry-run runs the logic on CPU")
        return 0
    run(args.out, "full", False, args.budget, args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
