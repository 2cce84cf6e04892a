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
a compile error) is recorded and skipped; if every one fails, the call raises.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax

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
    """How one candidate did for one signature: best-of-``repeat`` seconds, or its error."""
    config: Config
    seconds: float | None
    error: str = ""


def signature(args: Sequence[Any]) -> tuple:
    """What a tuned choice depends on: the argument structure, and each array's
    shape and dtype (other leaves by value)."""
    leaves, treedef = jax.tree.flatten(tuple(args))
    return treedef, tuple((tuple(x.shape), str(x.dtype)) if hasattr(x, "shape") else x
                          for x in leaves)


class Autotuner:
    """Calls ``build(config)(*args)`` with the fastest of ``configs`` for ``args``' signature.

    ``build`` turns a ``Config`` into a JAX-traceable function of the call's
    arguments (typically a ``pallas_call`` made with ``**config.call_options()``);
    the tuner jits it. ``cache`` maps signatures to winners, ``trials`` keeps
    every timing, ``hits``/``misses`` count cache lookups.
    """

    def __init__(self, build: Callable[[Config], Callable], configs: Sequence[Config], *,
                 repeat: int = 3):
        if not configs:
            raise ValueError("autotune needs at least one candidate Config")
        self.build, self.configs, self.repeat = build, tuple(configs), repeat
        self.cache: dict[tuple, Config] = {}
        self.trials: dict[tuple, list[Trial]] = {}
        self.hits = self.misses = 0
        self._jitted: dict[int, Callable] = {}

    def __call__(self, *args):
        return self._function(self.best_config(*args))(*args)

    def best_config(self, *args) -> Config:
        """The fastest config for arguments like ``args`` (same structure, shapes
        and dtypes): measured on the first call, cached afterwards."""
        sig = signature(args)
        if sig in self.cache:
            self.hits += 1
        else:
            self.misses += 1
            self.cache[sig] = self._tune(sig, args)
        return self.cache[sig]

    def _function(self, config: Config) -> Callable:
        # keyed by position: a Config holds a dict, so it is not hashable
        k = next(i for i, c in enumerate(self.configs) if c is config)
        if k not in self._jitted:
            self._jitted[k] = jax.jit(self.build(config))
        return self._jitted[k]

    def _tune(self, sig, args) -> Config:
        trials = [self._time(config, args) for config in self.configs]
        self.trials[sig] = trials
        timed = [t for t in trials if t.seconds is not None]
        if not timed:
            failures = "\n".join(f"  {t.config}: {t.error}" for t in trials)
            raise RuntimeError(f"autotune: every candidate failed:\n{failures}")
        return min(timed, key=lambda t: t.seconds).config

    def _time(self, config: Config, args) -> Trial:
        try:
            fn = self._function(config)
            jax.block_until_ready(fn(*args))        # compiles, and warms caches
        except Exception as e:  # noqa: BLE001  (a bad candidate is a result, not a crash)
            return Trial(config, None, f"{type(e).__name__}: {str(e).splitlines()[0]}")
        best = math.inf
        for _ in range(self.repeat):
            start = time.perf_counter()
            jax.block_until_ready(fn(*args))
            best = min(best, time.perf_counter() - start)
        return Trial(config, best)


def autotune(configs: Sequence[Config], *, repeat: int = 3) -> Callable[[Callable], Autotuner]:
    """Decorator form: ``@autotune(configs)`` over a ``build(config)`` function."""
    return lambda build: Autotuner(build, configs, repeat=repeat)
