"""The probe harness (issue 24): hostile inputs run as a careless user or an
attacker would write them, each classified as one of

    correct        ran and matched the reference (NumPy float64 or JAX interpret)
    clear_error    refused with a message naming the kernel (and operand, where
                   the case names one)
    unhelpful      refused, but the message misses the kernel or the operand
    crash          an internal error type (AttributeError, IndexError, ...), or
                   the process died
    hang           did not finish within the time limit (subprocess cases)
    silent_wrong   returned data that differs from the reference, or accepted
                   input it should refuse

A case builds a thunk and its reference on fresh random data. Cases that may
hang, need a plugin's environment, or print, run in their own subprocess
(``python tests/probes/common.py MODULE CASE``). ``python tests/probes/run.py``
runs every category and prints the counts.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import subprocess
import sys
from typing import Callable

import numpy as np

OUTCOMES = ("correct", "clear_error", "unhelpful", "crash", "hang", "silent_wrong")
GOOD = ("correct", "clear_error")
_INTERNAL = (AttributeError, IndexError, AssertionError, UnboundLocalError, RecursionError,
             SystemError, ZeroDivisionError)
_HERE = os.path.dirname(os.path.abspath(__file__))

TPU_ENV = {"JAX_PLATFORMS": "cpu", "TPU_ACCELERATOR_TYPE": "v5litepod-4",
           "TPU_WORKER_HOSTNAMES": "localhost", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
           "PALLAS_FRONTEND_BACKENDS": "tpu"}
TRITON_ENV = {"JAX_PLATFORMS": "cpu", "PALLAS_FRONTEND_BACKENDS": "triton",
              "TRITON_DEFAULT_FP_FUSION": "1"}


@dataclasses.dataclass(frozen=True)
class Case:
    """``build(rng)`` -> ``(thunk, reference)``; reference is an array (or a
    tuple of arrays), a callable checking the result (returns True if right),
    or None when an error is expected. ``names``: the words a clear error must
    contain (the kernel function's name first). ``either``: an error is as
    good as a result (JAX leaves the input undefined or refuses it too)."""
    id: str
    build: Callable
    names: tuple[str, ...] = ()
    expect_error: bool = False
    either: bool = False
    subprocess: bool = False
    env: dict | None = None
    needs: str | None = None          # a module that must import (a plugin)
    timeout: float = 90.0
    defect: int | None = None         # the issue-24 defect it re-probes
    tol: float = 1e-5
    slow: bool = False                # in-process but slow: PALLAS_PROBES_ALL=1 only
    xfail: str | None = None          # a known, reported defect not fixed yet: why


def _matches(got, want, tol) -> bool:
    if callable(want):
        return bool(want(got))
    if isinstance(want, (tuple, list)):
        return len(got) == len(want) and all(_matches(g, w, tol) for g, w in zip(got, want))
    got = np.asarray(got)
    want = np.asarray(want)
    if got.shape != want.shape:
        return False
    if got.dtype.kind in "fc" or want.dtype.kind in "fc":
        return np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol,
                           equal_nan=True)
    return np.array_equal(got, want)


class Hang(Exception):
    """Raised by a case that runs a command of its own which did not finish in time."""


class Crashed(Exception):
    """Raised by a case whose command died or printed a traceback it should not have."""


def classify_error(case: Case, err: BaseException) -> tuple[str, str]:
    msg = f"{type(err).__name__}: {err}"
    if isinstance(err, Hang):
        return "hang", msg
    # the types themselves (a project error may subclass one), or a case's own verdict
    if type(err) in _INTERNAL or isinstance(err, Crashed):
        return "crash", msg
    missing = [n for n in case.names if n.lower() not in str(err).lower()]
    return ("unhelpful" if missing else "clear_error"), msg + (f" [missing {missing}]" if missing
                                                                 else "")


def run_in_process(case: Case, seed: int = 0) -> tuple[str, str]:
    rng = np.random.default_rng(seed)
    try:
        thunk, want = case.build(rng)
        got = thunk()
        import jax
        got = jax.block_until_ready(got)
    except Exception as err:            # noqa: BLE001 -- classifying it is the point
        return classify_error(case, err)
    if case.expect_error and not case.either:
        return "silent_wrong", "accepted input it should refuse"
    if want is None:
        return "correct", "ran (no reference: an error or any result is allowed)"
    if callable(want):    # a checker: True, False, a string naming the difference, or
        verdict = want(got)             # (True, note): right by a difference the backend declares
        if isinstance(verdict, str):
            return "silent_wrong", verdict[:600]
        if isinstance(verdict, tuple):
            return "correct", verdict[1]
        return ("correct", "") if verdict else ("silent_wrong", repr(got)[:300])
    return ("correct", "") if _matches(got, want, case.tol) else ("silent_wrong", repr(got)[:300])


def run_in_subprocess(module: str, case: Case, seed: int = 0) -> tuple[str, str]:
    env = dict(os.environ, **(case.env or {}))
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(_HERE), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, os.path.join(_HERE, "common.py"), module, case.id, str(seed)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=case.timeout, env=env)
    except subprocess.TimeoutExpired:
        return "hang", f"no result after {case.timeout:.0f} s"
    for line in reversed(out.stdout.splitlines()):
        if line.startswith("PROBE-RESULT "):
            outcome, detail = json.loads(line[len("PROBE-RESULT "):])
            return outcome, detail
    return "crash", f"exit {out.returncode}: {out.stderr[-600:]}"


def run(module: str, case: Case, seed: int = 0) -> tuple[str, str]:
    if case.needs is not None:
        try:
            importlib.import_module(case.needs)
        except Exception:      # noqa: BLE001
            return "skipped", f"{case.needs} not importable"
    if case.subprocess or case.env:
        return run_in_subprocess(module, case, seed)
    return run_in_process(case, seed)


def cases_of(module: str) -> list[Case]:
    return list(importlib.import_module(f"probes.{module}").CASES)


def counts(results) -> dict:
    out = {o: 0 for o in OUTCOMES}
    for outcome, _ in results:
        out[outcome] = out.get(outcome, 0) + 1
    return out


if __name__ == "__main__":      # one case in this process, for run_in_subprocess
    sys.path.insert(0, os.path.dirname(_HERE))
    mod, case_id, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    (case,) = [c for c in cases_of(mod) if c.id == case_id]
    print("PROBE-RESULT " + json.dumps(run_in_process(case, seed)), flush=True)
