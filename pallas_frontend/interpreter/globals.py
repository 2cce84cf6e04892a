"""``pl.get_global`` in the interpreter: each global becomes one more scratch
buffer, so it persists across the grid points of a call."""

from __future__ import annotations

from pallas_frontend import _jax_compat as jc
from pallas_frontend.backend_api import KernelIR


def lift_globals(kernel: KernelIR) -> KernelIR:
    """``kernel`` with every top-level ``get_global`` replaced by a trailing
    scratch Ref (unchanged when there is none)."""
    jaxpr = kernel.jaxpr
    found = [e for e in jaxpr.eqns if e.primitive.name == "get_global"]
    for eqn in jaxpr.eqns:
        for sub in jc.sub_jaxprs(eqn):
            if any(e.primitive.name == "get_global" for e in _all_eqns(sub)):
                where = jc.jaxpr_source_line(eqn) or kernel.source
                raise NotImplementedError(
                    f"{where}: pl.get_global inside a loop or branch body is not supported by "
                    "the interpreter; call it at the top of the kernel body and use the Ref "
                    "inside the loop.")
    if not found:
        return kernel
    avals = [e.params["aval"] for e in found]
    n = len(jaxpr.invars)

    def body(*args):
        extra = iter(args[n:])

        def before_eqn(eqn, invals):
            return [next(extra)] if eqn.primitive.name == "get_global" else None

        return jc.eval_jaxpr_rewriting(jaxpr, args[:n], before_eqn, lambda p: p)

    new, _ = jc.trace_kernel_jaxpr(body, [v.aval for v in jaxpr.invars] + avals,
                                   traced_for="pallas kernel (globals)")
    return kernel.replace(jaxpr=new, scratch_avals=kernel.scratch_avals + tuple(avals))


def _all_eqns(jaxpr):
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in jc.sub_jaxprs(eqn):
            yield from _all_eqns(sub)
