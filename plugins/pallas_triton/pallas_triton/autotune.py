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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax

import pallas_frontend as pl
from pallas_triton.backend import TritonBackend
from pallas_triton.params import CompilerParams


@dataclasses.dataclass(frozen=True)
class Config:
    """One candidate: block sizes by name (read by the user's builder) and Triton's options."""
    blocks: Mapping[str, int] = dataclasses.field(default_factory=dict)
    compiler_params: CompilerParams = CompilerParams()

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
        if not configs:
            raise ValueError("autotune needs at least one candidate Config")
        self.build, self.configs, self.repeat = build, tuple(configs), repeat
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


def autotune(configs: Sequence[Config], *, repeat: int = 3,
             cache_file: str | Path | None = None) -> Callable[[Callable], Autotuner]:
    """Decorator form: ``@autotune(configs)`` over a ``build(config)`` function."""
    return lambda build: Autotuner(build, configs, repeat=repeat, cache_file=cache_file)
