"""The autotune cache under concurrent writers, corrupt files and special files,
and the tuner's choice when a candidate outputs NaN (issue 39).

Each test's reference is independent of the module under test: the set of keys
the writers wrote, a file's bytes on disk, ``os.stat``, NumPy's sum.
"""

import os
import stat
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import pytest

import pallas_frontend as pl
from pallas_frontend import autotune_cache
from pallas_frontend.env_config import ConfigError

from conftest import rand
from test_autotune import FakeTimer, add_kernel, fake_timer  # noqa: F401 - shared helpers


@pytest.fixture(autouse=True)
def cache_file(tmp_path, monkeypatch):
    path = tmp_path / "autotune.json"
    monkeypatch.setenv(autotune_cache.ENV_CACHE, str(path))
    return path



def _entry(i):
    return autotune_cache.make_entry({"a=1": float(i) + 1.0, "a=2": None})


# --- concurrent writers ------------------------------------------------------------------

WRITER = """
import sys, time
from pallas_frontend import autotune_cache
path, who, n, start = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
while time.time() < start:
    time.sleep(0.001)
for i in range(n):
    entry = autotune_cache.make_entry({"a=1": float(i) + 1.0, "a=2": None})
    assert autotune_cache.write_entry(path, f"{who}-{i}", entry)
"""


def test_concurrent_processes_keep_every_entry(tmp_path):
    path = tmp_path / "shared.json"
    procs, per = 4, 25
    start = time.time() + 1.5         # every process imports, then all write at once
    runs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), f"p{w}", str(per),
                              str(start)], stderr=subprocess.PIPE, text=True)
            for w in range(procs)]
    for r in runs:
        _, err = r.communicate(timeout=120)
        assert r.returncode == 0, err
    wanted = {f"p{w}-{i}" for w in range(procs) for i in range(per)}
    assert set(autotune_cache.read_entries(path)) == wanted
    # no lock file nor temporary left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shared.json"]


