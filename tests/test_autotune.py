"""pl.autotune and its parts: the device-loop timer, the backend's timing hook
(API 1.9), the JSON cache, the choice (fake timers: no timing flakiness), the
CPU fallback, and the rejection of candidates with wrong results."""

import ast
import functools
import importlib.util
import json
import types
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
from pallas_frontend import autotune_cache, backend_api, device_timing, env_config, registry
from pallas_frontend.env_config import ConfigError

from conftest import rand

DEVICE_TIMING = Path(device_timing.__file__)


@pytest.fixture(autouse=True)
def cache_file(tmp_path, monkeypatch):
    """Every test's default cache file is its own (never the user's ~/.cache)."""
    path = tmp_path / "autotune.json"
    monkeypatch.setenv(autotune_cache.ENV_CACHE, str(path))
    return path


def add_kernel(x, y, *, block):
    """x + y in blocks of ``block`` elements (a block that does not divide the
    length leaves the tail unwritten: NaN in the interpreter)."""
    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + y_ref[...]
    spec = pl.BlockSpec((block,), lambda i: (i,))
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(x.shape[0] // block,), in_specs=[spec, spec], out_specs=spec)(x, y)


class FakeTimer(backend_api.Backend):
    """A backend whose timing hook answers from a list, in the order it is asked."""
    name, api_version, platforms = "fake_timer", backend_api.API_VERSION, ("cpu",)

    def __init__(self, times):
        self.times, self.asked = list(times), 0

    def seconds_per_call(self, fn, args):
        self.asked += 1
        return self.times.pop(0)


@pytest.fixture
def fake_timer():
    backends = []

    def make(times):
        backends.append(registry.register_backend(FakeTimer(times)))
        return backends[-1]
    yield make
    for b in backends:
        registry.unregister_backend(b.name)


# --- the device-loop timer ---------------------------------------------------------------

def _chain(x, *, steps):
    """``steps`` dependent elementwise steps: the cost grows with ``steps`` on one
    thread (a CPU matmul's threads make its scaling noisy on a loaded machine)."""
    return jax.lax.fori_loop(0, steps, lambda i, v: jnp.sin(v) + v * 0.5, x)


def test_device_timing_scales_with_the_work(rng):
    # 8x the steps is 8x the work; loose bounds, and up to three tries: a shared,
    # noisy CPU (other processes can take the core for a whole measurement)
    x = rand(rng, 2048)
    tries = []
    for _ in range(3):
        short = device_timing.time_per_call(functools.partial(_chain, steps=8), x)
        long = device_timing.time_per_call(functools.partial(_chain, steps=64), x)
        tries.append((long.seconds / short.seconds, short.as_dict(), long.as_dict()))
        if 3 < tries[-1][0] < 20:
            break
    assert 3 < tries[-1][0] < 20, tries
    for t in (short, long):
        assert not t.upper_bound and t.calls >= 1
        assert len(t.loop_seconds) == len(t.triple_loop_seconds) == len(t.per_call_seconds) == 3
        # n grew until the loop took 20 ms (later runs may be a little faster)
        assert max(t.loop_seconds) >= 0.01 or t.calls == 1 << 16


def test_device_timing_takes_pytrees(rng):
    x = rand(rng, 64, 64)
    timing = device_timing.time_per_call(
        lambda p: (p["a"] @ p["a"], {"sum": p["a"].sum(), "b": p["b"] + 1}),
        {"a": x, "b": np.arange(4, dtype=np.int32)}, min_loop_seconds=0.005, repetitions=2)
    assert timing.seconds > 0 and len(timing.per_call_seconds) == 2
    assert json.loads(json.dumps(timing.as_dict()))["calls"] == timing.calls


def test_device_loop_makes_dependent_calls(rng):
    # the loop's result is one call's: the barrier changes no value
    x = rand(rng, 16)
    out = device_timing.device_loop(lambda a: (a * 2, a.sum()), (x,))((x,), np.int32(5))
    np.testing.assert_allclose(np.asarray(out[0]), x.astype(np.float64) * 2, rtol=1e-6)
    np.testing.assert_allclose(float(out[1]), x.astype(np.float64).sum(), rtol=1e-5)
    with pytest.raises(ValueError, match="repetitions=0"):
        device_timing.time_per_call(jnp.sin, x, repetitions=0)


def test_device_timing_loads_by_path_and_imports_only_jax_and_numpy():
    # the TPU host loads it from the file, without this project installed
    tree = ast.parse(DEVICE_TIMING.read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= {"threading", "time", "weakref", "numpy", "jax", "jax.numpy"}, imported
    spec = importlib.util.spec_from_file_location("loose_device_timing", DEVICE_TIMING)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)          # not in sys.modules: must still work
    assert module.time_per_call(jnp.cos, np.ones(8, np.float32), min_loop_seconds=0.001,
                                repetitions=1).seconds > 0


# --- the backend hook (API 1.9) ----------------------------------------------------------

def test_every_backend_has_the_timing_hook(rng):
    x = rand(rng, 128, 128)
    seconds = registry.get_backend("interpret").seconds_per_call(jnp.dot, (x, x))
    assert isinstance(seconds, float) and seconds > 0
    assert backend_api.API_VERSION >= (1, 9)


def test_plugin_backends_inherit_the_timing_hook(rng):
    x = rand(rng, 64)
    found = 0
    for module in ("pallas_triton", "pallas_tpu", "pallas_mgpu"):
        try:
            importlib.import_module(module)
        except ImportError:
            continue
        backend = registry.get_backend({"pallas_triton": "triton", "pallas_tpu": "tpu",
                                        "pallas_mgpu": "mgpu"}[module])
        assert backend.seconds_per_call(jnp.sin, (x,)) > 0
        found += 1
    if not found:
        pytest.skip("no plugin installed")


class Older(backend_api.Backend):
    """A third party's backend written against API 1.8: it knows no timing hook."""
    name, api_version, platforms = "older_third_party", (1, 8), ("cpu",)


def test_a_backend_of_api_1_8_is_timed_by_the_default(rng):
    registry.register_backend(Older())            # accepted: an older minor
    try:
        assert "seconds_per_call" not in vars(Older)
        tuned = pl.autotune(add_kernel, configs=[{"block": 64}, {"block": 256}],
                            backend="older_third_party", measure=True, name="older")
        x, y = rand(rng, 1024), rand(rng, 1024)
        np.testing.assert_allclose(np.asarray(tuned(x, y)), x.astype(np.float64) + y, rtol=1e-6)
        (trials,) = tuned.trials.values()
        assert all(t.seconds > 0 and not t.error for t in trials), trials
        assert json.loads(next(iter(tuned.trials)))["backend"] == "older_third_party"
    finally:
        registry.unregister_backend("older_third_party")


def test_a_backend_object_without_the_hook_gets_the_default(rng, monkeypatch):
    # feature probing: the frontend asks getattr, so an object lacking the hook works
    tuned = pl.autotune(jnp.sin, configs=[{}], measure=True, name="bare")
    monkeypatch.setattr(type(tuned), "_backend_object",
                        lambda self, device: types.SimpleNamespace(name="no_hook"))
    x = rand(rng, 32)
    np.testing.assert_allclose(np.asarray(tuned(x)), np.sin(x.astype(np.float64)), rtol=1e-6)
    assert next(iter(tuned.trials.values()))[0].seconds > 0


# --- choosing ----------------------------------------------------------------------------

def test_choose_winner_is_the_fewest_seconds_first_on_ties():
    assert autotune_cache.choose_winner({"a": 3.0, "b": 1.0, "c": 2.0}) == "b"
    assert autotune_cache.choose_winner({"a": None, "b": 2.0, "c": 2.0}) == "b"
    assert autotune_cache.choose_winner({"a": float("nan"), "b": 5.0}) == "b"
    with pytest.raises(ValueError, match="no candidate has a time"):
        autotune_cache.choose_winner({"a": None})


def test_fastest_by_the_hook_wins_and_later_calls_are_cached(rng, fake_timer, cache_file):
    timer = fake_timer([3e-3, 1e-3, 2e-3])       # the middle one is fastest: not "first wins"
    configs = [{"block": 64}, {"block": 128}, {"block": 256}]
    tuned = pl.autotune(add_kernel, configs=configs, backend="fake_timer", measure=True,
                        name="add")
    x, y = rand(rng, 1024), rand(rng, 1024)
    out = tuned(x, y)
    assert tuned.best_config(x, y) == {"block": 128} and timer.asked == 3
    np.testing.assert_allclose(np.asarray(out), x.astype(np.float64) + y, rtol=1e-6)
    assert (tuned.misses, tuned.hits) == (1, 1)
    x2, y2 = rand(rng, 1024), rand(rng, 1024)    # same signature, new data: no timing
    np.testing.assert_allclose(np.asarray(tuned(x2, y2)), x2.astype(np.float64) + y2, rtol=1e-6)
    assert timer.asked == 3 and tuned.misses == 1
    # the file holds the choice with every time; another tuner (process) reads it
    (entry,) = autotune_cache.read_entries(cache_file).values()
    assert entry["winner"] == "block=128"
    assert entry["seconds"] == {"block=64": 3e-3, "block=128": 1e-3, "block=256": 2e-3}
    assert entry["device_kind"] == jax.devices()[0].device_kind and entry["backend"] == "fake_timer"
    again = pl.autotune(add_kernel, configs=configs, backend="fake_timer", measure=True,
                        name="add")
    assert again.best_config(x, y) == {"block": 128} and timer.asked == 3 and again.hits == 1


def test_decorator_form_and_static_keyword_arguments(rng, fake_timer):
    fake_timer([2e-3, 1e-3, 5e-3, 1e-3])

    @pl.autotune(configs=[{"block": 128}, {"block": 256}], backend="fake_timer", measure=True)
    def scaled_add(x, y, *, scale, block):
        return add_kernel(x * scale, y, block=block)
    x, y = rand(rng, 512), rand(rng, 512)
    for scale in (2.0, 3.0):        # a static keyword's value is part of the signature
        np.testing.assert_allclose(np.asarray(scaled_add(x, y, scale=scale)),
                                   scale * x.astype(np.float64) + y, rtol=1e-6, atol=1e-6)
    assert scaled_add.misses == 2 and len(scaled_add.choices) == 2
    assert list(scaled_add.choices.values()) == [{"block": 256}, {"block": 256}]
    with pytest.raises(TypeError, match=r"\['block'\] are chosen by the tuner"):
        scaled_add(x, y, scale=1.0, block=128)


def test_failing_candidates_are_recorded_and_all_failing_raises(rng, fake_timer):
    fake_timer([1e-3])
    tuned = pl.autotune(add_kernel, configs=[{"block": 0}, {"block": 128}],
                        backend="fake_timer", measure=True)
    x, y = rand(rng, 256), rand(rng, 256)
    np.testing.assert_allclose(np.asarray(tuned(x, y)), x.astype(np.float64) + y, rtol=1e-6)
    (trials,) = tuned.trials.values()
    assert trials[0].seconds is None and trials[0].error.startswith("failed: ")
    with pytest.raises(RuntimeError, match="every candidate failed"):
        pl.autotune(add_kernel, configs=[{"block": 0}], measure=True)(x, y)


def test_bad_configs_are_refused_up_front():
    with pytest.raises(ValueError, match="configs is empty"):
        pl.autotune(add_kernel, configs=[])
    with pytest.raises(ValueError, match="repeat"):
        pl.autotune(add_kernel, configs=[{"block": 8}, {"block": 8}])
    with pytest.raises(ValueError, match="keyword-argument names"):
        pl.autotune(add_kernel, configs=[{1: 8}])


# --- wrong results -----------------------------------------------------------------------

def test_a_faster_wrong_candidate_is_never_chosen(rng, fake_timer):
    # block=96 does not divide 1024: the tail is never written (NaN). It comes first
    # and is the fastest by the timer: the two right candidates still outvote it.
    timer = fake_timer([5e-3, 4e-3])
    tuned = pl.autotune(add_kernel, configs=[{"block": 96}, {"block": 128}, {"block": 256}],
                        backend="fake_timer", measure=True)
    x, y = rand(rng, 1024), rand(rng, 1024)
    np.testing.assert_allclose(np.asarray(tuned(x, y)), x.astype(np.float64) + y, rtol=1e-6)
    assert tuned.best_config(x, y) == {"block": 256} and timer.asked == 2
    wrong = next(iter(tuned.trials.values()))[0]
    assert wrong.seconds is None and wrong.error.startswith("wrong result: ")


def test_reference_decides_what_is_right(rng, fake_timer):
    fake_timer([2e-3, 1e-3])

    def offset_add(x, y, *, bias):
        return x + y + bias
    tuned = pl.autotune(offset_add, configs=[{"bias": 1.0}, {"bias": 0.0}, {"bias": 0.5}],
                        reference=lambda x, y: np.asarray(x, np.float64) + y,
                        backend="fake_timer", measure=True)
    x, y = rand(rng, 64), rand(rng, 64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # no ambiguity to warn about
        np.testing.assert_allclose(np.asarray(tuned(x, y)), x.astype(np.float64) + y,
                                   rtol=1e-6)
    errors = [t.error for t in next(iter(tuned.trials.values()))]
    assert "against the reference" in errors[0] and errors[1] == ""
    assert "against the reference" in errors[2]


def test_disagreeing_candidates_without_reference_warn(rng, fake_timer):
    fake_timer([1e-3])
    tuned = pl.autotune(lambda x, *, k: x * k, configs=[{"k": 1.0}, {"k": 2.0}],
                        backend="fake_timer", measure=True, name="scale")
    with pytest.warns(UserWarning, match="no group of them is larger"):
        tuned(rand(rng, 8))


def test_tolerance_follows_the_dtype():
    from pallas_frontend.output_agreement import mismatch as _mismatch
    ref = np.linspace(1, 2, 64).astype(jnp.bfloat16)
    one_ulp = (ref.astype(np.float32) * (1 + 2**-8)).astype(jnp.bfloat16)
    assert _mismatch(one_ulp, ref, None) == ""
    assert "differs by" in _mismatch(ref.astype(np.float32) * 1.001, ref.astype(np.float32), None)
    assert "exact dtype" in _mismatch(np.array([1, 2]), np.array([1, 3]), None)
    assert _mismatch(np.array([np.inf, 1.0]), np.array([np.inf, 1.0]), None) == ""
    assert "structure" in _mismatch((np.ones(2),), [np.ones(2)], None)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "int32", "bool"])
