"""Autotune candidates generated from a kernel's block parameters, pruned
before anything compiles::

    space = pl.search_space(
        {"bm": pl.tile_sizes(8192, 128), "bn": pl.tile_sizes(8192, 128)},
        vmem=lambda p: 2 * 2 * (p["bm"] + p["bn"]) * 512 + 4 * p["bm"] * p["bn"],
        budget=16 << 20, rank=lambda p: -p["bm"] * p["bn"], limit=8,
        config=lambda p: {"block_shape": (p["bm"], p["bn"])})
    tuned = pl.autotune(matmul, configs=space)

The product of the parameters' values is filtered in three steps, as real
tuners do: ``check(params)`` (a rule of the kernel: a reason string, or None),
``vmem(params)`` against ``budget`` (an estimate in bytes of the fast memory a
candidate needs, double buffers included: over the budget it would not
compile), then ``rank`` and ``limit`` (the ``limit`` best by ``rank``, lower
first, so a search fits a time budget). Every candidate left out is kept in
``space.pruned`` with its reason; ``pl.autotune`` lists them in
``tuned.trials`` beside the timed ones. Chip facts (tiles, the VMEM a kernel
gets) come from the backend, e.g. ``pallas_tpu.tuning``.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from pallas_frontend.autotune_cache import config_label


@dataclasses.dataclass(frozen=True)
class Pruned:
    """A candidate left out before compiling: its parameters and why."""
    label: str
    params: Mapping[str, Any]
    reason: str


class SearchSpace(Sequence):
    """The candidates kept (a sequence of config dicts, for ``pl.autotune``),
    with ``params`` (each one's block parameters, in the same order) and
    ``pruned`` (those left out, with the reason)."""

    def __init__(self, configs, params, pruned):
        self.configs = tuple(configs)
        self.params = tuple(params)
        self.pruned = tuple(pruned)

    def __getitem__(self, index):
        return self.configs[index]

    def __len__(self):
        return len(self.configs)

    def __iter__(self) -> Iterator[dict]:
        return iter(self.configs)

    def params_of(self, config: Mapping[str, Any]) -> Mapping[str, Any]:
        """The block parameters a kept config was made from."""
        label = config_label(config)
        for made, params in zip(self.configs, self.params):
            if config_label(made) == label:
                return params
        raise KeyError(f"search space: {label} is not one of its candidates")

    def __repr__(self):
        return f"<SearchSpace: {len(self.configs)} candidates, {len(self.pruned)} pruned>"


def tile_sizes(dim: int, tile: int = 128, *, smallest: int | None = None,
               largest: int | None = None, powers_of_two: bool = True) -> list[int]:
    """Block sizes for a dimension of ``dim``: multiples of ``tile`` that divide
    ``dim`` (``powers_of_two``: only tile times a power of two), from
    ``smallest`` (default ``tile``) to ``largest`` (default ``dim``); ``[dim]``
    when none does (a block equal to the whole dimension is always allowed)."""
    for name, value in (("dim", dim), ("tile", tile)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"tile_sizes: {name}={value!r} must be a positive int")
    low = tile if smallest is None else max(smallest, tile)
    high = dim if largest is None else min(largest, dim)
    sizes = [s for s in range(tile, high + 1, tile)
             if s >= low and dim % s == 0
             and (not powers_of_two or ((s // tile) & (s // tile - 1)) == 0)]
    return sizes or [dim]


def search_space(params: Mapping[str, Sequence[Any]], *,
                 check: Callable[[Mapping[str, Any]], str | None] | None = None,
                 vmem: Callable[[Mapping[str, Any]], int] | None = None,
                 budget: int | None = None,
                 rank: Callable[[Mapping[str, Any]], Any] | None = None,
                 limit: int | None = None,
                 config: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
                 ) -> SearchSpace:
    """The candidates of every combination of ``params`` (name -> values), pruned
    by ``check``, by ``vmem`` over ``budget`` and past ``limit`` by ``rank``
    (see the module docstring); ``config(params)`` makes the keyword arguments
    of the tuned function (default: the parameters themselves)."""
    if not params or any(not list(values) for values in params.values()):
        raise ValueError(f"search_space: every parameter needs at least one value, got "
                         f"{ {k: list(v) for k, v in dict(params).items()} }")
    if (vmem is None) != (budget is None):
        raise ValueError("search_space: give vmem= (an estimate in bytes) and budget= "
                         "(the bytes a kernel gets) together")
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise ValueError(f"search_space: limit={limit!r} must be a positive int or None")
    names = list(params)
    kept, pruned = [], []
    for values in itertools.product(*(list(params[n]) for n in names)):
        p = dict(zip(names, values))
        label = config_label(p)
        why = check(p) if check is not None else None
        if why:
            pruned.append(Pruned(label, p, why))
            continue
        if vmem is not None:
            need = int(vmem(p))
            if need >= budget:
                pruned.append(Pruned(label, p, f"VMEM estimate {_mib(need)} (double-buffered "
                                               f"blocks and scratch) is not under the "
                                               f"{_mib(budget)} a kernel gets"))
                continue
        kept.append(p)
    if rank is not None:
        kept.sort(key=rank)         # stable: ties keep the product's order
    if limit is not None and len(kept) > limit:
        pruned += [Pruned(config_label(p), p, f"ranked below the first {limit} kept "
                                              "(the search's size limit)")
                   for p in kept[limit:]]
        kept = kept[:limit]
    configs, seen, made = [], {}, []
    for p in kept:
        c = dict(config(p)) if config is not None else dict(p)
        label = config_label(c)
        if label in seen:
            pruned.append(Pruned(config_label(p), p, f"the same config as {seen[label]}"))
            continue
        seen[label] = config_label(p)
        configs.append(c)
        made.append(p)
    if not configs:
        reasons = sorted({x.reason for x in pruned})[:3]
        raise ValueError(f"search_space: every candidate was pruned ({len(pruned)}); e.g. "
                         + "; ".join(reasons))
    return SearchSpace(configs, made, pruned)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.2f} MiB"
