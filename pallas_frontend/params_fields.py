"""A params dataclass checked field by field against its annotations: a
``CompilerParams(num_warps="4")`` is refused where it is given, not deep in a
backend's lowering, also when the built-in interpreter only checks it."""

from __future__ import annotations

import dataclasses
import types
import typing


def check_params_fields(params) -> None:
    """Each field of a params dataclass holds a value of its annotated type
    (checked for the plain types: int, float, bool, str, each maybe None)."""
    try:
        hints = typing.get_type_hints(type(params))
    except Exception:   # an annotation we cannot resolve: nothing to check against
        return
    simple = {int: (int,), float: (int, float), bool: (bool,), str: (str,)}
    for f in dataclasses.fields(params):
        hint, value = hints.get(f.name), getattr(params, f.name, None)
        union = typing.get_origin(hint) in (typing.Union, types.UnionType)
        args = typing.get_args(hint) if union else (hint,)
        allowed = [t for t in args if t is not type(None)]
        if len(allowed) != 1 or allowed[0] not in simple:
            continue
        want = allowed[0]
        if not (value is None and type(None) in args or isinstance(value, simple[want]) and (
                want is bool or not isinstance(value, bool))):
            raise TypeError(
                f"{type(params).__qualname__}.{f.name} must be "
                f"{want.__name__}{' or None' if type(None) in args else ''}, got {value!r} "
                f"({type(value).__name__}).")
