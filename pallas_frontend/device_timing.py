"""On-device time of one call of a JAX function, measured in a device loop.

A single call carries launch and host-sync costs (about 0.5 ms on a TPU) that
can dwarf a fast kernel. Here ``n`` calls run inside one jitted
``lax.fori_loop``; each iteration passes the arguments through
``lax.optimization_barrier`` together with the previous iteration's outputs,
so the compiler can neither hoist the call out of the loop nor merge
iterations. With ``T(n)`` the wall time of the loop of ``n`` calls (started
and waited for from the host), one call takes ``(T(3n) - T(n)) / 2n``: the
fixed costs (launch, sync, the loop's first copy of its arguments) cancel.

``n`` grows until ``T(n)`` is well above timer noise (``min_loop_seconds``),
bounded by ``max_calls``; the loop is compiled once (``n`` is an argument).
The estimate is taken from the fastest of ``repetitions`` measurements of
each of ``T(n)`` and ``T(3n)``.

This module imports only the standard library, ``numpy`` and ``jax`` (public API present
in JAX 0.10 and 0.12) and nothing of pallas_frontend, so a host without the
project can load it by file path (``importlib.util.spec_from_file_location``).
"""

import threading
import time
import weakref

import jax
import jax.numpy as jnp
import numpy as np


class LoopTiming:
    """The result of ``time_per_call``: ``seconds`` per call, and the raw numbers.

    ``calls`` is ``n``; ``loop_seconds`` and ``triple_loop_seconds`` hold every
    measurement of ``T(n)`` and ``T(3n)``; ``per_call_seconds`` the estimate of
    each repetition, ``(T(3n) - T(n)) / 2n``; ``upper_bound`` is True when the
    difference was not positive (noise larger than the calls) and ``seconds``
    is then ``T(3n) / 3n``, which still counts the fixed costs.
    """

    def __init__(self, seconds, calls, loop_seconds, triple_loop_seconds, upper_bound):
        self.seconds = float(seconds)
        self.calls = int(calls)
        self.loop_seconds = [float(t) for t in loop_seconds]
        self.triple_loop_seconds = [float(t) for t in triple_loop_seconds]
        self.per_call_seconds = [(t3 - t1) / (2 * self.calls)
                                 for t1, t3 in zip(self.loop_seconds, self.triple_loop_seconds)]
        self.upper_bound = bool(upper_bound)

    @property
    def median_seconds(self):
        """The median of the repetitions' estimates (the ``seconds`` field uses the minima)."""
        return float(np.median(self.per_call_seconds))

    def as_dict(self):
        """The numbers as JSON-ready data."""
        return {"seconds": self.seconds, "median_seconds": self.median_seconds,
                "calls": self.calls, "loop_seconds": self.loop_seconds,
                "triple_loop_seconds": self.triple_loop_seconds,
                "per_call_seconds": self.per_call_seconds, "upper_bound": self.upper_bound}

    def __repr__(self):
        return (f"LoopTiming(seconds={self.seconds:.3e}, calls={self.calls}, "
                f"upper_bound={self.upper_bound})")


def device_loop(fn, args):
    """A jitted ``loop(args, n)`` that makes ``n`` dependent calls ``fn(*args)``
    and returns the last call's outputs (for ``n = 0``: zeros of their shapes)."""
    out_shapes = jax.eval_shape(fn, *args)

    def loop(loop_args, n):
        def body(_, carry):
            carried_args, previous = carry
            # Opaque to the compiler: the arguments now seem to depend on the
            # previous outputs, so the call cannot leave the loop or be merged.
            carried_args, previous = jax.lax.optimization_barrier((carried_args, previous))
            return carried_args, fn(*carried_args)
        first = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), out_shapes)
        return jax.lax.fori_loop(0, n, body, (tuple(loop_args), first))[1]

    return jax.jit(loop)


# fn -> its loop compiled ahead (pl.autotune compiles its candidates' loops in
# threads, then times them one at a time)
_prepared: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_prepared_lock = threading.Lock()


def lower_loop(fn, args):
    """The device loop of ``fn(*args)``, lowered: ``.compile()`` it (in any thread:
    XLA compiles outside the GIL) and hand the result to ``use_compiled_loop``."""
    args = tuple(args)
    return device_loop(fn, args).lower(args, np.int32(1))


def use_compiled_loop(fn, compiled):
    """The next ``time_per_call`` of this very ``fn`` object runs ``compiled``."""
    with _prepared_lock:
        _prepared[fn] = compiled


def _wall_seconds(loop, args, n):
    start = time.perf_counter()
    jax.block_until_ready(loop(args, np.int32(n)))
    return time.perf_counter() - start


def time_per_call(fn, *args, min_loop_seconds=0.02, max_calls=1 << 16, repetitions=3,
                  max_seconds=30.0):
    """Seconds one call of ``fn(*args)`` takes on the device that runs it.

    ``fn`` is a pure JAX function (any pytree of outputs); ``args`` are its
    arrays (pytrees allowed). Bind other arguments with ``functools.partial``.
    ``n`` doubles from 1 until the loop of ``n`` calls takes at least
    ``min_loop_seconds``, or reaches ``max_calls``, or the calibration has spent
    ``max_seconds``. Returns a ``LoopTiming``.
    """
    if repetitions < 1:
        raise ValueError(f"time_per_call: repetitions={repetitions!r} must be at least 1")
    with _prepared_lock:
        loop = _prepared.pop(fn, None)
    loop = loop or device_loop(fn, args)
    _wall_seconds(loop, args, 1)             # compiles (unless prepared), and warms caches
    calls, began = 1, time.perf_counter()
    while True:
        elapsed = _wall_seconds(loop, args, calls)
        if (elapsed >= min_loop_seconds or calls >= max_calls
                or time.perf_counter() - began > max_seconds):
            break
        # jump most of the way at once when a loop is far too short
        factor = 2 if elapsed <= 0 else min(64, max(2, int(min_loop_seconds / elapsed) + 1))
        calls = min(max_calls, calls * factor)
    single, triple = [], []
    for _ in range(repetitions):
        single.append(_wall_seconds(loop, args, calls))
        triple.append(_wall_seconds(loop, args, 3 * calls))
    difference = min(triple) - min(single)
    if difference > 0:
        return LoopTiming(difference / (2 * calls), calls, single, triple, False)
    return LoopTiming(min(triple) / (3 * calls), calls, single, triple, True)
