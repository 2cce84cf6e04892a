"""Bounds of Ref reads and writes inside a kernel body.

A kernel's Refs are its blocks and scratch buffers. An index outside a Ref is
never meaningful: JAX's discharge clamps it (``x_ref[200]`` on a 128-block
reads element 127; a ``pl.ds`` write past the end overwrites valid elements),
and compiled backends read or write memory that is not the block. So:

- a static negative integer index in ``[-n, 0)`` counts from the end, as in
  NumPy (rewritten to ``n + i`` in the jaxpr, so every backend agrees);
- any other static index (a Python int, or a ``pl.ds`` with a static start)
  outside its Ref is a ``RefIndexError`` at trace time, naming the kernel line;
- with ``pl.enable_debug_checks(True)`` at trace time, every dynamic index
  gets a ``pl.debug_check`` in front of the access (loop and branch bodies
  included), which raises ``pl.KernelCheckError`` naming the line when run;
- a kernel compiled with a backend's ``disable_bounds_checks=True`` (a field
  of its CompilerParams, JAX's TPU name) is not checked: the user asked the
  compiler for the access. Interpreted, it is refused all the same.
"""

from __future__ import annotations

import contextlib
import os
import traceback
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from pallas_frontend import _jax_compat as jc


class RefIndexError(IndexError, ValueError):
    """A kernel reads or writes a Ref at a static index outside the Ref."""


_VERBS = {"get": "reads", "swap": "writes", "addupdate": "accumulates into"}


def check_ref_accesses(jaxpr: jc.Jaxpr, ref_names: Sequence[str | None], *,
                       debug_checks: bool, bounds: bool = True,
                       compiler_params=None) -> jc.Jaxpr:
    """Raises on static out-of-range indices; returns the jaxpr, with runtime
    checks of the dynamic ones added when ``debug_checks``. ``bounds=False`` (see
    ``checks_static_bounds``) checks only what nothing survives: a ``pl.ds``
    stride below 1."""
    names = {v: n for v, n in zip(jaxpr.invars, ref_names) if n}
    with interpreted_bounds_note(compiler_params):
        dynamic = _check_static(jaxpr, names, bounds)
    if not (bounds and debug_checks and dynamic):
        return jaxpr
    return _with_runtime_checks(jaxpr, names)


@contextlib.contextmanager
def interpreted_bounds_note(compiler_params, bounds: bool = True):
    """A ``RefIndexError`` raised inside says why ``disable_bounds_checks=True``
    did not let the access through. ``bounds`` (``checks_static_bounds``) is
    False for a compiled kernel, which the flag does reach."""
    try:
        yield
    except RefIndexError as e:
        if not (bounds and compiled_without_bounds_checks(compiler_params)):
            raise
        raise RefIndexError(
            f"{e} (compiler_params disable_bounds_checks=True lets the compiled kernel read "
            "and write past its Refs, as JAX's does on the chip; this kernel is interpreted, "
            "and an interpreter has no memory past a Ref: it refuses the access rather than "
            "return other data.)") from None


def compiled_without_bounds_checks(compiler_params) -> bool:
    """Whether a backend's ``compiler_params`` ask that the compiled kernel not
    check its Ref accesses (``disable_bounds_checks=True``, JAX's TPU field)."""
    return getattr(compiler_params, "disable_bounds_checks", False) is True


def checks_static_bounds(mode, compiler_params) -> bool:
    """Whether tracing refuses static indices outside a Ref, for a kernel run
    in ``mode`` (the effective ``interpret`` value). Not for an interpreter that
    checks every access itself when it runs (``mode.checks_ref_bounds``), nor
    for a compiled kernel whose ``compiler_params`` disable bounds checks: the
    user asked the compiler for that access, and JAX compiles it."""
    if getattr(mode, "checks_ref_bounds", False):
        return False
    return not (mode in (False, None) and compiled_without_bounds_checks(compiler_params))


# --- static negative indices: counted from the end, as NumPy does --------------------

