"""Which frames of a traceback are the user's: the frontend's and each backend's
frames are hidden as JAX hides its own, and errors raised while tracing a kernel
name the user's line with advice that fits it."""

from __future__ import annotations

import inspect
import linecache
import os
import sys
import traceback

from pallas_frontend import _jax_compat as jc

_hidden: set[str] = set()

# Not hidden: the conformance suite's kernels and tests are code a reader debugs.
_SHOWN_IN_FRONTEND = ("testing",)


def _hide(path: str) -> None:
    path = os.path.abspath(path)
    if os.path.isdir(path):
        path += os.sep
    if path not in _hidden:
        _hidden.add(path)
        jc.hide_frames_under(path)


def hide_frontend() -> None:
    """Hides the frontend's own modules (all but ``pallas_frontend.testing``)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sorted(os.listdir(here)):
        if entry in _SHOWN_IN_FRONTEND or entry.startswith((".", "__pycache__")):
            continue
        if entry.endswith(".py") or os.path.isdir(os.path.join(here, entry)):
            _hide(os.path.join(here, entry))


def hide_package(module_name: str) -> None:
    """Hides ``module_name``'s top-level package (a backend plugin): its frames
    are library code, not the kernel author's line."""
    jc.add_library_package(module_name)
    if module_name.split(".")[0] == __name__.split(".")[0]:
        return hide_frontend()      # the built-in backend: the frontend, tests shown
    top = sys.modules.get(module_name.split(".")[0])
    for path in getattr(top, "__path__", None) or ():
        _hide(path)


def hide_caller_package(depth: int = 2) -> None:
    """Hides the package of the module that called the caller (the plugin module
    that creates a kernel primitive) when it is an installed backend's package,
    imported by the user before discovery loaded it; a test or script that makes
    a primitive stays the user's code."""
    module = sys._getframe(depth).f_globals.get("__name__", "")
    top = module.split(".")[0]
    if top != __name__.split(".")[0] and top in _backend_packages():
        hide_package(module)


_entry_point_packages: set[str] | None = None


def _backend_packages() -> set[str]:
    """Top-level packages of the installed backends' entry points (read once)."""
    global _entry_point_packages
    if _entry_point_packages is None:
        from importlib import metadata
        try:
            eps = metadata.entry_points(group="pallas_frontend.backends")
            _entry_point_packages = {ep.value.split(":")[0].split(".")[0] for ep in eps}
        except Exception:  # noqa: BLE001 - broken metadata: hide nothing
            _entry_point_packages = set()
        _entry_point_packages.discard(__name__.split(".")[0])
    return _entry_point_packages


def user_line(tb) -> tuple[str, int, str] | None:
    """``(file, line, source)`` of the innermost frame of ``tb`` that is the
    user's code (not JAX's, Python's, the frontend's or a backend's), or None."""
    found = None
    for frame, lineno in traceback.walk_tb(tb):
        name = frame.f_code.co_filename
        if jc.is_user_file(name) and not any(name.startswith(p) for p in _hidden):
            found = (name, lineno, linecache.getline(name, lineno).strip())
    return found


_CONTROL_FLOW_ADVICE = (
    "Inside a kernel, values read from Refs are traced, not Python values: branch with "
    "`jax.lax.cond(pred, true_fn, false_fn)` or `@pl.when(pred)` on a function of no "
    "arguments, loop with `jax.lax.fori_loop`/`jax.lax.while_loop`, and pick values with "
    "`jnp.where`.")


def explain_traced_python_value(e: Exception) -> None:
    """A JAX concretization error raised by the kernel's Python control flow
    (``if x_ref[0] > 0:``) names the kernel's line that did it and says what
    to use instead, in place (type and traceback stay)."""
    import jax
    if not isinstance(e, jax.errors.ConcretizationTypeError) or not e.args \
            or not isinstance(e.args[0], str) or _CONTROL_FLOW_ADVICE in e.args[0]:
        return
    where = user_line(e.__traceback__)
    if where is None:
        return
    file, line, code = where
    head = f"{file}:{line}" + (f" (`{code}`)" if code else "")
    e.args = (f"At {head}: Python control flow needs a concrete value, but the kernel "
              f"gave it a traced one. {_CONTROL_FLOW_ADVICE}\n{e.args[0]}", *e.args[1:])


def traced_as(body, kernel, leading: int, n_refs: int):
    """``body`` (the frontend's wrapper, called with ``leading`` program ids and
    grid sizes, then ``n_refs`` Refs) described to JAX as the kernel: JAX's own
    tracing errors then say 'while tracing the function kernel at file:line' and
    name the kernel's parameters, not the wrapper's."""
    body.__wrapped__ = kernel
    try:
        params = [p for p in inspect.signature(kernel).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params] if len(params) == n_refs else \
        [f"ref{i}" for i in range(n_refs)]
    names = [f"program_id{i}" for i in range(leading)] + names
    body.__signature__ = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in names])
    return body
