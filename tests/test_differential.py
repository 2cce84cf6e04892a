"""Differential test of the interpreters (issue 24): generated kernels
(tests/differential_kernels.py) run on the built-in interpreter, Triton's
interpreter path, TPU interpret mode and Mosaic GPU interpret mode, each
where its plugin is installed, against JAX's own ``jax.experimental.pallas``
``interpret=True`` and against NumPy.

``PALLAS_DIFFERENTIAL_EXAMPLES`` sets how many kernels (default 6: a CI
budget); ``PALLAS_DIFFERENTIAL_SEED`` the base seed (default: a fresh one,
printed). A disagreement names the example, the runner and what differs.
Results: floats equal within a few units in the last place of their dtype
(NaN where the reference has NaN, infinities equal); integers and booleans
exactly.
"""

import os
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import differential_kernels as D
import pallas_frontend as pl

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import differential_corpus as corpus  # noqa: E402  (the interpreters both runs use)

EXAMPLES = int(os.environ.get("PALLAS_DIFFERENTIAL_EXAMPLES", "6"))
SEED = int(os.environ.get("PALLAS_DIFFERENTIAL_SEED",
                          np.random.SeedSequence().entropy % (2 ** 31)))

# the interpreters, by name: the corpus's ("interpret" is the built-in one)
RUNNERS = sorted(corpus.INTERPRETERS)
# Known disagreements: (runner, family, op) -> the exact reason. Each must still
# disagree (an example that now agrees fails: remove its entry); the runner's test
# is then an xfail naming them, after every other example has agreed.
KNOWN: dict[tuple[str, str, str], str] = {}
# Tolerances against JAX interpret (same dtype arithmetic) and NumPy (float64, rounded once).
ULPS = {"float32": 4, "float16": 2, "bfloat16": 2}


def _eps(dtype):
    return float(np.finfo(D.np_dtype(dtype)).eps)


_cache: dict[int, tuple] = {}


def example(i):
    """(example, JAX interpret's result, NumPy's), computed once per module."""
    if i not in _cache:
        ex = D.draw(i, SEED)
        from jax.experimental import pallas as jpl
        want = np.asarray(D.build(ex, jpl, interpret=True)(*ex.operands))
        _cache[i] = (ex, want, D.numpy_reference(ex))
    return _cache[i]


def compare(got, want, ex: D.Example, against: str, transcendental_ulps=1, atol=None):
    got, want = np.asarray(got), np.asarray(want)
    where = f"example {ex} (seed {SEED}) vs {against}"
    assert got.shape == want.shape and got.dtype == want.dtype or (
        got.shape == want.shape and against == "NumPy"), f"{where}: {got.dtype}{got.shape}"
    if got.dtype == np.bool_ or np.issubdtype(got.dtype, np.integer):
        np.testing.assert_array_equal(got, want.astype(got.dtype), err_msg=where)
        return
    dtype = D.out_dtype(ex)
    g, w = got.astype(np.float64), want.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"{where}: NaN positions")
    finite = np.isfinite(w)
    np.testing.assert_array_equal(g[~finite & ~np.isnan(w)], w[~finite & ~np.isnan(w)],
                                  err_msg=f"{where}: infinities")
    ulps = ULPS[dtype] * transcendental_ulps
    tiny = float(np.finfo(D.np_dtype(dtype)).tiny) if dtype != "bfloat16" else 1e-38
    if atol is None:
        np.testing.assert_allclose(g[finite], w[finite], rtol=ulps * _eps(dtype),
                                   atol=tiny * 4, err_msg=where)
    else:
        bound = np.broadcast_to(atol, w.shape)[finite]
        np.testing.assert_array_less(np.abs(g[finite] - w[finite]), bound + tiny, err_msg=where)


def _runner(name):
    try:
        return corpus.interpret_option(name)
    except corpus.NotInstalled as e:
        pytest.skip(f"{e}; tox -e all-plugins has all three plugins")


@pytest.mark.parametrize("runner", RUNNERS)
def test_interpreter_agrees_with_jax_and_numpy(runner):
    print(f"PALLAS_DIFFERENTIAL_SEED={SEED}, {EXAMPLES} examples")
    interpret = _runner(runner)
    refused, known = [], {}
    for i in range(EXAMPLES):
        ex, want_jax, want_np = example(i)
        why = KNOWN.get((runner, ex.family, ex.op))
        if why is not None:
            try:
                _check(interpret, ex, want_jax, want_np)
            except Exception as e:   # the known disagreement (a wrong value or an error)
                known[str(ex)] = f"{why} [{type(e).__name__}]"
                continue
            pytest.fail(f"known disagreement {why!r} no longer shows on {ex}: drop its entry")
        try:
            _check(interpret, ex, want_jax, want_np)
        except pl.backend_api.BackendCapabilityError as e:
            refused.append(f"{ex}: {str(e).splitlines()[0]}")
        except ImportError as e:     # masked loads are pallas_triton's
            refused.append(f"{ex}: needs {e.name}, not installed here")
    if refused:
        print("refused (check() before running, or a missing plugin):", *refused, sep="\n  ")
    if known:
        pytest.xfail("known disagreements: " + "; ".join(f"{k}: {v}" for k, v in known.items()))


def _check(interpret, ex, want_jax, want_np):
    got = np.asarray(jax.block_until_ready(D.build(ex, pl, interpret=interpret)(*ex.operands)))
    transcendental = 2 if ex.op in ("exp", "log", "tanh", "sqrt") else 1
    compare(got, want_jax, ex, "JAX interpret", transcendental)
    atol = None
    if ex.family == "revisit" and ex.dtype == "float32":
        # float32 sums in grid order against float64: the error bound grows with sum |x|
        x = ex.operands[0].astype(np.float64)
        atol = 1e-6 * np.abs(np.where(np.isfinite(x), x, 0)).sum(1, keepdims=True)
    compare(got, want_np, ex, "NumPy", 2 * transcendental, atol=atol)