def normalize_negative_indices(jaxpr):
    """``x_ref[..., -1]``: a static integer index in ``[-n, 0)`` becomes ``n + i``
    in the jaxpr (nested bodies too), so every backend reads the same element."""
    eqns, changed = [], False
    for eqn in jaxpr.eqns:
        new = _normalized_eqn(eqn)
        changed |= new is not eqn
        eqns.append(new)
    return jc.replace_jaxpr(jaxpr, eqns=eqns) if changed else jaxpr


def _normalized_param(p):
    if isinstance(p, jc.Jaxpr):
        return normalize_negative_indices(p)
    if hasattr(p, "jaxpr") and isinstance(p.jaxpr, jc.Jaxpr):     # a closed jaxpr
        inner = normalize_negative_indices(p.jaxpr)
        return p if inner is p.jaxpr else p.replace(jaxpr=inner)
    if isinstance(p, tuple) and p and any(isinstance(q, jc.Jaxpr) or hasattr(q, "jaxpr")
                                          for q in p):
        new = tuple(_normalized_param(q) for q in p)
        return p if all(a is b for a, b in zip(new, p)) else new
    return p


def _normalized_eqn(eqn):
    invars = list(eqn.invars)
    first = jc.ref_indexers(eqn)
    if first is not None:
        positions = jax.tree.unflatten(eqn.params["tree"], list(range(len(invars) - first)))
        for indexer in (t for t in positions if isinstance(t, jc.NDIndexer)):
            for d, pos in enumerate(indexer.indices):
                if isinstance(pos, jc.Slice) or not isinstance(pos, int):
                    continue
                atom, n = invars[first + pos], indexer.shape[d]
                value = _static_value(atom) if isinstance(atom, jc.Literal) else None
                if value is not None and -n <= value < 0:
                    invars[first + pos] = jc.Literal(np.asarray(n + value, atom.aval.dtype)
                                                     [()], atom.aval)
    params = {k: _normalized_param(v) for k, v in eqn.params.items()}
    if invars == list(eqn.invars) and all(params[k] is eqn.params[k] for k in params):
        return eqn
    return eqn.replace(invars=invars, params=params)


# --- static indices, at trace time --------------------------------------------------

def _check_static(jaxpr: jc.Jaxpr, names, bounds: bool = True) -> bool:
    """Checks every static index (nested bodies too); True if any is dynamic."""
    dynamic = False
    for eqn in jaxpr.eqns:
        first = jc.ref_indexers(eqn)
        if first is not None:
            for indexer in _indexers(eqn, eqn.invars[first:]):
                for d, idx in enumerate(indexer.indices):
                    dynamic |= _check_static_index(eqn, names, indexer, d, idx, bounds)
        for sub in jc.sub_jaxprs(eqn):
            dynamic |= _check_static(sub, names, bounds)
    return dynamic


def _indexers(eqn, operands):
    transforms = jax.tree.unflatten(eqn.params["tree"], list(operands))
    return [t for t in transforms if isinstance(t, jc.NDIndexer)]


def _static_value(x):
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, jc.Literal) and np.ndim(x.val) == 0:
        return int(x.val)
    return None


def _check_static_index(eqn, names, indexer, d, idx, bounds: bool = True) -> bool:
    n = indexer.shape[d]
    if isinstance(idx, jc.Slice):
        stride = _static_value(idx.stride)
        if stride is not None and stride < 1:     # JAX's slicing divides by it
            _raise(eqn, names, d, n, f"pl.ds(..., stride={stride})", f"stride {stride}",
                   " A pl.ds stride must be a positive int: reverse or step through the "
                   "block with jnp (v[::-2]) after reading it.", rule="a stride below 1")
        if not bounds:
            return False
        start = _static_value(idx.start)
        if start is None:
            return True
        last = start + (idx.size - 1) * idx.stride
        if idx.size > 0 and (start < 0 or last >= n):
            _raise(eqn, names, d, n, f"pl.ds({start}, {idx.size})",
                   f"the slice {start}..{last}")
        return False
    value = _static_value(idx)
    if value is None or not bounds:
        return value is None
    if not 0 <= value < n:   # (negatives in [-n, 0) were counted from the end already)
        _raise(eqn, names, d, n, str(value), f"index {value}")
    return False


