"""``pl.autotune``'s arguments checked when the tuner is made, before anything
runs: each refusal names the tuned function (and where it is defined), the
argument, what is wrong and the fix, where Python would say
``'int' object is not iterable`` or ``dictionary update sequence element #0``
at the first call, or a misspelt parameter would just lose its candidate."""

from __future__ import annotations

import difflib
import inspect
import numbers
import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path

from pallas_frontend import env_config

_EXAMPLE = "configs=[{'block': 128}, {'block': 256}]"


def describe(fn) -> str:
    """``pl.autotune of add (file.py:12)``: the tuned function and where it is defined."""
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    try:
        where = inspect.unwrap(fn)
        where = f" ({inspect.getsourcefile(where)}:{inspect.getsourcelines(where)[1]})"
    except (TypeError, OSError):
        where = ""
    return f"pl.autotune of {name}{where}"


def checked_options(fn, configs, *, name, key, backend, reference, tolerance, measure,
                    cache) -> tuple[dict, ...]:
    """``configs`` as a tuple of dicts, once every argument is one ``pl.autotune``
    takes; raises ``TypeError``/``ValueError`` naming the first that is not."""
    if not callable(fn):
        raise TypeError(f"pl.autotune: the function to tune is {fn!r} (of type "
                        f"{type(fn).__name__}), not a callable; pass the function whose keyword "
                        f"arguments the configs set: pl.autotune(fn, {_EXAMPLE})")
    who = describe(fn)
    configs = _configs(who, configs)
    _check_names(who, fn, configs)
    for arg, value, kinds, what in (
            ("name", name, (str,), "a string (the cache's name for it)"),
            ("backend", backend, (str,), "a backend's name, e.g. 'triton'"),
            ("measure", measure, (bool,), "True or False"),
    ):
        if value is not None and not isinstance(value, kinds) and not (
                arg == "measure" and type(value).__name__ == "bool_"):
            raise TypeError(f"{who}: {arg}={value!r} is of type {type(value).__name__}; give {what}, "
                            "or leave it unset")
    for arg, value in (("key", key), ("reference", reference)):
        if value is not None and not callable(value):
            raise TypeError(f"{who}: {arg}={value!r} is not callable; {arg} is a function of "
                            f"the call's arguments, e.g. {arg}=lambda x, y: ...")
    if tolerance is not None and (isinstance(tolerance, bool)
                                  or not isinstance(tolerance, numbers.Real)
                                  or not tolerance >= 0):
        raise ValueError(f"{who}: tolerance={tolerance!r} must be a number >= 0 (the largest "
                         "difference allowed, relative to the reference's largest magnitude)")
    _check_cache(who, cache)
    return configs


def _configs(who: str, configs) -> tuple[dict, ...]:
    if isinstance(configs, Mapping):
        raise TypeError(f"{who}: configs is one dict; give a list of dicts, one per candidate: "
                        f"configs=[{dict(configs)!r}]")
    if isinstance(configs, (str, bytes)) or not isinstance(configs, Iterable):
        raise TypeError(f"{who}: configs={configs!r} is of type {type(configs).__name__}; give a "
                        f"list of dicts of keyword arguments, one per candidate: {_EXAMPLE}")
    pruned = tuple(getattr(configs, "pruned", ()))
    configs = tuple(configs)
    for i, c in enumerate(configs):
        if not isinstance(c, Mapping):
            raise TypeError(f"{who}: configs[{i}] is {c!r} (of type {type(c).__name__}); each "
                            f"candidate is a dict of keyword arguments: {_EXAMPLE}")
        bad = [k for k in c if not (isinstance(k, str) and k.isidentifier())]
        if bad:
            raise ValueError(f"{who}: configs[{i}] has keys {bad!r}; a config maps "
                             "keyword-argument names of the function to values")
    if not configs:
        why = (f" (the search space pruned all {len(pruned)}; the first: {pruned[0].reason})"
               if pruned and hasattr(pruned[0], "reason") else "")
        raise ValueError(f"{who}: configs is empty{why}; give at least one dict of keyword "
                         f"arguments, e.g. {_EXAMPLE}")
    return tuple(dict(c) for c in configs)


def _parameters(fn) -> dict[str, inspect.Parameter] | None:
    """``fn``'s parameters a keyword can set; None when it takes ``**kwargs`` or
    has no signature to read."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None
    return {n: p for n, p in params.items()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def _check_names(who: str, fn, configs) -> None:
    params = _parameters(fn)
    if params is None:
        return
    for i, c in enumerate(configs):
        for k, v in c.items():
            if k not in params:
                close = difflib.get_close_matches(k, list(params), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise TypeError(f"{who}: configs[{i}] sets {k!r}, which the function does not "
                                f"take (its keyword parameters: {', '.join(params) or 'none'})"
                                f"{hint}")
            problem = _kind_problem(params[k].default, v)
            if problem:
                raise TypeError(f"{who}: configs[{i}][{k!r}] = {v!r} is {problem} (the "
                                f"function's default for {k} is {params[k].default!r}); give "
                                "the value the function expects")


def _kind_problem(default, value) -> str | None:
    """Why ``value`` cannot stand in for a parameter whose default is ``default``
    (a number for a string or the reverse, a container for a number); None
    when the default says nothing (None, absent, or another kind)."""
    number = (numbers.Number,)
    if isinstance(default, bool) or default is inspect.Parameter.empty or default is None:
        return None
    if isinstance(default, number) and isinstance(value, (str, bytes, list, dict, set)):
        return f"of type {type(value).__name__}, not a number"
    if isinstance(default, str) and isinstance(value, number) and not isinstance(value, bool):
        return f"of type {type(value).__name__}, not a string"
    return None


def _check_cache(who: str, cache) -> None:
    if isinstance(cache, bool):
        return
    fix = ("give cache=True for the default file (or the one "
           f"{env_config.ENV_AUTOTUNE_CACHE} names), the path of a .json file, or False to "
           "keep choices in memory only")
    if not isinstance(cache, (str, os.PathLike)) or (isinstance(cache, str) and not cache.strip()):
        raise TypeError(f"{who}: cache={cache!r} is not a path; {fix}")
    # a directory is a certain mistake; an unwritable place warns when written (read-only
    # caches are read), a FIFO is refused when used (autotune_cache)
    try:
        is_dir = stat.S_ISDIR(os.stat(Path(cache).expanduser()).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        is_dir = False
    except PermissionError:
        is_dir = False          # a place this user cannot look into: reads and writes warn
    except (OSError, ValueError) as e:   # a name too long, a NUL byte: no file can have it
        raise ValueError(f"{who}: cache={str(cache)!r} cannot name a file "
                         f"({getattr(e, 'strerror', None) or e}); {fix}") from None
    if is_dir:
        raise ValueError(f"{who}: cache={str(cache)!r} is a directory; {fix}")