def test_device_arrays_are_judged_on_device_as_on_the_host(rng, dtype):
    """pl.autotune compares candidates' outputs where they were computed (a large
    output no longer comes to the host); each verdict equals the host's float64 one."""
    from pallas_frontend import output_agreement
    base = rng.standard_normal((64, 96)) * 3
    cases = {"equal": lambda w: w.copy(), "within": lambda w: w * (1 + 1e-6),
             "beyond": lambda w: w * 1.05}
    want = base.astype(dtype)
    for name, change in cases.items():
        got = change(base).astype(dtype)
        for where, value in (("nan", np.nan), ("inf", np.inf)):
            if np.issubdtype(want.dtype, np.floating):
                odd = got.copy()
                odd[rng.integers(64), rng.integers(96)] = value
                host = output_agreement.mismatch(odd, want)
                device = output_agreement.mismatch(jnp.asarray(odd), jnp.asarray(want))
                assert bool(host) == bool(device) and device.split(" ")[:3] == \
                    host.split(" ")[:3], (name, where, host, device)
                assert output_agreement.nan_count(jnp.asarray(odd)) == \
                    output_agreement.nan_count(odd)
        host = output_agreement.mismatch(got, want)
        device = output_agreement.mismatch(jnp.asarray(got), jnp.asarray(want))
        assert bool(host) == bool(device), (name, host, device)
        assert device.split(" by ")[0] == host.split(" by ")[0], (name, host, device)


