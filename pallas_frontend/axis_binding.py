"""``lax.axis_index`` of a kernel's named axes, replaced by values.

Inside a kernel, ``jax.lax.axis_index(name)`` of a grid or mesh axis means
that axis's program id; backends see no ``axis_index`` equation. The kernel
trace replaces those at its top level and in nested ``jit`` calls
(``tracing.py``); a body that a backend traces inside a kernel (a software
pipeline's, ``backend_helpers.trace_body``) closes over the value taken in
the enclosing trace, so the backend's own primitive carries none either.
Only the axes the kernel trace binds (``kernel_axes``) are closed over: an
axis a backend binds for the body itself (a Mosaic GPU warp map's) or one
whose ``axis_index`` the backend lowers in place stays in the body.
"""

from __future__ import annotations

import contextlib
import threading

from pallas_frontend import _jax_compat as jc

_CALLS = ("jit", "pjit", "closed_call")
_local = threading.local()


@contextlib.contextmanager
def kernel_axes(names):
    """Inside, ``names`` are the axes of the kernel being traced (its grid's or mesh's)."""
    prev = getattr(_local, "names", frozenset())
    _local.names = frozenset(names)
    try:
        yield
    finally:
        _local.names = prev


@contextlib.contextmanager
def bound_kernel_axes(named):
    """``named`` ((name, size) pairs) bound as the kernel's axes: ``lax.axis_index``
    of them works, and a body a backend traces inside closes over it (a
    ``core_map`` body is traced so before its kernel is)."""
    named = list(named)
    with jc.extend_axis_env(named), kernel_axes(n for n, _ in named):
        yield


def iter_eqns(jaxpr):
    """Every equation of ``jaxpr`` and of the jaxprs nested in it."""
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in jc.sub_jaxprs(eqn):
            yield from iter_eqns(getattr(sub, "jaxpr", sub))


def axis_names_read(jaxpr) -> set:
    """The axis names that ``axis_index`` equations in ``jaxpr`` read."""
    return {e.params["axis_name"] for e in iter_eqns(jaxpr) if e.primitive.name == "axis_index"}


def eval_binding_axis_index(jaxpr, consts, args, index_of, kernel_name):
    """Evaluates ``jaxpr`` (under tracing), replacing ``axis_index(name)`` by
    ``index_of(name)`` where that is not None. Nested ``jit`` calls are
    inlined; another primitive whose body reads such an axis is refused."""
    env = {}

    def read(v):
        return v.val if isinstance(v, jc.Literal) else env[v]

    env.update(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    for eqn in jaxpr.eqns:
        vals = [read(x) for x in eqn.invars]
        if eqn.primitive.name == "axis_index" and index_of(eqn.params["axis_name"]) is not None:
            outs = [index_of(eqn.params["axis_name"])]
        elif any(index_of(n) is not None for sub in jc.sub_jaxprs(eqn)
                 for n in axis_names_read(getattr(sub, "jaxpr", sub))):
            inner = eqn.params.get("jaxpr")
            if eqn.primitive.name not in _CALLS or inner is None:
                raise NotImplementedError(
                    f"Kernel {kernel_name}: lax.axis_index inside {eqn.primitive.name} is not "
                    "supported; use pl.program_id(axis_name), which works anywhere.")
            outs = eval_binding_axis_index(inner.jaxpr, inner.consts, vals, index_of,
                                           kernel_name)
        else:
            outs = jc.bind_equation(eqn, vals)
        env.update(zip(eqn.outvars, outs))
    return [read(v) for v in jaxpr.outvars]


def close_over_outer_axes(jaxpr, consts, in_avals, *, traced_for: str):
    """``(jaxpr, consts)`` of a body traced by ``trace_with_explicit_consts``,
    retraced so that ``axis_index`` of an axis the enclosing trace binds is
    that trace's value (a new leading const); unchanged if it reads none.
    Only the kernel's axes count: the enclosing trace binds those, where a
    name bound just around this body (a warp map's axis) has no value."""
    kernel = getattr(_local, "names", frozenset()) & jc.bound_axis_names()
    outer = {n: None for n in axis_names_read(jaxpr) if n in kernel}
    if not outer:
        return jaxpr, consts
    import jax
    for n in outer:
        outer[n] = jax.lax.axis_index(n)     # bound in the enclosing trace

    def rebound(*args):
        return eval_binding_axis_index(jaxpr, (), [*consts, *args], outer.get, traced_for)
    return jc.trace_with_explicit_consts(rebound, in_avals, traced_for=traced_for)
