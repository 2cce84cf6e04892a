"""``pl.autotune``: run a kernel with the fastest of several launch configurations::

    tuned = pl.autotune(matmul, configs=[{"block_shape": (512, 512)},
                                         {"block_shape": (1024, 1024)}],
                        name="my_matmul")
    out = tuned(x, y)        # on a device, first call for these shapes: times both

Each config is a dict of keyword arguments for the function (block sizes,
pipeline depth, ``compiler_params``). What a choice depends on, its signature,
is the structure of the arguments with each array's shape and dtype and the
value of every other argument (or what ``key`` returns), together with the
device kind and the backend.

On an accelerator, the first call for a signature runs every candidate on the
actual arguments; a candidate that fails is dropped with its error, one whose
outputs differ from the first valid candidate's (or from ``reference``'s)
beyond a tolerance is dropped as wrong; the rest are timed by the backend's
``seconds_per_call`` hook (a device loop by default), and the fastest wins.
The choice, with every time, goes to the cache file (``autotune_cache``) and
to memory; later calls run the winner without timing. On the CPU platform, and
while traced (under ``jax.jit``), nothing is timed: the cached choice if there
is one, else the first candidate that lowers. So CPU runs are deterministic and
a jitted function uses what an earlier eager call measured.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pallas_frontend import autotune_cache, autotune_checks, autotune_compile
from pallas_frontend.autotune_compile import is_array as _is_array
from pallas_frontend.output_agreement import mismatch as _mismatch, nan_count as _nan_count


@dataclasses.dataclass(frozen=True)
class Trial:
    """How one candidate did: its time in seconds, or why it was dropped."""
    label: str
    config: Mapping[str, Any]
    seconds: float | None
    error: str = ""


def signature(args: Sequence[Any], kwargs: Mapping[str, Any] | None = None) -> str:
    """What a tuned choice depends on, as text: the structure of ``args`` and
    ``kwargs``, each array by dtype and shape, every other value by ``repr``."""
    import jax
    leaves, treedef = jax.tree.flatten((tuple(args), dict(kwargs or {})))
    parts = [f"{np.dtype(x.dtype).name}{list(x.shape)}" if _is_array(x) else repr(x)
             for x in leaves]
    return f"{treedef}: {', '.join(parts)}"


def _is_traced(x) -> bool:
    import jax
    return isinstance(x, jax.core.Tracer)


def _platform_of(device) -> str:
    """The lowering platform of a device: JAX calls CUDA and ROCm devices ``gpu``."""
    if device.platform != "gpu":
        return device.platform
    return "rocm" if "rocm" in getattr(device.client, "platform_version", "").lower() else "cuda"


class Autotuned:
    """``fn`` with its keyword arguments chosen among ``configs`` per signature
    (see the module docstring); made by ``pl.autotune``.

    ``trials`` holds, per cache key, every candidate's ``Trial`` of the last
    measurement in this process (then those a ``pl.search_space`` pruned, with
    the reason); ``hits`` and ``misses`` count lookups of a
    measured choice (memory or file).
    """

    def __init__(self, fn: Callable, configs: Sequence[Mapping[str, Any]], *,
                 name: str | None = None, key: Callable[..., Any] | None = None,
                 backend: str | None = None, reference: Callable | None = None,
                 tolerance: float | None = None, measure: bool | None = None,
                 cache: bool | str | Path = True):
        # a pl.search_space lists what it pruned before compiling: shown in trials
        self.pruned = tuple(getattr(configs, "pruned", ()))
        configs = autotune_checks.checked_options(
            fn, configs, name=name, key=key, backend=backend, reference=reference,
            tolerance=tolerance, measure=measure, cache=cache)
        labels = [autotune_cache.config_label(c) for c in configs]
        if len(set(labels)) != len(labels):
            twice = sorted({x for x in labels if labels.count(x) > 1})
            raise ValueError(f"pl.autotune: configs repeat {twice}; give each candidate once")
        self.fn, self.configs, self.labels = fn, configs, tuple(labels)
        self.name = name or _default_name(fn)
        self.key, self.backend, self.reference = key, backend, reference
        self.tolerance, self.measure, self.cache = tolerance, measure, cache
        self.trials: dict[str, list[Trial]] = {}
        self.hits = self.misses = 0
        self._chosen: dict[str, int] = {}        # cache key -> index of the measured winner
        self._fallback: dict[str, int] = {}      # cache key -> first candidate that lowers
        self._not_in_file: set[str] = set()      # keys the cache file was read for in vain
        functools.update_wrapper(self, fn, updated=())

    # --- calling -------------------------------------------------------------------------

    def __call__(self, *args, **kwargs):
        """``fn(*args, **kwargs, **chosen_config)``."""
        return self.fn(*args, **kwargs, **self.best_config(*args, **kwargs))

    def best_config(self, *args, **kwargs) -> Mapping[str, Any]:
        """The config a call with these arguments runs with (measured on the first
        call for the signature on an accelerator; see the module docstring)."""
        self._check_kwargs(kwargs)
        leaves = _leaves(args, kwargs)
        device = _device_of(leaves)
        key = self._cache_key(args, kwargs, device)
        index = self._lookup(key)
        if index is not None:
            self.hits += 1
            return self.configs[index]
        traced = any(_is_traced(x) for x in leaves)
        if traced or not self._measuring(device):
            return self.configs[self._first_valid(key, args, kwargs)]
        self.misses += 1
        return self.configs[self._tune(key, args, kwargs)]

    def tune(self, *args, **kwargs) -> dict[str, Any]:
        """Measures every candidate on these (concrete) arguments now, whatever is
        cached or the platform, stores the choice and returns its cache entry."""
        self._check_kwargs(kwargs)
        if any(_is_traced(x) for x in _leaves(args, kwargs)):
            raise ValueError(f"autotune {self.name!r}: tune() needs concrete arrays, got traced "
                             "values (call it outside jax.jit)")
        key = self.cache_key(*args, **kwargs)
        self._tune(key, args, kwargs)
        return self._last_entry

    def signature(self, *args, **kwargs) -> str:
        """What the choice for this call depends on, as text: ``repr`` of what
        ``key`` returns, else the structure of the arguments with each array's
        dtype and shape and every other value's ``repr``."""
        if self.key is not None:
            return repr(self.key(*args, **kwargs))
        return signature(args, kwargs)

    def cache_key(self, *args, **kwargs) -> str:
        """The key this call's choice is stored under: ``name``, ``signature``,
        the device kind and the backend."""
        return self._cache_key(args, kwargs, _device_of(_leaves(args, kwargs)))

    def _cache_key(self, args, kwargs, device) -> str:
        return autotune_cache.cache_key(self.name, self.signature(*args, **kwargs),
                                        device.device_kind, self._backend_name(device))

    @property
    def choices(self) -> dict[str, Mapping[str, Any]]:
        """Cache key -> the config chosen by measurement (here or read from the
        cache file) in this process; untimed fallbacks are not listed."""
        return {key: self.configs[i] for key, i in self._chosen.items()}

    def cache_path(self) -> Path | None:
        """The cache file this tuner reads and writes; None: memory only."""
        if self.cache is False:
            return None
        if self.cache is True:
            return autotune_cache.default_cache_path()
        return Path(self.cache).expanduser()

    # --- choosing ------------------------------------------------------------------------

    def _check_kwargs(self, kwargs):
        tuned = sorted({k for c in self.configs for k in c} & set(kwargs))
        if tuned:
            raise TypeError(f"autotune {self.name!r}: keyword arguments {tuned} are chosen by the "
                            "tuner (they appear in configs); do not pass them to the call")

    def _lookup(self, key: str) -> int | None:
        if key in self._chosen:
            return self._chosen[key]
        path = self.cache_path()
        if path is None or key in self._not_in_file:
            return None
        entry = autotune_cache.read_entry(path, key)
        if entry is not None and entry["winner"] in self.labels:
            self._chosen[key] = self.labels.index(entry["winner"])
            return self._chosen[key]
        self._not_in_file.add(key)      # absent, or won by a candidate no longer offered
        return None

    def _measuring(self, device) -> bool:
        if self.measure is not None:
            return bool(self.measure)
        return _platform_of(device) != "cpu"

    def _first_valid(self, key: str, args, kwargs) -> int:
        """The first candidate that lowers for these arguments (nothing runs)."""
        if key not in self._fallback:
            import jax
            structs = [jax.ShapeDtypeStruct(np.shape(x), x.dtype) if _is_array(x) else x
                       for x in _leaves(args, kwargs)]
            errors = []
            for i, config in enumerate(self.configs):
                call, arrays = autotune_compile.bound_call(self.fn, config, args, kwargs, structs)
                try:
                    jax.jit(call).lower(*arrays)
                except Exception as e:  # noqa: BLE001 - a candidate that does not lower is skipped
                    errors.append(f"  {self.labels[i]}: {_one_line(e)}")
                    continue
                self._fallback[key] = i
                break
            else:
                raise RuntimeError(f"autotune {self.name!r}: no candidate lowers for "
                                   f"{signature(args, kwargs)}:\n" + "\n".join(errors))
        return self._fallback[key]

    def _tune(self, key: str, args, kwargs) -> int:
        import jax
        trials: list[Trial] = []
        valid = self._right_candidates(args, kwargs, trials)
        device = _device_of(_leaves(args, kwargs))
        timer = self._timer(device)
        autotune_compile.prepare_timing_loops(timer, [(m[2], m[3]) for m in valid])
        timed = {}
        for label, config, call, arrays in valid:
            try:
                timed[label] = Trial(label, config, float(timer(call, tuple(arrays))))
            except Exception as e:  # noqa: BLE001
                timed[label] = Trial(label, config, None, f"timing failed: {_one_line(e)}")
        by_label = {t.label: t for t in trials} | timed
        trials = [by_label[label] for label in self.labels]
        self.trials[key] = trials + [Trial(p.label, p.params, None, f"pruned: {p.reason}")
                                     for p in self.pruned]
        seconds = {t.label: t.seconds for t in trials}
        if all(s is None for s in seconds.values()):
            raise RuntimeError(f"autotune {self.name!r}: every candidate failed for "
                               f"{signature(args, kwargs)}:\n"
                               + "\n".join(f"  {t.label}: {t.error}" for t in trials))
        self._last_entry = autotune_cache.make_entry(
            seconds, errors={t.label: t.error for t in trials if t.error},
            name=self.name, signature=self.signature(*args, **kwargs),
            device_kind=device.device_kind,
            backend=self._backend_name(device), jax_version=jax.__version__,
            measured_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
        index = self.labels.index(self._last_entry["winner"])
        self._chosen[key] = index
        path = self.cache_path()
        if path is not None:
            autotune_cache.write_entry(path, key, self._last_entry)
        return index

    def _right_candidates(self, args, kwargs, trials: list[Trial]) -> list[tuple]:
        """Runs every candidate once; returns ``(label, config, call, arrays)`` of
        those whose outputs are right, and appends a ``Trial`` for each dropped.

        Right: within tolerance of ``reference``'s outputs when given; else of
        the outputs most candidates agree on (the first candidate's group when
        no group is larger, with a warning), so that one wrong candidate, the
        first included, cannot make the others look wrong. Groups with more NaN
        outputs than the fewest any group has are wrong whatever their size.
        """
        import jax
        # outputs stay where they were computed: output_agreement compares them there
        expected = None if self.reference is None else jax.block_until_ready(
            self.reference(*args, **kwargs))
        right, groups = [], []          # groups: [outputs of the first member, members]
        # host arrays go to the device once, not at every timed call
        leaves = [jax.device_put(x) if isinstance(x, np.ndarray) else x
                  for x in _leaves(args, kwargs)]
        bound = [autotune_compile.bound_call(self.fn, config, args, kwargs, leaves)
                 for config in self.configs]
        compiled = autotune_compile.compile_calls(bound)      # several at a time
        for label, config, (call, arrays), program in zip(self.labels, self.configs, bound,
                                                          compiled):
            try:
                if isinstance(program, Exception):
                    raise program
                out = jax.block_until_ready(program(*arrays))
            except Exception as e:  # noqa: BLE001 - a failing candidate is a result, not a crash
                trials.append(Trial(label, config, None, f"failed: {_one_line(e)}"))
                continue
            member = (label, config, call, arrays)
            if expected is not None:
                why = _mismatch(out, expected, self.tolerance, same_dtype=False)
                if why:
                    trials.append(Trial(label, config, None, f"wrong result: {why} (against "
                                                             "the reference)"))
                else:
                    right.append(member)
                continue
            group = next((g for g in groups if not _mismatch(out, g[0], self.tolerance)), None)
            if group is None:
                groups.append([out, [member]])
            else:
                group[1].append(member)
        if expected is not None or not groups:
            return right
        import warnings
        # A group with more NaN outputs than another is wrong whatever its size: NaN is
        # what an unwritten output block or a read past an array's end gives.
        nans = [_nan_count(g[0]) for g in groups]
        fewest = min(nans)
        kept = [g for g, n in zip(groups, nans) if n == fewest]
        best = max(kept, key=lambda g: len(g[1]))      # the earliest of the largest
        agreeing = [m[0] for m in best[1]]
        # said out loud when counting alone would have kept them (a tie or a majority)
        nan_labels = [m[0] for g, n in zip(groups, nans)
                      if n > fewest and len(g[1]) >= len(best[1]) for m in g[1]]
        if nan_labels:
            warnings.warn(f"autotune {self.name!r}: candidates {nan_labels} output NaN where "
                          f"{agreeing} do not; they are dropped, never chosen. NaN in an output "
                          f"usually means a block that no grid point writes or a read past an "
                          f"array's end: check their block sizes against the shapes. Pass "
                          f"reference= to say what is right.", stacklevel=4)
        if sum(len(g[1]) == len(best[1]) for g in kept) > 1:
            warnings.warn(f"autotune {self.name!r}: the candidates give {len(kept)} different "
                          f"results and no group of them is larger; keeping those that agree "
                          f"with the first ({agreeing}). Pass reference= to say what is right.",
                          stacklevel=4)
        for (outputs, members), n in zip(groups, nans):
            if members is best[1]:
                continue
            if n > fewest:
                why = (f"outputs NaN at {n} elements where {agreeing} output "
                       f"{fewest or 'none'}")
            else:
                why = _mismatch(outputs, best[0], self.tolerance)
            trials += [Trial(m[0], m[1], None, f"wrong result: {why} (against {agreeing})")
                       for m in members]
        return best[1]

    # --- the backend and its timing hook -------------------------------------------------

    def _backend_object(self, device):
        from pallas_frontend import registry
        from pallas_frontend.backend_api import BackendUnavailableError
        try:
            if self.backend is not None:
                return registry.get_backend(self.backend)
            return registry.which_backend(platform=_platform_of(device))
        except BackendUnavailableError:
            if self.backend is not None:
                raise
            return None                 # no backend serves the platform: the default timer

    def _backend_name(self, device) -> str | None:
        if self.backend is not None:
            return self.backend
        backend = self._backend_object(device)
        return backend.name if backend is not None else None

    def _timer(self, device) -> Callable[[Callable, tuple], float]:
        backend = self._backend_object(device)
        # feature probing (API 1.9): a backend object without the hook gets the default
        hook = getattr(backend, "seconds_per_call", None)
        if hook is None:
            from pallas_frontend.backend_base import default_seconds_per_call
            return default_seconds_per_call
        return hook

    def __repr__(self):
        return f"<autotuned {self.name} over {len(self.configs)} configs>"


def autotune(fn: Callable | None = None, *, configs: Sequence[Mapping[str, Any]],
             name: str | None = None, key: Callable[..., Any] | None = None,
             backend: str | None = None, reference: Callable | None = None,
             tolerance: float | None = None, measure: bool | None = None,
             cache: bool | str | Path = True) -> Autotuned | Callable[[Callable], Autotuned]:
    """``fn`` run with the fastest of ``configs`` (dicts of keyword arguments) per
    signature of its arguments; a decorator when ``fn`` is omitted.

    ``name``: what the cache calls it (default ``module.qualname`` of ``fn``;
    give one for a lambda or a ``functools.partial``). ``key(*args, **kwargs)``:
    what the choice depends on, in place of the shapes and dtypes of the
    arguments. ``backend``: whose ``seconds_per_call`` hook times the candidates
    (default: the platform's default backend). ``reference(*args, **kwargs)``:
    the expected outputs (default: the first candidate that runs); a candidate
    further from them than ``tolerance`` (max abs difference over the reference's
    largest magnitude; default by dtype: 1e-4 float32, 1e-2 bfloat16, exact for
    integers) is dropped as wrong. ``measure``: time candidates (default: only
    on an accelerator). ``cache``: True for the file ``PALLAS_FRONTEND_AUTOTUNE_CACHE``
    names (or the default under ``~/.cache``), a path, or False for memory only.
    """
    options = dict(configs=configs, name=name, key=key, backend=backend, reference=reference,
                   tolerance=tolerance, measure=measure, cache=cache)
    if fn is None:
        return lambda f: Autotuned(f, **options)
    return Autotuned(fn, **options)


# --- helpers -----------------------------------------------------------------------------

def _default_name(fn) -> str:
    """``module.qualname`` of ``fn``, stable across processes (the cache file's
    keys); a ``functools.partial`` adds what it binds."""
    if isinstance(fn, functools.partial):
        bound = [repr(a) for a in fn.args] + [f"{k}={v!r}" for k, v in sorted(fn.keywords.items())]
        return f"{_default_name(fn.func)}({', '.join(bound)})"
    qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{getattr(fn, '__module__', None) or '?'}.{qualname}"


def _leaves(args, kwargs) -> list:
    import jax
    return jax.tree.leaves((tuple(args), dict(kwargs)))


def _device_of(leaves):
    """The device the arguments (their pytree ``leaves``) live on: the first
    concrete array's, else JAX's default."""
    import jax
    for x in leaves:
        if isinstance(x, jax.Array) and not _is_traced(x):
            try:
                return next(iter(x.devices()))
            except Exception:  # noqa: BLE001 - deleted or abstract arrays: look further
                continue
    return jax.devices()[0]


def _one_line(e: BaseException) -> str:
    """The error's first line, and the user's line it came from when it names none."""
    from pallas_frontend.frames import user_line
    text = str(e).strip().splitlines()
    line = f"{type(e).__name__}: {text[0] if text else ''}"
    where = user_line(e.__traceback__)
    if where is not None and where[0] not in line:
        line += f" (at {where[0]}:{where[1]}: {where[2]})"
    return line