# --- off device: nothing timed -----------------------------------------------------------

class NeverTime(backend_api.Backend):
    name, api_version, platforms = "never_time", backend_api.API_VERSION, ("cpu",)

    def seconds_per_call(self, fn, args):
        raise AssertionError("timed on the CPU platform")


def test_cpu_runs_the_first_candidate_that_lowers_and_times_nothing(rng):
    registry.register_backend(NeverTime())
    try:
        tuned = pl.autotune(add_kernel, configs=[{"block": 0}, {"block": 128}, {"block": 64}],
                            backend="never_time")
        x, y = rand(rng, 512), rand(rng, 512)
        np.testing.assert_allclose(np.asarray(tuned(x, y)), x.astype(np.float64) + y, rtol=1e-6)
        assert tuned.best_config(x, y) == {"block": 128}
        assert tuned.trials == {} and tuned.misses == 0
        # under jit too: the same choice, made from the traced shapes
        np.testing.assert_allclose(np.asarray(jax.jit(tuned)(x, y)), x.astype(np.float64) + y,
                                   rtol=1e-6)
        with pytest.raises(RuntimeError, match="no candidate lowers"):
            pl.autotune(add_kernel, configs=[{"block": 0}], backend="never_time")(x, y)
    finally:
        registry.unregister_backend("never_time")


