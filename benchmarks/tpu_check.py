"""The TPU check: correctness and on-device speed of pallas_tpu on a real chip.

Each kernel runs as ours (pallas_tpu), JAX's Pallas and plain jax.numpy (XLA)
on the same device arrays: JAX's shipped TPU kernels (flash attention forward
and backward, paged attention, megablox gmm, splash attention, the tiled
matmul at 4096^3 and 8192^3 in two block sizes) with only their imports
changed, and the conformance kernels that fit TPU tiling. For each: the max
abs and relative error against a NumPy float64 reference, whether ours equals
JAX bit for bit, the time per call measured in a device loop
(``pallas_frontend/device_timing.py``), the ratios to JAX and to XLA, TF/s or
GB/s. Kernels with launch parameters are also autotuned: every candidate of
``benchmarks/tpu_check_cases.py`` is timed and checked, and the fastest
correct one is compared with JAX's default choice.

    python benchmarks/tpu_check.py                    # on a TPU host with this project
    python benchmarks/tpu_check.py --results r.json --write   # a remote run's table -> BENCHMARKS.md
    python benchmarks/tpu_check.py --dry-run          # the same logic on CPU, small sizes

Without a TPU (and without ``--results``/``--dry-run``) it prints SKIP. On a
TPU host whose JAX is older than this project's, run the kernels through
``tools/tpu_remote.py`` (export here, run there) and render its results here.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import tpu_remote  # noqa: E402

BENCHMARKS = ROOT / "BENCHMARKS.md"
START, END = "<!-- tpu_check:start -->", "<!-- tpu_check:end -->"
NATIVE_START, NATIVE_END = "<!-- tpu_native_bench:start -->", "<!-- tpu_native_bench:end -->"


def _ms(cell):
    return cell.get("seconds", 0.0) * 1e3 if cell and "error" not in cell else None


def _fmt_ms(value):
    return "–" if value is None else f"{value:.3f}"


def _ratio(a, b):
    return "–" if a is None or b is None or b == 0 else f"{a / b:.2f}"


# Bytes a kernel must move before its time says something about HBM bandwidth:
# below a few times the chip's VMEM, the device loop keeps data on chip.
BANDWIDTH_VMEM_MULTIPLE = 2


def chip_peaks(results) -> dict:
    """The chip's VMEM, HBM bandwidth and bf16 peak: the run's record, else v5e's."""
    if "chip" in results:
        return results["chip"]
    from pallas_tpu import tuning
    info = tuning.chip("v5e")
    return {"name": "v5e", "vmem_bytes": info.vmem_capacity_bytes,
            "hbm_bytes_per_second": info.mem_bw_bytes_per_second,
            "bf16_flops_per_second": info.bf16_ops_per_second}


def _speed(row, cell, peaks):
    ms = _ms(cell)
    if not ms:
        return "–"
    if row["flops"]:
        rate, peak = row["flops"] / (ms * 1e-3), peaks["bf16_flops_per_second"]
        return f"{rate / 1e12:.1f} TF/s ({100 * rate / peak:.0f}% of {peak / 1e12:.0f})"
    if row["bytes"] < BANDWIDTH_VMEM_MULTIPLE * peaks["vmem_bytes"]:
        return f"not bandwidth ({row['bytes'] / (1 << 20):.0f} MiB)"
    rate, peak = row["bytes"] / (ms * 1e-3), peaks["hbm_bytes_per_second"]
    return f"{rate / 1e9:.0f} GB/s ({100 * rate / peak:.0f}% of {peak / 1e9:.0f})"


def _err(cell):
    if not cell:
        return "–", "–"
    if "error" in cell:
        return "error", cell["error"][:80].replace("|", "/")
    return f"{cell['max_abs']:.2e}", f"{cell['rel']:.1e}" + ("" if cell["ok"] else " (over)")


def best_candidate(row):
    """(label, cell) of the fastest candidate whose result is within tolerance."""
    from pallas_frontend.autotune_cache import choose_winner   # pl.autotune's own choice
    timings = {label: cell["seconds"] for label, cell in row["tune"].items()
               if cell.get("ok") and "seconds" in cell}
    if not timings:
        return None, None
    label = choose_winner(timings)
    return label, row["tune"][label]


