"""Params objects of JAX's own Pallas, passed by code written for JAX
(``interpret=InterpretGPUParams(...)``, ``pltpu.InterpretParams(...)``): each
is offered to the backends (``Backend.adopt_foreign_params``, API 1.7) before
``params_fields.check_params_objects`` refuses it."""

from __future__ import annotations

import warnings
from typing import Any

from pallas_frontend import params_fields, registry


def _adopt_one(obj: Any) -> Any:
    if not params_fields.is_jax_pallas_object(obj):
        return obj          # ours, a bool or None: nothing to adopt (and no plugin loaded)
    for b in registry.backends().values():
        hook = getattr(b, "adopt_foreign_params", None)     # absent before API 1.7
        if not callable(hook):
            continue
        try:
            ours = hook(obj)
        except Exception as e:    # a broken hook must not stop the others, nor the call
            warnings.warn(f"backend '{b.name}': adopt_foreign_params({type(obj).__name__}) "
                          f"raised {type(e).__name__}: {e}; ignoring that backend's hook",
                          RuntimeWarning, stacklevel=4)
            continue
        if ours is not None:
            return ours
    return obj


def adopt(interpret: Any, compiler_params: Any) -> tuple[Any, Any]:
    """``(interpret, compiler_params)`` with each JAX Pallas params object that
    a backend adopts replaced by that backend's own; the rest unchanged."""
    return _adopt_one(interpret), _adopt_one(compiler_params)
