"""docs/jax-ops.md from the rows of ``tools/jax_ops.py``, and the JSON file
(``--results``) that keeps rows across runs of parts of the table.

Results: ``{"cpu": {"rows": {key: row}, "seconds", "date"}, "aot": {"cells":
{target: {key: {"jax": cell, "ours": cell}}}, "seconds", "jobs", "date"}}``
with ``key`` = ``jax_ops_aot.rows_key(case, size, grad)``.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import jax

import jax_ops_aot
import jax_ops_cases

GRAD = " grad"
TARGET_TITLES = {"v5e": "TPU v5e", "H100": "H100", "A100": "A100", "B200": "B200"}


def load(path: Path | None) -> dict:
    if path is not None and path.exists():
        return json.loads(path.read_text())
    return {}


def save(path: Path, results: dict) -> None:
    path.write_text(json.dumps(results, indent=1) + "\n")


def _today() -> str:
    return datetime.date.today().isoformat()


def merge_cpu(results: dict, rows, seconds: float, full: bool) -> None:
    part = results.setdefault("cpu", {"rows": {}})
    keys = []
    for r in rows:
        grad = r["name"].endswith(GRAD)
        name = r["name"][:-len(GRAD)] if grad else r["name"]
        keys.append(jax_ops_aot.rows_key(name, r["size"], grad))
        part["rows"][keys[-1]] = r
    _stamp(part, keys, seconds, full)


def _stamp(part: dict, keys, seconds: float, full: bool) -> None:
    """When the part ran; a full run (every case, every size) is the time the page
    quotes, and the rows later partial runs updated are counted."""
    part.update(seconds=round(seconds), date=_today(), last_rows=len(keys))
    if full:
        part.update(full_seconds=round(seconds), full_date=_today(), since_full=[])
    else:
        part["since_full"] = sorted(set(part.get("since_full", [])) | set(keys))


def merge_aot(results: dict, cells: dict, seconds: float, jobs: int, full: bool) -> None:
    part = results.setdefault("aot", {"cells": {}})
    for target, by_key in cells.items():
        part["cells"].setdefault(target, {}).update(by_key)
    _stamp(part, [f"{t} {k}" for t, by_key in cells.items() for k in by_key], seconds, full)
    part["jobs"] = jobs
    if full:
        part["full_jobs"] = jobs


def _keys():
    """Every row key in the order of the cases, sizes, forward before grad."""
    for case in jax_ops_cases.CASES:
        for size in jax_ops_cases.SIZES:
            for grad in (False, True) if case.grad else (False,):
                yield case, size, grad, jax_ops_aot.rows_key(case.name, size, grad)


def _timing(part: dict, what: str, how: str = "") -> str:
    if "full_seconds" in part:
        text = (f"The full run of this part took {part['full_seconds']} s on this machine "
                f"(2 shared cores{how}, {part['full_date']})")
        if part.get("since_full"):
            text += (f"; later partial runs (the last on {part['date']}) updated "
                     f"{len(part['since_full'])} {what}")
        return text + "."
    return f"Last run {part.get('date', '?')}: {part.get('last_rows', '?')} {what} in " \
           f"{part.get('seconds', '?')} s (a partial run)."


def _note(text: str) -> str:
    return text.replace("|", "\\|")


def _cpu_lines(part: dict) -> list[str]:
    notes = {k: case.note for case, *_, k in _keys()}
    keyed = [(k, part["rows"][k]) for *_, k in _keys() if k in part.get("rows", {})]
    rows = [r for _, r in keyed]
    counted = [r for r in rows if r["jax"] == "ok"]
    works = sum(r["ours"] == "ok" for r in counted)
    lines = [
        "## On CPU (interpret mode)",
        "",
        "Every kernel is run on CPU as JAX's tests run it (interpret mode), once under JAX's "
        "Pallas and once from the copy with our imports, on the same fresh random inputs. "
        "`rel`: the max difference of ours from JAX's, relative to the largest magnitude of "
        "JAX's output; `ours/JAX`: wall time, best of three compiled calls.",
        "",
        _timing(part, "rows"),
        "",
        f"**Rows where JAX works: {len(counted)}; ours works on {works} of them.**",
        "",
        "| kernel | size | JAX | ours | rel | ours/JAX | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for k, r in keyed:
        rel = "" if r["rel"] is None else f"{r['rel']:.1e}"
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2g}"
        note = f"JAX fails here: {r['jax_error']}" if r["jax"] != "ok" else r["ours_error"]
        note = "; ".join(filter(None, [note, notes[k]]))
        lines.append(f"| {r['name']} | {r['size']} | {r['jax']} | {r['ours']} | {rel} | "
                     f"{ratio} | {_note(note)} |")
    return lines


def _cell_text(pair: dict | None) -> str:
    if pair is None or "jax" not in pair or "ours" not in pair:
        return "not run"
    return f"{pair['jax']['status']} / {pair['ours']['status']}"


def _aot_lines(part: dict) -> list[str]:
    cells = part.get("cells", {})
    targets = [t for t in jax_ops_aot.TARGETS]
    counts = []
    for t in targets:
        pairs = [p for p in cells.get(t, {}).values() if "jax" in p and "ours" in p]
        counted = [p for p in pairs if p["jax"]["status"] == "ok"]
        counts.append(f"{TARGET_TITLES[t]}: JAX compiles {len(counted)}, ours "
                      f"{sum(p['ours']['status'] == 'ok' for p in counted)} of them")
    lines = [
        "## Compiled for devices this machine does not have",
        "",
        "The same calls (not in interpret mode) compiled, never run: TPU kernels AOT for one "
        f"chip of a `{jax_ops_aot.TPU_TOPOLOGY}` topology by libtpu (all_gather over its four "
        "chips), Triton-style GPU kernels by XLA:GPU for an H100 and an A100 without a GPU "
        "(jax-cuda12-plugin/pjrt), Mosaic GPU kernels by XLA:GPU for an H100 (the multi-GPU "
        "collectives over two H100s of one host, the Blackwell ones for a B200). A cell is "
        "JAX / ours: `ok` when `jax.jit(f).trace(...).lower().compile()` succeeded and the "
        "lowered program holds a Pallas kernel call. A target a kernel is not written for "
        "is left blank; a row where JAX fails is listed and not counted.",
        "",
        _timing(part, "cells", f", {part.get('full_jobs', part.get('jobs', '?'))} worker "
                "processes at once"),
        "",
        "**" + "; ".join(counts) + ".**",
        "",
        "| kernel | size | " + " | ".join(TARGET_TITLES[t] for t in targets) + " | note |",
        "|---|---|" + "---|" * len(targets) + "---|",
    ]
    for case, size, grad, key in _keys():
        mine = [t for t in targets if case.kind in jax_ops_aot.TARGETS[t][1]]
        if not any(key in cells.get(t, {}) for t in mine):    # not run yet (a partial table)
            continue
        texts, notes = [], []
        for t in targets:
            pair = cells.get(t, {}).get(key)
            texts.append(_cell_text(pair) if t in mine else "")
            for side, who in (("jax", "JAX"), ("ours", "ours")):
                cell = (pair or {}).get(side, {})
                if cell.get("status") == "fail":
                    notes.append(f"{TARGET_TITLES[t]} {who}: {cell.get('error', '')}")
        if len(notes) > 1 and len({n.split(": ", 1)[1] for n in notes}) == 1:
            notes = [f"{', '.join(n.split(': ', 1)[0] for n in notes)}: "
                     f"{notes[0].split(': ', 1)[1]}"]
        name = case.name + (GRAD if grad else "")
        lines.append(f"| {name} | {size} | " + " | ".join(texts) + f" | {_note('; '.join(notes))} |")
    return lines


def write_page(out: Path, results: dict) -> None:
    lines = [
        "# JAX's shipped Pallas kernels on pallas-frontend",
        "",
        "Generated by `python tools/jax_ops.py --out docs/jax-ops.md` (do not edit by hand; "
        "`--only`, `--columns` and `--results FILE` run parts of it). Every kernel of the "
        "installed jax's `jax/experimental/pallas/ops/` is called once under JAX's Pallas and "
        "once from a copy whose Pallas imports name ours (nothing else changed).",
        "",
        f"jax {jax.__version__}.",
        "",
    ]
    if "cpu" in results:
        lines += _cpu_lines(results["cpu"]) + [""]
    if "aot" in results:
        lines += _aot_lines(results["aot"]) + [""]
    lines += ["## Notes", ""]
    lines += [f"- {name}: {text}." for name, text in jax_ops_cases.NOTES.items()]
    if jax_ops_cases.NOT_RUN:
        lines += ["", "## Not covered yet", ""]
        lines += [f"- {what}: {why}." for what, why in jax_ops_cases.NOT_RUN.items()]
    out.write_text("\n".join(lines) + "\n")
