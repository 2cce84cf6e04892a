"""Params objects checked where they are given, not deep in a backend's
lowering: ``interpret=`` is a mode or a params object, never JAX's own Pallas
params (which look like ours), and a params dataclass holds what its fields'
annotations say (``CompilerParams(num_warps="4")`` is refused, also when the
built-in interpreter only checks it)."""

from __future__ import annotations

import dataclasses
import types
import typing

from pallas_frontend import install_hints


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


# JAX's own Pallas params types live in these jax modules; ours in these plugins.
# (Names, not imports: the frontend's _jax_compat is at its size bound.)
_JAX_PALLAS_HOMES = (
    ("jax._src.pallas.mosaic_gpu", "jax.experimental.pallas.mosaic_gpu", "pallas_mgpu", "mgpu"),
    ("jax._src.pallas.mosaic", "jax.experimental.pallas.tpu", "pallas_tpu", "tpu"),
    ("jax._src.pallas.triton", "jax.experimental.pallas.triton", "pallas_triton", "triton"),
)


def is_jax_pallas_object(obj) -> bool:
    """Whether ``obj`` is of a type of JAX's own Pallas (``jax.experimental.pallas``)."""
    module = type(obj).__module__ or ""
    return module.startswith("jax.") and "pallas" in module


def check_params_objects(interpret, compiler_params) -> None:
    """Refuses, before anything is traced, an ``interpret=`` that is neither a
    bool nor a params object, and JAX's own Pallas params objects (which look
    like ours but belong to ``jax.experimental.pallas``)."""
    if not (interpret is None or isinstance(interpret, bool)
            or hasattr(interpret, "__dataclass_fields__")):
        raise TypeError(
            f"interpret={interpret!r} ({type(interpret).__name__}) is not a mode: pass "
            "interpret=True for the built-in interpreter, interpret=False (the default) to "
            "choose a backend, or a backend's interpret-params object such as "
            "pallas_tpu.InterpretParams().")
    for what, obj in (("interpret", interpret), ("compiler_params", compiler_params)):
        if not is_jax_pallas_object(obj):
            continue
        module = type(obj).__module__
        for jax_module, public, ours, extra in _JAX_PALLAS_HOMES:
            if module.startswith(jax_module):
                name = type(obj).__name__
                raise TypeError(
                    f"{what}={name}(...) is JAX's own {public}.{name}, a jax.experimental.pallas "
                    f"object that pallas_frontend does not read. Use {ours}.{name} instead "
                    f"(the same fields where it supports them; install it with "
                    f"{install_hints.install_command(f'pallas-{extra}')})"
                    f"{' or interpret=True' if what == 'interpret' else ''}.")
        raise TypeError(f"{what}={type(obj).__name__}(...) is a jax.experimental.pallas "
                        "object; pallas_frontend takes its own backends' params types "
                        "(e.g. pallas_triton.CompilerParams, pallas_tpu.InterpretParams).")
