"""Paired timing: two implementations timed in alternating order, one ratio per pair.

On a shared, loaded machine absolute times drift by tens of percent within a
minute; the ratio of two calls made back to back drifts far less. Each sample
runs a calibrated number of calls (so that a sample lasts a few milliseconds),
pairs alternate which side runs first, and the median of the per-pair ratios is
reported with its quartiles. The same procedure run on XLA against a second,
separately compiled copy of itself (A/A) gives the noise floor to read the
ratios against.
"""

from __future__ import annotations

import dataclasses
import os
import re
import statistics
import time

import jax

_MIN_SAMPLE_S = 0.02


def _once(fn, args, calls: int) -> float:
    t = time.perf_counter()
    for _ in range(calls):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - t) / calls


def calls_per_sample(fn, args) -> int:
    single = _once(fn, args, 1)
    return max(1, min(200, int(_MIN_SAMPLE_S / max(single, 1e-7))))


@dataclasses.dataclass(frozen=True)
class Paired:
    """Per-pair ratios a/b and the two sides' median times (seconds per call)."""
    ratios: tuple[float, ...]
    a_s: float
    b_s: float

    @property
    def median(self) -> float:
        return statistics.median(self.ratios)

    @property
    def quartiles(self) -> tuple[float, float]:
        if len(self.ratios) < 4:
            return min(self.ratios), max(self.ratios)
        q = statistics.quantiles(self.ratios, n=4)
        return q[0], q[2]


def paired(fa, fb, args, pairs: int) -> Paired:
    """Times ``fa`` and ``fb`` (already warm) in ``pairs`` alternating pairs."""
    calls = max(calls_per_sample(fa, args), calls_per_sample(fb, args))
    ta, tb, ratios = [], [], []
    for p in range(pairs):
        if p % 2 == 0:
            a = _once(fa, args, calls)
            b = _once(fb, args, calls)
        else:
            b = _once(fb, args, calls)
            a = _once(fa, args, calls)
        ta.append(a)
        tb.append(b)
        ratios.append(a / b)
    return Paired(tuple(ratios), statistics.median(ta), statistics.median(tb))


def median_time(fn, args, reps: int) -> float:
    return statistics.median(_once(fn, args, 1) for _ in range(reps))


def first_call_seconds(make, args) -> float:
    """trace + lower + compile of a freshly built function, JAX's caches emptied."""
    jax.clear_caches()
    t = time.perf_counter()
    jax.jit(make()).lower(*args).compile()
    return time.perf_counter() - t


def paired_first_call(make_a, make_b, args, reps: int) -> Paired:
    ta, tb, ratios = [], [], []
    for p in range(reps):
        if p % 2 == 0:
            a = first_call_seconds(make_a, args)
            b = first_call_seconds(make_b, args)
        else:
            b = first_call_seconds(make_b, args)
            a = first_call_seconds(make_a, args)
        ta.append(a)
        tb.append(b)
        ratios.append(a / b)
    return Paired(tuple(ratios), statistics.median(ta), statistics.median(tb))


def same_program(fa, fb, args) -> bool:
    """Whether XLA compiled both to the same program (names and metadata aside)."""
    return _canonical(fa, args) == _canonical(fb, args)


def _canonical(fn, args) -> list[str]:
    text = fn.lower(*args).compile().as_text()
    lines = []
    for line in text.splitlines():
        line = re.sub(r",? ?(metadata|backend_config|frontend_attributes)=\{.*", "", line)
        line = re.sub(r"%[\w.\-]+", "%", line)
        line = re.sub(r"[\w.\-]+: ", ": ", line)          # parameter names in signatures
        line = re.sub(r"^\s*(ROOT\s+)?", "", line)
        if line in ("FileNames", "FunctionNames", "FileLocations", "StackFrames") or \
                re.match(r"\d+ ", line):
            continue                                        # debug-info tables
        if line and not line.startswith(("HloModule", "//")):
            lines.append(line)
    return sorted(lines)


def load_average() -> str:
    try:
        return ", ".join(f"{v:.1f}" for v in os.getloadavg())
    except OSError:
        return "unknown"