def test_cpu_and_jit_use_a_cached_choice_of_this_device_kind_only(rng, cache_file):
    tuned = pl.autotune(add_kernel, configs=[{"block": 64}, {"block": 128}], name="cached_add")
    x, y = rand(rng, 512), rand(rng, 512)
    key = tuned.cache_key(x, y)
    assert json.loads(key)["device_kind"] == jax.devices()[0].device_kind
    other = json.loads(key) | {"device_kind": "TPU v5 lite"}
    other_key = autotune_cache.cache_key(**other)
    assert other_key != key
    # measured elsewhere (offline, on a TPU): not this device's choice
    autotune_cache.write_entry(cache_file, other_key, autotune_cache.make_entry(
        {"block=64": 2.0, "block=128": 1.0}))
    assert tuned.best_config(x, y) == {"block": 64}              # the fallback
    autotune_cache.write_entry(cache_file, key, autotune_cache.make_entry(
        {"block=64": 2.0, "block=128": 1.0}))
    fresh = pl.autotune(add_kernel, configs=[{"block": 64}, {"block": 128}], name="cached_add")
    seen = []
    fresh_fn = fresh.fn
    fresh.fn = lambda *a, **k: (seen.append(k["block"]), fresh_fn(*a, **k))[1]
    np.testing.assert_allclose(np.asarray(jax.jit(fresh)(x, y)), x.astype(np.float64) + y,
                               rtol=1e-6)
    assert seen == [128] and fresh.hits == 1


