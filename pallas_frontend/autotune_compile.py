"""pl.autotune's candidates compiled ahead, several at a time.

A tuner that compiles each candidate when it first runs it, and again inside
the timing loop, spends most of its time compiling: on the v5e's host one
8192^3 bf16 matmul candidate took 15 s to compile, and 53 such candidates did
not finish in six minutes (2026-12-06). Tracing and lowering hold the GIL and
run here one at a time; XLA's compile does not, so threads overlap the
compiles of many candidates. Each candidate keeps its own result or the error
that stopped it, which the tuner reports as before.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

# More threads than this add memory (each compile holds its program) for little gain.
MOST_THREADS = 8


def threads() -> int:
    """Compile threads: the CPUs this process may use, at most ``MOST_THREADS``."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:          # not every OS has affinity masks
        cpus = os.cpu_count() or 1
    return max(1, min(MOST_THREADS, cpus))


def is_array(x) -> bool:
    """An argument leaf the tuner passes as an array (the rest are fixed)."""
    import jax
    import numpy as np
    return isinstance(x, (jax.Array, np.ndarray, jax.core.Tracer, jax.ShapeDtypeStruct))


def bound_call(fn, config, args, kwargs, leaves):
    """``(call, arrays)``: ``call(*arrays)`` is ``fn(*args, **kwargs, **config)``
    with the array leaves as its parameters and every other leaf fixed (static)."""
    import jax
    treedef = jax.tree.structure((tuple(args), dict(kwargs)))
    where = [i for i, x in enumerate(leaves) if is_array(x)]
    fixed = list(leaves)

    def call(*arrays):
        filled = list(fixed)
        for i, a in zip(where, arrays):
            filled[i] = a
        call_args, call_kwargs = jax.tree.unflatten(treedef, filled)
        return fn(*call_args, **call_kwargs, **config)

    return call, [leaves[i] for i in where]


def _in_parallel(work: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    """``work(item)`` for each item, in threads; an exception is that item's result."""
    def guarded(item):
        try:
            return work(item)
        except Exception as e:  # noqa: BLE001 - a failing candidate is a result
            return e
    if len(items) <= 1:
        return [guarded(i) for i in items]
    with ThreadPoolExecutor(min(threads(), len(items))) as pool:
        return list(pool.map(guarded, items))


def _lower_then_compile(lower, calls) -> list[Any]:
    """``lower(call, arrays)`` one call at a time (tracing holds the GIL anyway),
    then ``.compile()`` of each in threads; an exception is that call's result."""
    lowered = []
    for call, arrays in calls:
        try:
            lowered.append(lower(call, arrays))
        except Exception as e:  # noqa: BLE001
            lowered.append(e)
    return _in_parallel(lambda low: low if isinstance(low, Exception) else low.compile(),
                        lowered)


def compile_calls(calls: Sequence[tuple[Callable, Sequence[Any]]]) -> list[Any]:
    """For each ``(call, arrays)``: ``jax.jit(call)`` compiled for ``arrays`` (a
    ``Compiled`` to run as ``compiled(*arrays)``), or the exception that stopped
    its tracing, lowering or compile."""
    import jax
    return _lower_then_compile(lambda call, arrays: jax.jit(call).lower(*arrays), calls)


def prepare_timing_loops(timer, calls: Sequence[tuple[Callable, Sequence[Any]]]) -> None:
    """When ``timer`` is the default device-loop timer (a backend's inherited
    ``seconds_per_call``), compiles each call's timing loop, in threads, for it
    to use; a loop that fails to compile is left to the timer, which then
    reports the failure itself. Another timer is the backend's own business."""
    from pallas_frontend import device_timing
    from pallas_frontend.backend_base import Backend, default_seconds_per_call
    if timer is not default_seconds_per_call and getattr(timer, "__func__", None) is not (
            Backend.seconds_per_call):
        return
    compiled = _lower_then_compile(device_timing.lower_loop, calls)
    for (call, _), loop in zip(calls, compiled):
        if not isinstance(loop, Exception):
            device_timing.use_compiled_loop(call, loop)
