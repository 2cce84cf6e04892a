"""Values a kernel body closes over that are not Refs.

A concrete scalar (a Python or NumPy number) stays a constant of the kernel
jaxpr. A value of the surrounding program (a tracer, e.g. ``i`` in
``jax.jit(lambda x, i: ...)``) cannot be lowered as a constant:
``pallas_call`` refuses it, as JAX's does. ``pl.kernel`` and ``core_map``
accept traced scalars, as JAX's core_map does: while they trace the body
(``accepting``), each becomes one more input of shape ``(1,)`` after the
user's, in the memory space the mesh names (``scalar_memory_space``: SMEM on
a TPU, where JAX passes them), and the body reads its element 0. Arrays
are refused (pl.kernel: of more than one element; core_map, as JAX's: of
rank > 0, ``core_map_refs``): they must be inputs, or Refs for core_map.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses

import jax
import numpy as np

from pallas_frontend import _jax_compat as jc
from pallas_frontend.backend_api import KernelIR
from pallas_frontend.specs import BlockSpec

# the memory space traced scalars go in while pl.kernel traces; None: refused
_SPACE: contextvars.ContextVar = contextvars.ContextVar("captured_scalar_space", default=None)


@contextlib.contextmanager
def accepting(space):
    """Within: a kernel body may close over traced scalars; they become inputs in ``space``."""
    token = _SPACE.set(space)
    try:
        yield
    finally:
        _SPACE.reset(token)


def _is_ref(x) -> bool:
    return isinstance(jax.typeof(x), jc.AbstractRef)


def _hoisted(c) -> bool:
    return isinstance(c, jc.Tracer) and not _is_ref(c) and np.ndim(c) == 0


def refuse_unpassable(jaxpr, name: str) -> None:
    """Raises if the kernel ``name``'s jaxpr closes over a value it cannot keep
    as a constant, nor (in ``pl.kernel``) take as a scalar input."""
    kernel = _SPACE.get() is not None
    bad = [c for c in jc.consts_of(jaxpr) if not _is_ref(c)
           and (np.size(c) > 1 or isinstance(c, jc.Tracer)) and not (kernel and _hoisted(c))]
    if not bad:
        return
    types = _types(bad)
    if kernel:
        raise ValueError(
            f"The kernel function {name} of pl.kernel captures non-Ref constants [{types}]. "
            "You should pass them as inputs (arguments of the kernel call, or Refs made with "
            "jax.new_ref); only scalars may be captured.")
    raise ValueError(
        f"The kernel function {name} captures constants [{types}]. You should pass them as "
        "inputs (add them to the pallas_call arguments with a BlockSpec"
        + (", or prefetch a traced scalar with a scalar-prefetch grid spec)."
           if any(isinstance(c, jc.Tracer) for c in bad) else ")."))


def _types(values) -> str:
    return ", ".join(jax.typeof(c).str_short(short_dtypes=True) for c in values)


def core_map_refs(consts, body) -> list[bool]:
    """Which of ``consts`` (what the core_map body ``body`` closes over) are
    Refs; raises if one is neither a Ref nor a scalar (JAX's core_map takes
    only those)."""
    from pallas_frontend.index_maps import source_of
    is_ref = [_is_ref(c) for c in consts]
    bad = [c for c, r in zip(consts, is_ref) if not r and np.ndim(c) > 0]
    if bad:
        raise ValueError(
            f"The kernel function in core_map {getattr(body, '__name__', 'body')} at "
            f"{source_of(body)} captures non-scalar array constants "
            f"[{_types(bad)}]. A core_map body may close over scalars and Refs only: put "
            "each array in a Ref (jax.new_ref(x)) outside the body and close over that.")
    return is_ref


def hoist(ir: KernelIR, block_mapping) -> tuple[KernelIR, list]:
    """``(kernel, values)``: ``ir`` with its traced scalar constants ``values``
    as inputs of shape (1,) after its own; unchanged, with no values, outside
    ``accepting`` or when it captures none. ``block_mapping`` is tracing's."""
    space = _SPACE.get()
    jaxpr = ir.jaxpr
    consts = jc.consts_of(jaxpr)
    hoisted = [k for k, c in enumerate(consts) if _hoisted(c)]
    if space is None or not hoisted:
        return ir, []
    plain = getattr(jaxpr, "jaxpr", jaxpr)
    n_pf, n_in = ir.num_scalar_prefetch, len(ir.in_mappings)
    n_refs = n_pf + n_in + len(ir.out_mappings) + len(ir.scratch_avals)
    in_avals = [v.aval for v in plain.invars]
    split = len(in_avals) - n_refs + n_pf + n_in       # after the inputs' Refs
    pf_avals = in_avals[split - n_in - n_pf:split - n_in]
    maps = tuple(block_mapping(BlockSpec(memory_space=space),
                               jc.ShapedArray((1,), jax.typeof(consts[k]).dtype),
                               f"the scalar the kernel closes over ({j})", len(ir.grid), pf_avals)
                 for j, k in enumerate(hoisted))
    new_avals = [jc.AbstractRef(jc.kernel_aval((1,), m.dtype), memory_space=space) for m in maps]

    def body(*args):
        head, refs, tail = args[:split], args[split:split + len(maps)], args[split + len(maps):]
        values = list(consts)
        for k, r in zip(hoisted, refs):
            values[k] = r[0]
        jc.eval_jaxpr(jc.with_consts(plain, values), *head, *tail)
        return []

    named = [(n, g) for n, g in zip(ir.grid_names or (), ir.grid) if n is not None and g is not None]
    with jc.extend_axis_env(named), jc.mutable_array_checks(False):
        new_jaxpr, _ = jc.trace_kernel_jaxpr(
            body, [*in_avals[:split], *new_avals, *in_avals[split:]], traced_for="pallas kernel")
    return dataclasses.replace(ir, jaxpr=new_jaxpr, in_mappings=(*ir.in_mappings, *maps)), \
        [consts[k] for k in hoisted]