def test_tune_measures_on_request_and_refuses_tracers(rng, fake_timer):
    fake_timer([2e-3, 1e-3])
    tuned = pl.autotune(add_kernel, configs=[{"block": 64}, {"block": 128}],
                        backend="fake_timer")
    x, y = rand(rng, 256), rand(rng, 256)
    entry = tuned.tune(x, y)                      # on CPU: measured because asked
    assert entry["winner"] == "block=128" and tuned.best_config(x, y) == {"block": 128}
    with pytest.raises(ValueError, match="concrete arrays"):
        jax.jit(lambda a, b: tuned.tune(a, b))(x, y)


# --- the cache file ----------------------------------------------------------------------

def test_cache_round_trip_is_atomic_and_keeps_other_entries(tmp_path):
    path = tmp_path / "sub" / "tune.json"
    first = autotune_cache.make_entry({"a=1": 1.0, "a=2": None}, errors={"a=2": "failed"})
    second = autotune_cache.make_entry({"a=1": 3.0, "a=2": 2.0}, device_kind="TPU v5 lite")
    assert autotune_cache.write_entry(path, "k1", first)
    assert autotune_cache.write_entry(path, "k2", second)
    assert autotune_cache.read_entries(path) == {"k1": first, "k2": second}
    assert autotune_cache.read_entry(path, "k2")["winner"] == "a=2"
    assert [p.name for p in path.parent.iterdir()] == ["tune.json"]   # no temporary left


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"format": "other", "entries": {}}'])
def test_a_corrupt_cache_is_ignored_with_a_warning(rng, fake_timer, cache_file, content):
    cache_file.write_text(content)
    fake_timer([2e-3, 1e-3])
    tuned = pl.autotune(add_kernel, configs=[{"block": 64}, {"block": 128}],
                        backend="fake_timer", measure=True)
    x, y = rand(rng, 256), rand(rng, 256)
    with pytest.warns(UserWarning, match="ignoring it"):
        out = tuned(x, y)
    np.testing.assert_allclose(np.asarray(out), x.astype(np.float64) + y, rtol=1e-6)
    # the next write replaced it with a valid file holding the new choice
    (entry,) = autotune_cache.read_entries(cache_file).values()
    assert entry["winner"] == "block=128"


