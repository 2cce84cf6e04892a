"""backend_api.RunGate (API 1.10): interpreted kernel runs one at a time, for
interpreters that keep a run's state in module globals (JAX's TPU and Mosaic
GPU interpreters; pallas_tpu and pallas_mgpu use it, issue 32). Pure Python:
threads, fake callbacks; each plugin checks its own interpreter in
plugins/*/tests/test_*_interpret_threads.py."""

from __future__ import annotations

import threading
import time
import types

import pytest

from pallas_frontend import backend_api, discovery
from pallas_frontend.backend_api import RunGate

WAIT = 10.0     # seconds a thread may take before the test calls it hung


def _start(target, *args) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def _join(*threads):
    for thread in threads:
        thread.join(WAIT)
    assert not any(t.is_alive() for t in threads), "a thread hung at the gate"


class _Occupancy:
    """How many runs are inside at once, and the most there ever were."""

    def __init__(self):
        self._lock = threading.Lock()
        self.now = self.most = self.done = 0

    def arrive(self):
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def depart(self):
        with self._lock:
            self.now -= 1
            self.done += 1


def test_runs_from_several_threads_take_turns():
    gate, seen = RunGate(), _Occupancy()

    def runs():
        for _ in range(5):
            gate.enter(1)
            seen.arrive()
            time.sleep(0.002)
            seen.depart()
            gate.leave()

    _join(*[_start(runs) for _ in range(6)])
    assert (seen.most, seen.done) == (1, 30)


def test_the_parties_of_one_run_are_inside_together_and_the_next_run_waits():
    gate = RunGate()
    both_inside = threading.Barrier(2, timeout=WAIT)   # deadlocks if the gate held one out
    inside, release, order = [threading.Event(), threading.Event()], threading.Event(), []

    def device(k):
        gate.enter(2)
        both_inside.wait()
        inside[k].set()
        release.wait(WAIT)
        order.append(f"device {k} leaves")
        gate.leave()

    devices = [_start(device, k) for k in range(2)]
    assert all(event.wait(WAIT) for event in inside)

    def next_run():
        gate.enter(1)
        order.append("next run enters")
        gate.leave()

    later = _start(next_run)
    time.sleep(0.2)
    assert order == [], "a run entered while a run of two devices was inside"
    release.set()
    _join(*devices, later)
    assert order[-1] == "next run enters" and len(order) == 3


@pytest.mark.parametrize("how", ["failure recorded in the run's memory", "abandon()"])
def test_a_run_that_failed_is_taken_over_by_the_next(how):
    gate = RunGate(failed=lambda memory: memory["failed"])
    gate.enter(1)
    gate.memory = {"failed": False}
    entered = threading.Event()
    waiting = _start(lambda: (gate.enter(1), entered.set()))
    assert not entered.wait(0.2), "a run entered while another was inside"
    if how == "abandon()":
        gate.abandon()
    else:
        gate.memory["failed"] = True
    assert entered.wait(WAIT), "the run after a failed one never entered"
    _join(waiting)
    assert gate.memory is None       # the new run starts with no state
    gate.leave()
    gate.enter(1)                    # free again: no wait
    gate.leave()


def _fake_interpreter(seen: _Occupancy):
    """A stand-in for a JAX interpreter module: set-up makes the run's memory
    global, clean-up drops it."""
    owner = types.SimpleNamespace(memory=None)

    def set_up(token, *, devices):
        if token == "bad":
            raise ValueError("set-up failed")
        seen.arrive()
        owner.memory = {"token": token}

    def clean_up():
        owner.memory = None
        seen.depart()
    owner.set_up, owner.clean_up = set_up, clean_up
    return owner


def _gating(gate, owner):
    return gate.gating(owner, set_up="set_up", clean_up="clean_up",
                       parties=lambda token, *, devices: devices,
                       memory=lambda: owner.memory)


def test_gating_swaps_the_callbacks_until_the_last_thread_inside_leaves():
    gate, owner = RunGate(), _fake_interpreter(_Occupancy())
    set_up, clean_up = owner.set_up, owner.clean_up
    first, second = _gating(gate, owner), _gating(gate, owner)
    with first:
        gated = owner.set_up, owner.clean_up
        assert set_up not in gated and clean_up not in gated
        second.__enter__()
    assert (owner.set_up, owner.clean_up) == gated   # one lowering still inside
    second.__exit__(None, None, None)
    assert (owner.set_up, owner.clean_up) == (set_up, clean_up)
    with _gating(gate, owner):
        assert (owner.set_up, owner.clean_up) == gated   # made once, reused


def test_gated_callbacks_serialize_runs_and_record_the_runs_memory():
    gate, seen = RunGate(), _Occupancy()
    owner = _fake_interpreter(seen)
    with _gating(gate, owner):
        set_up, clean_up = owner.set_up, owner.clean_up   # as JAX captures them when lowering
    memories = []

    def run(k):
        for call in range(4):
            set_up((k, call), devices=1)
            memories.append((gate.memory, {"token": (k, call)}))
            time.sleep(0.001)
            clean_up()

    _join(*[_start(run, k) for k in range(5)])
    assert (seen.most, seen.done) == (1, 20)
    assert all(recorded == expected for recorded, expected in memories)
    with pytest.raises(ValueError, match="set-up failed"):
        set_up("bad", devices=1)
    set_up("after", devices=1)       # the failed set-up left the gate
    clean_up()


def test_older_plugins_are_still_accepted_and_the_minor_compares_as_a_number():
    major, minor = backend_api.API_VERSION
    assert (major, minor) >= (1, 10) and backend_api.RunGate is RunGate

    def declaring(version):
        return type("B", (backend_api.Backend,), {"name": "b", "api_version": version,
                                                  "platforms": ("cpu",)})()

    assert discovery.validate_api_version(declaring((1, 9))) is None   # before RunGate
    assert discovery.validate_api_version(declaring((1, 10))) is None
    assert "upgrade pallas-frontend" in discovery.validate_api_version(
        declaring((major, minor + 1)))


def test_the_threaded_check_passes_on_the_built_in_interpreter():
    # the check the plugins run on their interpreters (pallas_frontend.testing.threaded);
    # the built-in interpreter keeps no run state in globals and needs no gate
    from pallas_frontend.testing.threaded import check_calls_from_threads
    check_calls_from_threads(threads=4, calls=2, interpret=True)