def merge_results(runs: list[dict]) -> dict:
    """Several runs on one chip as one: the latest row of each kernel, in the
    order the kernels first appear; the header names each run's date."""
    merged = dict(runs[-1], cases=[])
    rows: dict[str, dict] = {}
    for run_ in runs:
        for row in run_["cases"]:
            if "error" in row and row["name"] in rows:
                continue            # a later run that did not reach this kernel
            rows[row["name"]] = dict(row, run_date=run_["date"])
    merged["cases"] = list(rows.values())
    merged["dates"] = [r["date"] for r in runs]
    return merged


def render(results) -> str:
    """The Markdown tables of a run's results."""
    rows = results["cases"]
    peaks = chip_peaks(results)
    dates = [d[:16].replace("T", " ") for d in results.get("dates", [results["date"]])]
    when = (f"Run{'s' if len(dates) > 1 else ''} {', '.join(dates)} UTC on one "
            f"**{results['device_kind']}** ")
    if results.get("route") == "native":
        how = (f"({results['platform']}), natively: Python {results['python']}, JAX "
               f"{results['jax']}, jaxlib {results['jaxlib']}, libtpu {results['libtpu']}, the "
               "project installed from wheels (`tools/tpu_native.py run --parts bench`, "
               "`benchmarks/tpu_native_bench.py`)")
    else:
        how = (f"({results['platform']}), JAX {results['jax']}, libtpu {results['libtpu']}; "
               f"kernels exported with JAX {results['pack_jax']} (`tools/tpu_remote.py`)")
    lines = [
        when + how + f", sizes \"{results['size']}\". Times: per call, in a device loop "
        "(`(T(3n) - T(n)) / 2n`). Speed beside the chip's peak "
        f"({peaks['bf16_flops_per_second'] / 1e12:.0f} bf16 TF/s, "
        f"{peaks['hbm_bytes_per_second'] / 1e9:.0f} GB/s HBM); GB/s only where a call moves "
        f"at least {BANDWIDTH_VMEM_MULTIPLE}x the {peaks['vmem_bytes'] >> 20} MiB of VMEM, "
        "else the data stays on chip in the device loop and the figure is not bandwidth.",
        "",
        "| kernel | max abs err (ours) | rel err (ours) | ours = JAX bits | ours ms | JAX ms "
        "| XLA ms | ours / JAX | ours / XLA | ours speed | XLA rel err |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['name']} | {row['error'][:100]} |" + " – |" * 9)
            continue
        ours, theirs, xla = (row["sides"].get(k) for k in ("ours", "jax", "xla"))
        abs_err, rel_err = _err(ours)
        bits = {True: "yes", False: "**no**"}.get(row.get("ours_equals_jax"), "–")
        o, j, x = _ms(ours), _ms(theirs), _ms(xla)
        lines.append(f"| {row['name']} | {abs_err} | {rel_err} | {bits} | {_fmt_ms(o)} | "
                     f"{_fmt_ms(j)} | {_fmt_ms(x)} | {_ratio(o, j)} | {_ratio(o, x)} | "
                     f"{_speed(row, ours, peaks)} | {_err(xla)[1]} |")
    tuned = [row for row in rows if row.get("tune")]
    if tuned:
        lines += ["", "Autotuned (ours, fastest candidate within tolerance) against a "
                  "baseline, same inputs: JAX's default launch parameters where JAX has "
                  "them, ours' choice where it has none:", "",
                  "| kernel | baseline | baseline ms | autotuned | autotuned ms | speedup "
                  "| XLA ms | autotuned / XLA time | autotuned speed | candidates ok |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for row in tuned:
            default = row["tune"].get(row["default"], {})
            label, best = best_candidate(row)
            d, b, x = _ms(default), _ms(best), _ms(row["sides"].get("xla"))
            ok = sum(1 for c in row["tune"].values() if c.get("ok"))
            lines.append(f"| {row['name']} | {_baseline_label(row)} | {_fmt_ms(d)} | "
                         f"{label or '–'} | "
                         f"{_fmt_ms(b)} | {_ratio(d, b)}x | {_fmt_ms(x)} | {_ratio(b, x)} | "
                         f"{_speed(row, best, peaks)} | {ok} of {len(row['tune'])} |")
    lines += autotune_table(rows, peaks)
    return "\n".join(lines + ["", summary(results)])


# Kernels whose launch parameter JAX ships no default for: the baseline is ours' pick.
_NO_JAX_DEFAULT = {"ops.tpu.paged_attention": "pages_per_compute_block",
                   "ops.tpu.matmul": "block shape"}


def _baseline_label(row) -> str:
    what = next((v for k, v in _NO_JAX_DEFAULT.items() if row["name"].startswith(k)), None)
    if what is None:
        return f"{row['default']} (JAX's default)"
    return f"{row['default']} (ours' choice: JAX has no default {what})"


def _seconds(cells):
    """label -> seconds of the candidates that ran."""
    return {label: c["seconds"] for label, c in cells.items() if c.get("seconds")}


def wide_best(tune):
    """(label, seconds) of the fastest candidate of the space and the wide grid together."""
    timed = _seconds(tune.get("space", {})) | _seconds(tune.get("wide", {}))
    if not timed:
        return None, None
    label = min(timed, key=timed.get)
    return label, timed[label]


def autotune_table(rows, peaks) -> list[str]:
    """pl.autotune live over the generated space (a native run's rows)."""
    tuned = [row for row in rows if row.get("autotune") and "error" not in row["autotune"]]
    if not tuned:
        return []
    lines = ["", "`pl.autotune` live on the chip over the space `pallas_tpu.tuning_spaces` "
             "generates (cache keyed by the device kind), against the baseline and against the "
             "best of a wide grid (the space's timed candidates and every other combination the "
             "kernel's rules allow, VMEM estimate and size limit not applied):", "",
             "| kernel | baseline | baseline ms | pick | pick ms | speedup | wide-grid best "
             "| best ms | pick / best time | XLA ms | XLA time / pick time | pick speed "
             "| space: timed / failed / pruned | wide grid run |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in tuned:
        t = row["autotune"]
        space = t.get("space", {})
        pick_s = space.get(t.get("pick"), {}).get("seconds")
        best_label, best_s = wide_best(t)
        base_s = t["baseline"].get("seconds")
        xla = _ms(row["sides"].get("xla"))
        pick_ms = pick_s * 1e3 if pick_s else None
        counts = (f"{len(_seconds(space))} / "
                  f"{sum(1 for c in space.values() if 'error' in c)} / "
                  f"{sum(1 for c in space.values() if 'pruned' in c)}")
        wide = ("–" if "wide" not in t else
                f"{len(t['wide'])} of {t['wide_total']}" + (" (cut)" if t.get("wide_cut") else ""))
        lines.append(
            f"| {row['name']} | {t['baseline']['label']} ({t['baseline']['kind']}) | "
            f"{_fmt_ms(base_s and base_s * 1e3)} | {t.get('pick', '–')} | {_fmt_ms(pick_ms)} | "
            f"{_ratio(base_s, pick_s)}x | {best_label or '–'} | "
            f"{_fmt_ms(best_s and best_s * 1e3)} | {_ratio(pick_s, best_s)} | {_fmt_ms(xla)} | "
            f"{_ratio(xla, pick_ms)} | {_speed(row, {'seconds': pick_s} if pick_s else None, peaks)}"
            f" | {counts} | {wide} |")
    names = [f"{row['name']}: {'/'.join(row['autotune']['pick_params'])}" for row in tuned
             if row["autotune"].get("pick_params")]
    if names:
        lines += ["", "Candidates are labelled by their block parameters: " + "; ".join(names)
                  + "."]
    return lines


def summary(results) -> str:
    """The run in three sentences: bits, time against JAX, autotune gains."""
    rows = [row for row in results["cases"] if "error" not in row]
    equal = sum(1 for row in rows if row.get("ours_equals_jax"))
    within = sum(1 for row in rows if all(cell.get("ok") for cell in row["sides"].values()))
    ratios = [_ms(row["sides"]["ours"]) / _ms(row["sides"]["jax"]) for row in rows
              if _ms(row["sides"].get("ours")) and _ms(row["sides"].get("jax"))
              and _ms(row["sides"]["jax"]) >= 0.1]
    text = [f"Ours = JAX bit for bit on {equal} of {len(results['cases'])} kernels; "
            f"{within} of them within tolerance of NumPy float64 on every side."]
    if ratios:
        text.append(f"Time ours / JAX on the {len(ratios)} kernels of 0.1 ms or more: "
                    f"{min(ratios):.2f} to {max(ratios):.2f}.")
    gains = []
    for row in rows:
        if row.get("tune"):
            default = _ms(row["tune"].get(row["default"], {}))
            label, best = best_candidate(row)
            if default and best:
                gains.append(f"{row['name']} {default / _ms(best):.2f}x")
    if gains:
        text.append("Autotuned against the baseline (JAX's default, or ours' choice where "
                    "JAX has none): " + ", ".join(gains) + ".")
    close = []
    for row in rows:
        t = row.get("autotune") or {}
        pick = t.get("space", {}).get(t.get("pick"), {}).get("seconds")
        label, best = wide_best(t)
        if pick and best and "wide" in t:
            close.append(f"{row['name']} {100 * (pick / best - 1):.1f}%")
    if close:
        text.append("Time of pl.autotune's pick over the wide grid's best: "
                    + ", ".join(close) + ".")
    return " ".join(text)


def write(table: str, path: Path = BENCHMARKS, native: bool = False) -> None:
    """The table between its markers: the export route's (``tpu_check``) or,
    for a native run's results, ``tpu_native_bench``'s."""
    text = path.read_text()
    start, end = (NATIVE_START, NATIVE_END) if native else (START, END)
    block = f"{start}\n{table}\n{end}"
    if start in text:
        text = re.sub(re.escape(start) + ".*?" + re.escape(end), lambda _: block, text,
                      flags=re.S)
    elif native:
        raise SystemExit(f"{path.name} has no {start} block to write the native run into")
    else:
        text = text.rstrip("\n") + "\n\n## TPU check on a real chip\n\n" + block + "\n"
    path.write_text(text)


# The dry run times each side with one call in the loop: the interpreters take
# up to a second a call, and the point is the logic, not the figures.
DRY_RUN_TIMING = {"max_calls": 1, "repetitions": 1}


def run_here(size: str, platform: str, timing: dict | None = None, only=None):
    """Packs the cases and runs them on this host's default device."""
    with tempfile.TemporaryDirectory(prefix="tpu_check_") as folder:
        tpu_remote.pack_cases(folder, size, only=only, platform=platform)
        return tpu_remote.run_pack(folder, Path(folder) / "results.json", timing=timing)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", nargs="+",
                        help="render results files of tools/tpu_remote.py run or of "
                             "benchmarks/tpu_native_bench.py, oldest first: a later file's "
                             "row of a kernel replaces the earlier one's")
    parser.add_argument("--dry-run", action="store_true",
                        help="run the logic on CPU at small sizes (interpret modes)")
    parser.add_argument("--write", action="store_true",
                        help=f"write the table into {BENCHMARKS.name}")
    parser.add_argument("--json", help="also save the results here")
    parser.add_argument("--only", nargs="*",
                        help="only the cases whose name contains one of these words")
    args = parser.parse_args(argv)
    if args.results:
        results = merge_results([json.loads(Path(f).read_text()) for f in args.results])
    elif args.dry_run:
        results = run_here("small", "cpu", timing=DRY_RUN_TIMING, only=args.only)
    else:
        import jax
        if jax.default_backend() != "tpu":
            print(f"SKIP: no TPU here (JAX's default backend is {jax.default_backend()}). "
                  "On a TPU host whose JAX is older than this project's, use "
                  "tools/tpu_remote.py (README, 'On a TPU').")
            return 0
        results = run_here("full", "tpu", only=args.only)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    table = render(results)
    print(table)
    if args.write:
        if args.dry_run:
            parser.error("--write takes a chip's results, not a dry run's")
        write(table, native=results.get("route") == "native")
    return 0


if __name__ == "__main__":
    sys.exit(main())
