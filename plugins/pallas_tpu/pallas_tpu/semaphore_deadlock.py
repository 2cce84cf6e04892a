"""A wait that nothing can ever satisfy, found before TPU interpret mode runs.

JAX 0.12's TPU interpreter blocks forever in such a wait (its simulated cores
poll the semaphore with no time limit), where the frontend's sequential
interpreter raises ``SemaphoreDeadlockError``. A semaphore the kernel
allocates (``scratch_shapes`` or ``run_scoped``) starts at zero and only this
kernel can signal it -- locally, from another core or from another device,
all of which are equations of the kernel on that same semaphore. So a
semaphore that is waited on but that no equation could signal is a certain
deadlock. Any use we cannot classify counts as a possible signal: the check
refuses only what would surely hang.
"""

from __future__ import annotations

from jax.extend.core import Literal, jaxprs_in_params

import pallas_frontend as pf
from pallas_frontend.backend_api import KernelIR, source_line


# Uses of a semaphore that never raise its count.
_WAITS = frozenset({"semaphore_wait", "tpu_dma_wait"})
_NEUTRAL = frozenset({"semaphore_read", "free_ref"})


def _is_semaphore(aval) -> bool:
    return "SEMAPHORE" in str(getattr(aval, "memory_space", "")).upper()


def nested_bodies(eqn):
    """(nested jaxpr, outer operands its invars receive, or None if unknown) for each
    body of ``eqn``: a while loop's cond and body take their consts then the carry;
    every other body a suffix of the operands."""
    if eqn.primitive.name == "while":
        p = eqn.params
        cn, bn = p["cond_nconsts"], p["body_nconsts"]
        carry = list(eqn.invars[cn + bn:])
        return [(p["cond_jaxpr"].jaxpr, list(eqn.invars[:cn]) + carry),
                (p["body_jaxpr"].jaxpr, list(eqn.invars[cn:cn + bn]) + carry)]
    out = []
    for sub in jaxprs_in_params(eqn.params):
        n = len(sub.invars)   # scan, cond (after its predicate), jit, run_state: a suffix
        out.append((sub, list(eqn.invars[len(eqn.invars) - n:]) if n <= len(eqn.invars) else None))
    return out


def _awaited(eqn) -> bool:
    """False for ``semaphore_wait(sem, 0)``, which returns at once."""
    if eqn.primitive.name != "semaphore_wait":
        return True
    value = eqn.invars[-1]
    return not (isinstance(value, Literal) and int(value.val) <= 0)


def check(kernel: KernelIR) -> None:
    """Raises ``SemaphoreDeadlockError`` for a wait on a kernel-allocated
    semaphore that no equation of the kernel could signal."""
    invars = kernel.jaxpr.invars
    first_scratch = len(invars) - len(kernel.scratch_avals)
    roots = {v: f"scratch_shapes[{i}]" for i, v in enumerate(invars[first_scratch:])
             if _is_semaphore(v.aval)}
    waits, signalled = {}, set()

    def visit(jaxpr, alias):
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            if name == "empty_ref" and _is_semaphore(eqn.outvars[0].aval):
                where = source_line(eqn) or kernel.source
                alias[eqn.outvars[0]] = f"the run_scoped semaphore allocated at {where}"
            used = {alias[v] for v in eqn.invars if not isinstance(v, Literal) and v in alias}
            bodies = nested_bodies(eqn)
            if name in _WAITS:
                for root in used:
                    if _awaited(eqn):
                        waits.setdefault(root, eqn)
            elif name not in _NEUTRAL and not bodies:
                signalled.update(used)
            for sub, operands in bodies:
                if operands is None:
                    signalled.update(used)
                    operands = []
                visit(sub, {s: alias[o] for s, o in zip(sub.invars, operands)
                            if not isinstance(o, Literal) and o in alias})

    visit(kernel.jaxpr, dict(roots))
    for root, eqn in waits.items():
        if root in signalled:
            continue
        where = source_line(eqn) or kernel.source
        what = "a DMA wait" if eqn.primitive.name == "tpu_dma_wait" else "pl.semaphore_wait"
        raise pf.SemaphoreDeadlockError(
            f"Kernel {kernel.name_and_src_info} would wait forever: {what} at {where} waits on "
            f"{root}, but nothing in the kernel signals that semaphore (no semaphore_signal "
            "and no DMA start uses it), and TPU interpret mode would block there without "
            "end. Signal it (or start the DMA) before waiting, or drop the wait.")