def test_an_unwritable_cache_warns_and_keeps_the_choice_in_memory(rng, fake_timer, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    fake_timer([2e-3, 1e-3])
    tuned = pl.autotune(add_kernel, configs=[{"block": 64}, {"block": 128}],
                        backend="fake_timer", measure=True, cache=blocker / "autotune.json")
    x, y = rand(rng, 256), rand(rng, 256)
    with pytest.warns(UserWarning, match="cannot be written"):
        tuned(x, y)
    assert tuned.best_config(x, y) == {"block": 128}


def test_cache_variable_is_validated(tmp_path, monkeypatch):
    env = autotune_cache.ENV_CACHE
    monkeypatch.setenv(env, str(tmp_path))
    with pytest.raises(ConfigError, match=rf"{env}=.* is a directory"):
        autotune_cache.default_cache_path()
    with pytest.raises(ConfigError, match=rf"{env}=.* is a directory"):
        env_config.check_settings()           # checked up front with the other settings
    monkeypatch.setenv(env, "1")
    with pytest.raises(ConfigError, match="does not name a .json file"):
        autotune_cache.default_cache_path()
    monkeypatch.setenv(env, "off")
    assert autotune_cache.default_cache_path() is None
    monkeypatch.delenv(env)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert autotune_cache.default_cache_path() == tmp_path / "pallas_frontend" / "autotune.json"


def test_default_names_are_stable_across_processes():
    # the cache file outlives the process: no object addresses in a default name
    assert pl.autotune(add_kernel, configs=[{}]).name == "test_autotune.add_kernel"
    part = pl.autotune(functools.partial(_chain, steps=3), configs=[{}])
    assert part.name == "test_autotune._chain(steps=3)"


def test_config_labels_are_stable_names():
    assert autotune_cache.config_label({"b": (1, 2), "a": 3}) == "a=3, b=(1, 2)"
    assert autotune_cache.config_label({}) == ""


def test_real_kernel_timed_on_cpu_when_asked(rng):
    # the whole path with the default hook: every candidate timed, the result right
    tuned = pl.autotune(add_kernel, configs=[{"block": 256}, {"block": 1024}], measure=True,
                        cache=False)
    x, y = rand(rng, 2048), rand(rng, 2048)
    np.testing.assert_allclose(np.asarray(tuned(x, y)), x.astype(np.float64) + y, rtol=1e-6)
    (trials,) = tuned.trials.values()
    assert all(t.seconds is not None and t.seconds > 0 for t in trials), trials