def test_concurrent_threads_keep_every_entry(tmp_path):
    path = tmp_path / "shared.json"
    threads, per = 4, 40
    barrier = threading.Barrier(threads)
    failures = []

    def write(who):
        barrier.wait()
        for i in range(per):
            if not autotune_cache.write_entry(path, f"t{who}-{i}", _entry(i)):
                failures.append((who, i))

    workers = [threading.Thread(target=write, args=(w,)) for w in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(timeout=120)
    assert not failures
    wanted = {f"t{w}-{i}" for w in range(threads) for i in range(per)}
    assert set(autotune_cache.read_entries(path)) == wanted
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shared.json"]


def test_a_lock_held_too_long_warns_and_keeps_the_file(tmp_path, monkeypatch):
    fcntl = pytest.importorskip("fcntl")
    path = tmp_path / "held.json"
    assert autotune_cache.write_entry(path, "old", _entry(0))
    before = path.read_bytes()
    monkeypatch.setattr(autotune_cache, "LOCK_TIMEOUT_S", 0.2)
    with open(tmp_path / "held.json.lock", "w") as holder:       # another writer's lock
        fcntl.flock(holder, fcntl.LOCK_EX)
        with pytest.warns(UserWarning, match="cannot be written.*held"):
            assert not autotune_cache.write_entry(path, "new", _entry(1))
    assert path.read_bytes() == before


# --- files the tuned call cannot use -----------------------------------------------------

@pytest.mark.parametrize("content, why", [
    (b"\xff\xfe{\x00\x80", "not UTF-8"),
    (b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
    (b'{"format": "pallas_frontend.autotune/1", "entries": ' + b"[" * 200_000, "nested too deeply"),
])
def test_unreadable_cache_content_warns_and_the_call_goes_on(rng, fake_timer, cache_file,
                                                              content, why):
    cache_file.write_bytes(content)
    fake_timer([2e-3, 1e-3])
    tuned = pl.autotune(add_kernel, configs=[{"block": 64}, {"block": 128}],
                        backend="fake_timer", measure=True)
    x, y = rand(rng, 256), rand(rng, 256)
    with pytest.warns(UserWarning, match=why):
        out = tuned(x, y)
    np.testing.assert_allclose(np.asarray(out), x.astype(np.float64) + y, rtol=1e-6)
    (entry,) = autotune_cache.read_entries(cache_file).values()   # replaced by a valid file
    assert entry["winner"] == "block=128"


def _in_thread(fn, seconds=10.0):
    """``fn()``'s result, or a failure if it does not return within ``seconds``
    (a FIFO opened for reading waits for a writer forever)."""
    result = {}

    def run():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result["value"] = fn()
        result["warnings"] = [str(w.message) for w in caught]

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        # unblock the reader so the process can end: a writer opens the FIFO once
        pytest.fail(f"{fn} still blocked after {seconds} s")
    return result


needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")


@needs_fifo
def test_a_fifo_named_by_the_variable_is_refused_without_opening_it(tmp_path, monkeypatch):
    fifo = tmp_path / "autotune.json"
    os.mkfifo(fifo)
    monkeypatch.setenv(autotune_cache.ENV_CACHE, str(fifo))
    try:
        with pytest.raises(ConfigError, match=rf"{autotune_cache.ENV_CACHE}=.*special file.*"
                                              r"FIFO.*regular file"):
            autotune_cache.default_cache_path()
    finally:
        _release(fifo)


@needs_fifo
def test_a_fifo_given_as_cache_is_never_opened(rng, fake_timer, tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    try:
        read = _in_thread(lambda: autotune_cache.read_entries(fifo))
        assert read["value"] == {}
        assert any("FIFO" in w and "never opened" in w for w in read["warnings"])
        write = _in_thread(lambda: autotune_cache.write_entry(fifo, "k", _entry(0)))
        assert write["value"] is False
        assert any("FIFO" in w and "regular .json file" in w for w in write["warnings"])
        assert stat.S_ISFIFO(os.stat(fifo).st_mode)                 # left as it was

        fake_timer([2e-3, 1e-3])
        tuned = pl.autotune(add_kernel, configs=[{"block": 64}, {"block": 128}],
                            backend="fake_timer", measure=True, cache=fifo)
        x, y = rand(rng, 256), rand(rng, 256)
        call = _in_thread(lambda: np.asarray(tuned(x, y)))
        np.testing.assert_allclose(call["value"], x.astype(np.float64) + y, rtol=1e-6)
        assert tuned.best_config(x, y) == {"block": 128}            # kept in memory
    finally:
        _release(fifo)


def _release(fifo):
    """Opens the FIFO's write end without blocking, so that a reader stuck on it
    (the code before the fix) returns and the test process can end."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


# --- a candidate that outputs NaN --------------------------------------------------------

def test_a_nan_output_never_wins_a_tie_and_the_warning_names_it(rng, fake_timer):
    # block 96 over 256 elements: a grid of 2 leaves the last 64 outputs unwritten (NaN in
    # the interpreter); block 128 writes everything. One against one: a tie by count.
    fake_timer([1e-3])
    tuned = pl.autotune(add_kernel, configs=[{"block": 96}, {"block": 128}],
                        backend="fake_timer", measure=True, name="nan_tie")
    x, y = rand(rng, 256), rand(rng, 256)
    with pytest.warns(UserWarning, match=r"\['block=96'\] output NaN where \['block=128'\]"):
        out = np.asarray(tuned(x, y))
    np.testing.assert_allclose(out, x.astype(np.float64) + y, rtol=1e-6)
    assert tuned.best_config(x, y) == {"block": 128}
    (bad, good) = next(iter(tuned.trials.values()))
    assert bad.seconds is None and "NaN at 64 elements" in bad.error
    assert good.seconds == 1e-3


def test_nan_loses_even_to_a_smaller_group(rng, fake_timer):
    # two candidates agree on a result with NaN, one gives the full sum: the full sum wins
    fake_timer([1e-3])
    # blocks 96 and 192 both cover the first 192 elements only: equal outputs, NaN tail
    tuned = pl.autotune(add_kernel, configs=[{"block": 96}, {"block": 192}, {"block": 64}],
                        backend="fake_timer", measure=True, name="nan_majority")
    x, y = rand(rng, 256), rand(rng, 256)
    ref = x.astype(np.float64) + y
    with pytest.warns(UserWarning, match="output NaN"):
        out = np.asarray(tuned(x, y))
    np.testing.assert_allclose(out, ref, rtol=1e-6)
    assert tuned.best_config(x, y) == {"block": 64}


def test_candidates_agreeing_on_nan_are_kept(rng, fake_timer):
    # NaN in the inputs: every candidate outputs it at the same place, and one wins
    fake_timer([2e-3, 1e-3])
    tuned = pl.autotune(add_kernel, configs=[{"block": 64}, {"block": 128}],
                        backend="fake_timer", measure=True, name="nan_agreed")
    x, y = rand(rng, 256), rand(rng, 256)
    x[5] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = np.asarray(tuned(x, y))
    assert np.isnan(out[5]) and np.sum(np.isnan(out)) == 1
    assert tuned.best_config(x, y) == {"block": 128}
