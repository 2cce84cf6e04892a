"""Synchronisation across devices and cores: the barrier semaphore of a
collective kernel, ``core_barrier`` and ``run_on_first_core``.

``get_barrier_semaphore()`` records a primitive whose result is a semaphore
Ref; the evaluator replays it as JAX's ``pltpu.get_barrier_semaphore``, which
Mosaic maps to the semaphore XLA reserves for the kernel's
``CompilerParams(collective_id=...)`` and which JAX's TPU interpreter shares
between the simulated devices. The two helpers are written with the
frontend's portable ``pl.when`` / semaphore calls, so they need no rule here.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import jax
import jax.numpy as jnp

import pallas_frontend as pf
from pallas_frontend.backend_api import kernel_primitive

from pallas_tpu import _jax_private
from pallas_tpu.memory import SemaphoreKind
from pallas_tpu.primitives import OWNER

get_barrier_semaphore_p = kernel_primitive("tpu_get_barrier_semaphore", owner=OWNER)
# Its result is a Ref made by the primitive: signals and waits on it are
# effects on a Ref that is no input of the kernel jaxpr (as for jax.new_ref).
get_barrier_semaphore_p.ref_primitive = True
get_barrier_semaphore_p.ref_allocating = True


@get_barrier_semaphore_p.def_abstract_eval
def _barrier_abstract_eval(*, tag):
    from pallas_tpu.semaphore_types import SemaphoreRefType
    return SemaphoreRefType(jax.core.ShapedArray((), jnp.int32),
                            memory_space=SemaphoreKind.BARRIER)


def get_barrier_semaphore(tag: Hashable | None = None):
    """The barrier semaphore of this kernel: the one that devices running the
    same collective (same ``CompilerParams(collective_id=...)``, or the same
    ``tag``) signal one another on, with ``pl.semaphore_signal(sem,
    device_id=...)``. Wait it back down to 0 before the kernel ends."""
    if tag is not None:
        hash(tag)     # XLA keys the semaphore by it: an unhashable tag fails here
        if not _jax_private.barrier_semaphore_takes_tag():
            raise NotImplementedError(_jax_private.needs_newer_jax(
                "pallas_tpu.get_barrier_semaphore(tag=...)", "0.11"))
    return get_barrier_semaphore_p.bind(tag=tag)


def _core_count(core_axis_name: str) -> int:
    size = jax.lax.axis_size(core_axis_name)
    if not isinstance(size, int):
        raise TypeError(f"pallas_tpu: the size of core axis {core_axis_name!r} must be static.")
    return size


def run_on_first_core(core_axis_name: str) -> Callable:
    """A decorator: ``@run_on_first_core("core") def _(): ...`` runs the body
    once, on core 0 of ``core_axis_name`` (on every core when there is one)."""
    if _core_count(core_axis_name) == 1:
        return lambda f: f()

    def decorate(f):
        pf.when(jax.lax.axis_index(core_axis_name) == 0)(f)
    return decorate


def core_barrier(sem, *, core_axis_name: str) -> None:
    """Blocks until every core of ``core_axis_name`` has reached this call:
    each core adds 1 to ``sem`` on each other core, then waits for the
    ``n - 1`` signals sent to it. ``sem`` is a REGULAR semaphore, left at 0."""
    n = _core_count(core_axis_name)
    if n == 1:
        return
    me = jax.lax.axis_index(core_axis_name)
    for other in range(n):
        @pf.when(me != other)
        def _(other=other):
            pf.semaphore_signal(sem, 1, device_id={core_axis_name: jnp.int32(other)})
    pf.semaphore_wait(sem, n - 1)


def _replay_barrier_semaphore(eqn, invals):
    from jax.experimental.pallas import tpu as pltpu
    tag = eqn.params["tag"]
    return pltpu.get_barrier_semaphore() if tag is None else pltpu.get_barrier_semaphore(tag)


def _register():
    from pallas_tpu import evaluate
    evaluate.register_rule(get_barrier_semaphore_p, _replay_barrier_semaphore)


_register()
