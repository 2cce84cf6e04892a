"""One interpreted kernel run at a time, for interpreters that keep a run's
state in module globals (part of the contract, API 1.10).

JAX's TPU and Mosaic GPU interpreters keep the simulated memory of a kernel run
in one module-global object, made by the run's first host callback (its
set-up) and dropped by its last (its clean-up). Two runs that overlap (one
jitted call from several threads) share it: wrong results, or internal errors.
Under ``jax.jit`` a run happens when XLA executes those callbacks, so the gate
is entered by the set-up and left by the clean-up, never at trace time.
``RunGate.gating`` swaps the two callbacks, while a kernel is lowered, for
ones that do so (JAX looks them up when it lowers the kernel).

A run of a ``shard_map`` kernel has one device thread per device, and those
threads wait for each other at the interpreter's barriers, so a run admits its
``parties`` together: holding the gate against the other devices of the same
run would deadlock. A run that failed never reaches its clean-up; the next one
takes over once ``failed(memory)`` says so, or once ``abandon()`` was called.

Pure Python: the owner of the callbacks (a private JAX module) is handed in by
the backend's own compatibility module.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator


def _never_failed(memory: object) -> bool:
    return False


class RunGate:
    """Admits one interpreted kernel run at a time, process-wide (API 1.10).

    ``failed(memory)`` says whether the run inside, whose state is ``memory``
    (what the ``gating`` set-up recorded), has failed and so will never
    leave. Use one gate per interpreter: the runs of two interpreters with
    separate globals need not take turns."""

    def __init__(self, failed: Callable[[object], bool] = _never_failed):
        self._failed = failed
        self._cond = threading.Condition()
        self._inside = 0        # entrants of the current run still inside
        self._places = 0        # entrants the current run still admits
        self._abandoned = False  # the current run raised: it will never leave
        #: The current run's state (its simulated memory), or None.
        self.memory: object = None
        self._swap_lock = threading.Lock()
        # (owner, names) -> the original and gated callbacks, and how many are inside
        self._swaps: dict[tuple[int, str, str], tuple[Any, Any, Any, Any]] = {}
        self._swap_users: dict[tuple[int, str, str], int] = {}

    def enter(self, parties: int = 1) -> None:
        """Waits until no other run is inside (or the one inside has failed),
        then enters; the first of a run's ``parties`` entrants opens it for
        the rest."""
        with self._cond:
            while self._places == 0 and self._inside > 0:
                if self._abandoned or (self.memory is not None and self._failed(self.memory)):
                    self._inside = 0    # abandoned by a failure: take over
                    break
                # a timeout: a failure is recorded without a notify
                self._cond.wait(timeout=0.05)
            if self._places == 0:
                self._places = max(int(parties), 1)
                self.memory = None
                self._abandoned = False
            self._places -= 1
            self._inside += 1

    def abandon(self) -> None:
        """The run inside raised from one of its callbacks (its clean-up will
        not run): the next run may enter."""
        with self._cond:
            self._abandoned = True
            self._cond.notify_all()

    def leave(self) -> None:
        """One entrant of the run inside leaves; the last one closes the run."""
        with self._cond:
            if self._inside == 0:      # a run taken over after its failure
                return
            self._inside -= 1
            if self._inside == 0:
                self._places = 0
                self.memory = None
            self._cond.notify_all()

    def gating(self, owner: object, *, set_up: str, clean_up: str,
               parties: Callable[..., int],
               memory: Callable[[], object]) -> contextlib.AbstractContextManager:
        """A context manager: while inside it, ``owner.<set_up>`` and
        ``owner.<clean_up>`` are replaced by versions that enter this gate
        (``parties(*args, **kwargs)`` of the set-up call: how many device
        threads the run has) and leave it; after the set-up, ``memory()``
        is recorded as the run's state. Threads may overlap inside it: the
        originals come back when the last one leaves."""
        key = (id(owner), set_up, clean_up)
        with self._swap_lock:
            if key not in self._swaps:
                self._swaps[key] = self._gated_pair(owner, set_up, clean_up, parties, memory)
        return self._swapped(key, owner, set_up, clean_up, *self._swaps[key])

    def _gated_pair(self, owner, set_up, clean_up, parties, memory):
        original_set_up, original_clean_up = getattr(owner, set_up), getattr(owner, clean_up)

        def gated_set_up(*args, **kwargs):
            self.enter(parties(*args, **kwargs))
            try:
                out = original_set_up(*args, **kwargs)
            except BaseException:
                self.leave()
                raise
            self.memory = memory()
            return out

        def gated_clean_up(*args, **kwargs):
            try:
                return original_clean_up(*args, **kwargs)
            finally:
                self.leave()
        return original_set_up, original_clean_up, gated_set_up, gated_clean_up

    @contextlib.contextmanager
    def _swapped(self, key, owner, set_up, clean_up, original_set_up, original_clean_up,
                 gated_set_up, gated_clean_up) -> Iterator[None]:
        with self._swap_lock:
            self._swap_users[key] = self._swap_users.get(key, 0) + 1
            setattr(owner, set_up, gated_set_up)
            setattr(owner, clean_up, gated_clean_up)
        try:
            yield
        finally:
            with self._swap_lock:
                self._swap_users[key] -= 1
                if self._swap_users[key] == 0:
                    setattr(owner, set_up, original_set_up)
                    setattr(owner, clean_up, original_clean_up)
