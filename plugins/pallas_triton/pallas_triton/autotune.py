"""Autotuning: time candidate configs of a kernel on the current device, keep the
fastest per input signature.

    @pallas_triton.autotune([Config({"block": 256}), Config({"block": 1024}, CompilerParams(num_warps=8))])
    def add(config):
        return lambda x, y: kernels.add(x, y, block=config.blocks["block"], **config.call_options())

    add(x, y)   # first call for this shape/dtype: times every candidate, then runs the winner
    add(x, y)   # later calls: the cached winner only

On a GPU with a launch path the candidates run compiled; elsewhere they run under
Triton's interpreter, whose cost grows with the number of programs, so the choice
there says little about a GPU. A candidate that fails (a block the backend refuses,
a compile error) is recorded and skipped, and so is one whose result differs from
what the other candidates agree on; if every one fails, the call raises.

A thin layer over ``pl.autotune`` (``pallas_frontend.autotuning``): the general
tuner chooses, caches and checks results; the candidates are timed by the Triton
backend's ``seconds_per_call`` hook (the frontend's device loop). Unlike
``pl.autotune`` it times on every platform (the interpreter's times too) and keeps
its choices in memory unless ``cache=`` names a file.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax

import pallas_frontend as pl
from pallas_triton.backend import TritonBackend
from pallas_triton.params import CompilerParams


@dataclasses.dataclass(frozen=True, init=False)
class Config:
    """One candidate: block sizes by name (read by the user's builder) and Triton's
    options, as ``compiler_params`` (a ``CompilerParams`` or a dict of its fields)
    or as keywords, the way ``triton.Config({"BLOCK": 128}, num_warps=4)`` takes them."""
    blocks: Mapping[str, int]
    compiler_params: CompilerParams

    def __init__(self, blocks: Mapping[str, int] | None = None,
                 compiler_params: CompilerParams | Mapping[str, Any] | None = None, **options):
        blocks = {} if blocks is None else blocks
        if not isinstance(blocks, Mapping) or not all(isinstance(k, str) for k in blocks):
            raise TypeError(f"pallas_triton.Config: blocks={blocks!r} is not a dict of block "
                            "sizes by name; write Config({'block': 256}, num_warps=4)")
        if isinstance(compiler_params, Mapping):
            options, compiler_params = {**compiler_params, **options}, None
        if compiler_params is None:
            compiler_params = CompilerParams()
        if not isinstance(compiler_params, CompilerParams):
            raise TypeError(f"pallas_triton.Config: compiler_params={compiler_params!r} is not a "
                            "pallas_triton.CompilerParams; pass one, a dict of its fields, or "
                            "its fields as keywords (num_warps=4, num_stages=3)")
        fields = [f.name for f in dataclasses.fields(CompilerParams) if f.init]
        unknown = sorted(set(options) - set(fields))
        if unknown:
            raise TypeError(f"pallas_triton.Config: {unknown} are not options of "
                            f"pallas_triton.CompilerParams (it takes {', '.join(fields)})")
        if options:
            compiler_params = dataclasses.replace(compiler_params, **options)
        object.__setattr__(self, "blocks", blocks)
        object.__setattr__(self, "compiler_params", compiler_params)

    def call_options(self) -> dict[str, Any]:
        """The ``pallas_call`` keywords that run with these params on the current device."""
        return TritonBackend().call_options(jax.default_backend(), self.compiler_params)


@dataclasses.dataclass(frozen=True)
class Trial:
    """How one candidate did for one signature: seconds per call, or its error."""
    config: Config
    seconds: float | None
    error: str = ""


def signature(args: Sequence[Any]) -> str:
    """What a tuned choice depends on: the argument structure, and each array's
    shape and dtype (other leaves by value)."""
    return _SIGNATURE.signature(*args)


# pl.autotune's signature, reached through a tuner that is never called
_SIGNATURE = pl.autotune(lambda *args: None, configs=[{}], name=__name__, cache=False)


class Autotuner:
    """Calls ``build(config)(*args)`` with the fastest of ``configs`` for ``args``' signature.

    ``build`` turns a ``Config`` into a JAX-traceable function of the call's
    arguments (typically a ``pallas_call`` made with ``**config.call_options()``);
    the tuner jits it. ``cache`` maps cache keys (signature, device kind,
    backend) to winners, ``trials`` keeps every timing, ``hits``/``misses``
    count lookups. ``repeat`` is kept for compatibility: the backend's timing
    hook decides how often it measures. ``cache_file``: a JSON file to keep the
    choices in across processes (``pl.autotune``'s format); default memory only.
    """

    def __init__(self, build: Callable[[Config], Callable], configs: Sequence[Config], *,
                 repeat: int = 3, cache_file: str | Path | None = None):
        configs = _configs(configs)
        if not callable(build):
            raise TypeError(f"pallas_triton.autotune: build={build!r} is not callable; it is a "
                            "function of a Config that returns the function to run")
        if cache_file is not None and (not isinstance(cache_file, (str, os.PathLike))
                                       or Path(cache_file).expanduser().is_dir()):
            raise TypeError(f"pallas_triton.autotune: cache_file={cache_file!r} is not the path "
                            "of a file; give a .json file's path (e.g. 'autotune.json'), or "
                            "leave it unset to keep choices in memory")
        self.build, self.configs, self.repeat = build, configs, repeat
        self._jitted: dict[int, Callable] = {}
        name = f"{getattr(build, '__module__', '?')}.{getattr(build, '__qualname__', build)}"
        self._tuner = pl.autotune(self._run, configs=[{"config": c} for c in self.configs],
                                  name=name, backend=TritonBackend.name, measure=True,
                                  cache=cache_file if cache_file is not None else False)

    def __call__(self, *args):
        return self._function(self.best_config(*args))(*args)

    def best_config(self, *args) -> Config:
        """The fastest config for arguments like ``args`` (same structure, shapes
        and dtypes): measured on the first call, cached afterwards."""
        return self._tuner.best_config(*args)["config"]

    @property
    def cache(self) -> dict[str, Config]:
        """Cache key -> the winning ``Config``."""
        return {key: c["config"] for key, c in self._tuner.choices.items()}

    @property
    def trials(self) -> dict[str, list[Trial]]:
        """Cache key -> each candidate's ``Trial``, in ``configs`` order."""
        return {key: [Trial(t.config["config"], t.seconds, t.error) for t in trials]
                for key, trials in self._tuner.trials.items()}

    @property
    def hits(self) -> int:
        """Calls that found their winner cached."""
        return self._tuner.hits

    @property
    def misses(self) -> int:
        """Calls that measured the candidates."""
        return self._tuner.misses

    def _run(self, *args, config: Config):
        return self._function(config)(*args)

    def _function(self, config: Config) -> Callable:
        # keyed by position: a Config holds a dict, so it is not hashable
        k = next(i for i, c in enumerate(self.configs) if c is config)
        if k not in self._jitted:
            self._jitted[k] = jax.jit(self.build(config))
        return self._jitted[k]


def _configs(configs) -> tuple[Config, ...]:
    """``configs`` as Configs (a dict of block sizes is one); refusals say what to give."""
    example = "[Config({'block': 256}), Config({'block': 1024}, num_warps=8)]"
    if isinstance(configs, (Config, Mapping, str)) or not isinstance(configs, Iterable):
        raise TypeError(f"pallas_triton.autotune: configs={configs!r} is not a list of "
                        f"candidates; give a list of Configs: {example}")
    out = []
    for i, c in enumerate(configs):
        if isinstance(c, Mapping):
            c = Config(c)
        if not isinstance(c, Config):
            raise TypeError(f"pallas_triton.autotune: configs[{i}] is {c!r} (of type "
                            f"{type(c).__name__}); each candidate is a pallas_triton.Config "
                            f"or a dict of block sizes: {example}")
        out.append(c)
    if not out:
        raise ValueError(f"pallas_triton.autotune: configs is empty; give at least one "
                         f"candidate: {example}")
    return tuple(out)


def autotune(configs: Sequence[Config], *, repeat: int = 3,
             cache_file: str | Path | None = None) -> Callable[[Callable], Autotuner]:
    """Decorator form: ``@autotune(configs)`` over a ``build(config)`` function."""
    return lambda build: Autotuner(build, configs, repeat=repeat, cache_file=cache_file)
