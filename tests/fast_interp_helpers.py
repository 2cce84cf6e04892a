"""Shared helpers for the fast-interpreter tests: get a kernel's IR, run it
through the sequential and the vectorized paths, and kernels several tests use."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import pallas_frontend as pl
from pallas_frontend.interpreter import execute, vectorized


def kernel_ir(call, *args):
    """The KernelIR that ``call(*args)`` binds (the first pallas_call found)."""
    closed = jax.make_jaxpr(call)(*args)
    found = _find(closed.jaxpr)
    assert found is not None, "no pallas_call in the traced function"
    return found


def _find(jaxpr):
    from pallas_frontend import _jax_compat as jc
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            return eqn.params["kernel"]
        for sub in jc.sub_jaxprs(eqn):
            hit = _find(getattr(sub, "jaxpr", sub))
            if hit is not None:
                return hit
    return None


def run_both(call, *args):
    """(sequential outputs, vectorized outputs, vectorized plan) as NumPy arrays."""
    ir = kernel_ir(call, *args)
    seq_plan = execute.make_plan(ir)
    vec_plan = vectorized.make_plan(ir)
    seq = jax.jit(lambda *xs: execute.run_sequential(seq_plan, *xs))(*args)
    vec = jax.jit(lambda *xs: vectorized.run(vec_plan, *xs))(*args)
    return [np.asarray(o) for o in seq], [np.asarray(o) for o in vec], vec_plan


def carried_cumsum_kernel(x_ref, o_ref, total_ref):
    """A running sum over blocks: ``total_ref`` (scratch or a revisited output of
    shape (1,)) carries the last partial sum from step to step, so the grid axis
    is sequential; zeroed at the first step by ``pl.when``."""
    @pl.when(pl.program_id(0) == 0)
    def _():
        total_ref[...] = jnp.zeros_like(total_ref)
    c = jnp.cumsum(x_ref[...]) + total_ref[0]
    o_ref[...] = c
    total_ref[...] = c[-1:]
