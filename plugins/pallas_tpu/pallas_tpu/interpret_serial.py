"""One interpreted kernel run at a time, process-wide.

JAX's TPU interpreter keeps the simulated memory of a kernel run in one
module-global object, created by the run's first host callback and dropped by
its last. Two runs that overlap (the same jitted call from several threads)
share it: wrong results, or internal errors. Under ``jax.jit`` a run happens
when XLA executes the callbacks, so the gate is taken by the first callback and
left by the last one (``_jax_private.serialized_interpreter``), never at trace
time.

A run of a ``shard_map`` kernel has one device thread per device, and those
threads wait for each other at the interpreter's barriers, so the gate admits
``parties`` entrants per run: holding it against the other devices of the same
run would deadlock. A run that failed never reaches its last callback; the
next run takes over once the failed run's memory records the failure.
"""

from __future__ import annotations

import threading


class RunGate:
    def __init__(self):
        self._cond = threading.Condition()
        self._inside = 0        # entrants of the current run still inside
        self._places = 0        # entrants the current run still admits
        self.memory = None      # the current run's simulated memory
        self._abandoned = False  # the current run raised: it will never leave

    def enter(self, parties: int, failed) -> None:
        """Waits until no other run is inside; ``failed(memory)`` says whether
        the run inside has failed (and so will never leave)."""
        with self._cond:
            while self._places == 0 and self._inside > 0:
                if self._abandoned or (self.memory is not None and failed(self.memory)):
                    self._inside = 0    # abandoned by a failure: take over
                    break
                self._cond.wait(timeout=0.05)
            if self._places == 0:
                self._places = max(int(parties), 1)
                self.memory = None
                self._abandoned = False
            self._places -= 1
            self._inside += 1

    def abandon(self) -> None:
        """The run inside raised from one of its callbacks (its clean-up
        will not run): the next run may enter."""
        with self._cond:
            self._abandoned = True
            self._cond.notify_all()

    def leave(self) -> None:
        with self._cond:
            if self._inside == 0:      # a run taken over after its failure
                return
            self._inside -= 1
            if self._inside == 0:
                self._places = 0
                self.memory = None
            self._cond.notify_all()


GATE = RunGate()
