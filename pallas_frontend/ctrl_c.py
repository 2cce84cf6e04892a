"""Telling a Ctrl-C from a ``KeyboardInterrupt`` that a plugin raises itself.

Python delivers a signal to the main thread, where the default SIGINT handler
raises ``KeyboardInterrupt``. While a plugin loads, ``watch()`` wraps that
handler so that a SIGINT is noted before it raises as before: a
``KeyboardInterrupt`` that arrives with no SIGINT noted (or in another thread,
where no signal lands, or while SIGINT is ignored) is the plugin's own code
raising it, a failure of that plugin like any other exception, never a reason to
take the program down. A real Ctrl-C still interrupts.
"""

from __future__ import annotations

import contextlib
import signal
import threading


class Watch:
    """Whether a SIGINT arrived while the watch was on (``pressed``)."""

    def __init__(self):
        self.pressed = False


@contextlib.contextmanager
def watch():
    """Notes a SIGINT during the block (``Watch.pressed``); the handler that was
    installed still runs. Outside the main thread, or when SIGINT is ignored or
    left to the system, no Ctrl-C can raise ``KeyboardInterrupt`` here, so
    nothing is installed and ``pressed`` stays False."""
    state = Watch()
    previous = None
    if threading.current_thread() is threading.main_thread():
        with contextlib.suppress(ValueError, TypeError, OSError):
            previous = signal.getsignal(signal.SIGINT)
    if not callable(previous):          # SIG_IGN, SIG_DFL, None (set outside Python)
        yield state
        return

    def noted(signum, frame):
        state.pressed = True
        return previous(signum, frame)
    try:
        signal.signal(signal.SIGINT, noted)
    except (ValueError, OSError):
        yield state
        return
    try:
        yield state
    finally:
        # a plugin that installed its own handler meanwhile keeps it
        with contextlib.suppress(ValueError, OSError):
            if signal.getsignal(signal.SIGINT) is noted:
                signal.signal(signal.SIGINT, previous)