def _describe(eqn, names) -> str:
    ref = eqn.invars[0]
    name = names.get(ref)
    return name if name else f"a Ref of shape {ref.aval.shape}"


def _raise(eqn, names, d, n, shown, what, hint="", rule=None):
    where = jc.jaxpr_source_line(eqn) or "the kernel"
    if rule is not None:
        raise RefIndexError(f"{where}: the kernel {_VERBS[eqn.primitive.name]} "
                            f"{_describe(eqn, names)} at {shown} in dim {d}: {rule}.{hint}")
    raise RefIndexError(
        f"{where}: the kernel {_VERBS[eqn.primitive.name]} {_describe(eqn, names)} at "
        f"{shown} in dim {d}, but that dim has {n} element(s) (valid: 0..{n - 1}) and {what} "
        f"is outside it. Refs inside a kernel hold one block, not the whole array: index "
        f"within the block's shape.{hint}")


@contextlib.contextmanager
def static_slice_errors():
    """JAX itself refuses a static ``pl.ds`` outside a Ref while the kernel is
    traced, but its message names no line; add the kernel line."""
    try:
        yield
    except ValueError as e:
        if not str(e).startswith("Out of bound slice"):
            raise
        where = _user_line(e.__traceback__) or "the kernel"
        raise RefIndexError(
            f"{where}: {e} A pl.ds(start, size) on a Ref must lie inside it (Refs inside a "
            "kernel hold one block, not the whole array).") from None


def _user_line(tb) -> str:
    """``file:line`` of the innermost frame outside JAX and pallas_frontend."""
    skip = (os.path.dirname(jax.__file__) + os.sep, os.path.dirname(__file__) + os.sep)
    found = ""
    for frame, line in traceback.walk_tb(tb):
        path = frame.f_code.co_filename
        if not path.startswith(skip) and not path.startswith("<"):   # "<string>": generated code
            found = f"{path}:{line}"
    return found


# --- dynamic indices, under pl.enable_debug_checks ------------------------------------

def _with_runtime_checks(jaxpr: jc.Jaxpr, names) -> jc.Jaxpr:
    def rewrite_param(p):
        if jc.is_jaxpr(p):
            return jc.like_jaxpr(_rewrite(p, {}), p)
        if isinstance(p, tuple) and p and all(jc.is_jaxpr(q) for q in p):
            return tuple(jc.like_jaxpr(_rewrite(q, {}), q) for q in p)
        return p

    def before_eqn(eqn, invals):
        first = jc.ref_indexers(eqn)
        if first is None:
            return
        from pallas_frontend.primitives import FRONTEND_CHECK, debug_check_p
        where = jc.jaxpr_source_line(eqn) or "the kernel"
        for indexer in _indexers(eqn, invals[first:]):
            for d, idx in enumerate(indexer.indices):
                ok = _in_range(idx, indexer.shape[d])
                if ok is not None:
                    debug_check_p.bind(ok, message=(
                        f"{FRONTEND_CHECK}{where}: the kernel {_VERBS[eqn.primitive.name]} "
                        f"{_describe(eqn, names)} with a dynamic index outside dim {d} "
                        f"(size {indexer.shape[d]})."))

    def _rewrite(inner: jc.Jaxpr, inner_names) -> jc.Jaxpr:
        def fn(*args):
            return jc.eval_jaxpr_rewriting(inner, args, before_eqn, rewrite_param)
        new, _ = jc.trace_kernel_jaxpr(fn, [v.aval for v in inner.invars],
                                       traced_for="pallas kernel (debug checks)")
        return new

    return _rewrite(jaxpr, names)


def _in_range(idx, n):
    """A traced bool that the (dynamic) index lies in [0, n), or None if static."""
    if isinstance(idx, jc.Slice):
        if isinstance(idx.start, (int, np.integer)) or idx.size == 0:
            return None
        start = jnp.asarray(idx.start)
        return (start >= 0) & (start + (idx.size - 1) * idx.stride < n)
    if isinstance(idx, (int, np.integer)):
        return None
    arr = jnp.asarray(idx)
    return jnp.all((arr >= 0) & (arr < n))
