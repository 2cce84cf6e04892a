"""Debug checks inside a kernel, and how a failure inside a running kernel
reaches the user.

``pl.enable_debug_checks`` (JAX's own flag), ``pl.debug_check`` (a primitive
that fails the kernel through a host callback) and the record of the last
failure raised in such a callback, which ``pallas_call`` re-raises with its own
type (XLA would wrap it in a generic runtime error). ``primitives`` re-exports
these names, where the rest of the frontend imports them.
"""

from __future__ import annotations

import dis
import functools
import sys
import threading

import jax
import jax.numpy as jnp
import numpy as np

from pallas_frontend import _jax_compat as jc
from pallas_frontend.backend_api import FRONTEND_OWNER, kernel_primitive


# --- debug checks --------------------------------------------------------------

class _DebugChecksFlag:
    """``pl.enable_debug_checks``: ``pl.enable_debug_checks(True)`` sets the
    flag at once (process-wide, as ``jax.config.update`` does);
    ``with pl.enable_debug_checks(True):`` sets it for this thread only, until
    the block ends (other threads and the process-wide value are untouched).
    ``.value`` reads it.

    The flag is JAX's ``jax_pallas_enable_debug_checks`` (also set by JAX's
    ``pl.enable_debug_checks`` and ``jax.config.update``): part of every jit
    cache key, so a function jitted before the flag changed is traced again."""

    @property
    def value(self) -> bool:
        return bool(jc.debug_checks_state.value)

    def set(self, enabled: bool) -> None:
        jax.config.update(jc.debug_checks_state.name, bool(enabled))

    def __call__(self, enabled: bool = True):
        # The call cannot know what its result is used for, and setting the
        # process-wide value first (then handing it back on entry) let other
        # threads see it, and could leave it changed: the caller's next
        # instruction says whether this is a `with` header.
        if _opens_a_with_block(sys._getframe(1)):
            return _ScopedDebugChecks(bool(enabled))
        # A bare call sets the global value, not a thread-local one: a local value
        # left behind would hide every later jax.config.update of the switch.
        prev_global = bool(jc.debug_checks_state.get_global())
        self.set(enabled)
        return _RestoreDebugChecks(bool(enabled), prev_global)


@functools.lru_cache(maxsize=512)
def _instructions_after_calls(code) -> dict:
    """For each instruction of ``code``: the names of the two that follow it."""
    ins = list(dis.get_instructions(code))
    return {a.offset: tuple(b.opname for b in ins[k + 1:k + 3]) for k, a in enumerate(ins)}


def _opens_a_with_block(frame) -> bool:
    following = _instructions_after_calls(frame.f_code).get(frame.f_lasti, ())
    if not following:
        return False
    # 3.12/3.13: BEFORE_WITH; 3.14: COPY then LOAD_SPECIAL (__exit__)
    return following[0] in ("BEFORE_WITH", "BEFORE_ASYNC_WITH") or \
        following == ("COPY", "LOAD_SPECIAL")


class _ScopedDebugChecks:
    """``with pl.enable_debug_checks(x):`` -- this thread's value for the block."""

    def __init__(self, enabled: bool):
        self._enabled = enabled
        self._prev_local = None

    def __enter__(self):
        self._prev_local = jc.debug_checks_state.swap_local(self._enabled)
        return self

    def __exit__(self, *exc):
        jc.debug_checks_state.set_local(self._prev_local)
        return False


class _RestoreDebugChecks:
    """What a bare ``pl.enable_debug_checks(...)`` returns: already applied.
    Entered later anyway (``ExitStack.enter_context``), the value becomes this
    thread's for the block and the global one goes back to what it was."""

    def __init__(self, enabled: bool, prev_global: bool):
        self._enabled = enabled
        self._prev_global = prev_global
        self._prev_local = None

    def __enter__(self):
        self._prev_local = jc.debug_checks_state.swap_local(self._enabled)
        jax.config.update(jc.debug_checks_state.name, self._prev_global)
        return self

    def __exit__(self, *exc):
        jc.debug_checks_state.set_local(self._prev_local)
        return False


enable_debug_checks = _DebugChecksFlag()


class KernelCheckError(RuntimeError):
    """A ``pl.debug_check`` (or an out-of-block Ref access check) failed while
    the kernel ran."""


class SemaphoreDeadlockError(RuntimeError):
    """A ``pl.semaphore_wait`` can never be satisfied: in the sequential
    interpreter no other program can signal the semaphore."""


# The last check failure raised inside a host callback. XLA wraps callback
# exceptions in a generic runtime error (and may run callbacks on its own
# threads); ``pallas_call`` re-raises the recorded one instead: the user's
# message, with its own type.
_failure_lock = threading.Lock()
_kernel_failure: list[Exception] = []


def take_kernel_failure() -> Exception | None:
    with _failure_lock:
        return _kernel_failure.pop() if _kernel_failure else None


def _fail(err: Exception):
    with _failure_lock:
        _kernel_failure[:] = [err]
    raise err


debug_check_p = kernel_primitive("debug_check", owner=FRONTEND_OWNER, multiple_results=True)


# Checks the frontend adds itself (ref_checks) say what failed without this prefix.
FRONTEND_CHECK = "Out-of-range Ref access at "


def _raise_if_false(ok, message):
    if not bool(np.all(np.asarray(ok))):
        prefix = "" if message.startswith(FRONTEND_CHECK) else "pl.debug_check failed: "
        _fail(KernelCheckError(prefix + message))


def _raise_deadlock(ok, message):
    if not bool(np.all(np.asarray(ok))):
        _fail(SemaphoreDeadlockError(message))


def _debug_check_host(pred, *, message):
    jax.debug.callback(_raise_if_false, pred, message=message)
    return []


debug_check_p.def_effectful_abstract_eval(lambda pred, *, message: ([], {jc.debug_effect}))
debug_check_p.def_impl(lambda pred, *, message: _debug_check_host(pred, message=message))
jc.mlir.register_lowering(
    debug_check_p,
    lambda ctx, pred, *, message: jc.mlir.lower_fun(
        lambda p: _debug_check_host(p, message=message), multiple_results=True)(ctx, pred))
jc.batching.primitive_batchers[debug_check_p] = (
    lambda args, dims, *, message: (debug_check_p.bind(jnp.all(args[0]), message=message), []))


def debug_check(condition, message: str) -> None:
    """Fails the kernel with ``message`` when ``condition`` is false; a no-op
    unless debug checks are enabled (``pl.enable_debug_checks``) at trace time."""
    if not enable_debug_checks.value:
        return
    if isinstance(condition, (bool, np.bool_)):
        if not condition:
            raise KernelCheckError(f"pl.debug_check failed: {message}")
        return
    debug_check_p.bind(jnp.asarray(condition, dtype=bool), message=str(message))
