"""The autotuner: picks the clearly faster candidate, caches per signature, runs correctly.

The one timed test here: under Triton's interpreter each program costs about the
same, so a block of 16 over 1024 elements (64 programs) is tens of times slower
than one block of 1024 (1 program) even on a loaded machine; the test asks for 5x.
"""

import jax
import numpy as np
import pytest

import pallas_triton as pt
from pallas_triton.autotune import Autotuner, Config, signature

import kernels as K


def _add_builder(counter=None):
    def build(config):
        if counter is not None:
            counter.append(config)
        return lambda x, y: K.add(x, y, block=config.blocks["block"], **config.call_options())
    return build


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_picks_the_clearly_faster_config(rng):
    slow, fast = Config({"block": 16}), Config({"block": 1024}, pt.CompilerParams(num_warps=8))
    tuner = Autotuner(_add_builder(), [slow, fast], repeat=2)   # slow first: not "the first wins"
    x, y = _f32(rng, 1024), _f32(rng, 1024)
    out = tuner(x, y)
    assert tuner.best_config(x, y) is fast
    (trials,) = tuner.trials.values()
    assert [t.config for t in trials] == [slow, fast]
    assert trials[0].seconds > 5 * trials[1].seconds, trials
    np.testing.assert_allclose(np.asarray(out), x.astype(np.float64) + y, rtol=1e-6, atol=1e-6)


def test_winner_is_cached_per_shape_and_dtype(rng):
    built = []
    configs = [Config({"block": 256}), Config({"block": 512})]
    tuner = pt.autotune(configs, repeat=1)(_add_builder(built))
    x, y = _f32(rng, 1024), _f32(rng, 1024)
    first = tuner(x, y)
    assert (tuner.misses, tuner.hits, len(built)) == (1, 0, 2)

    x2, y2 = _f32(rng, 1024), _f32(rng, 1024)           # same signature, new data
    second = tuner(x2, y2)
    assert (tuner.misses, tuner.hits, len(built)) == (1, 1, 2)   # no re-timing, no rebuild

    x3, y3 = _f32(rng, 2048), _f32(rng, 2048)           # new shape: tuned again
    third = tuner(x3, y3)
    assert tuner.misses == 2 and len(tuner.cache) == 2

    for out, a, b in ((first, x, y), (second, x2, y2), (third, x3, y3)):
        np.testing.assert_allclose(np.asarray(out), a.astype(np.float64) + b, rtol=1e-6, atol=1e-6)


def test_tuned_matmul_matches_numpy(rng):
    configs = [Config({"bm": 16, "bn": 16, "bk": 16}), Config({"bm": 32, "bn": 32, "bk": 16})]

    @pt.autotune(configs, repeat=1)
    def matmul(config):
        b = config.blocks
        return lambda p, q: K.matmul(p, q, bm=b["bm"], bn=b["bn"], bk=b["bk"],
                                     **config.call_options())
    a, b = _f32(rng, 64, 64), _f32(rng, 64, 32)   # the kernel's blocks span k: a power of two
    got = np.asarray(matmul(a, b))
    # float32 accumulation over k=64: rtol 1e-4, atol 1e-4*sqrt(k)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64),
                               rtol=1e-4, atol=1e-4 * np.sqrt(64))


def test_failing_candidate_is_skipped_and_all_failing_raises(rng):
    odd, good = Config({"block": 0}), Config({"block": 64})    # 0: refused before running
    tuner = Autotuner(_add_builder(), [odd, good], repeat=1)
    x, y = _f32(rng, 256), _f32(rng, 256)
    np.testing.assert_allclose(np.asarray(tuner(x, y)), x.astype(np.float64) + y, rtol=1e-6)
    (trials,) = tuner.trials.values()
    assert trials[0].seconds is None and trials[0].error
    with pytest.raises(RuntimeError, match="every candidate failed"):
        Autotuner(_add_builder(), [odd], repeat=1)(x, y)


def test_signature_separates_dtype_and_structure():
    a32 = jax.ShapeDtypeStruct((8,), np.float32)
    a16 = jax.ShapeDtypeStruct((8,), np.float16)
    assert signature((a32,)) != signature((a16,))
    assert signature((a32, a32)) != signature(((a32, a32),))
    assert signature((a32,)) == signature((np.zeros(8, np.float32),))


def test_cache_file_keeps_the_choice_across_tuners(rng, tmp_path):
    # the frontend's cache format: a second tuner (another process) times nothing
    path = tmp_path / "triton_autotune.json"
    configs = [Config({"block": 128}), Config({"block": 256})]
    x, y = _f32(rng, 512), _f32(rng, 512)
    first = pt.autotune(configs, cache_file=path)(_add_builder())
    winner = first.best_config(x, y)
    assert first.misses == 1 and path.is_file()
    built = []
    second = pt.autotune(configs, cache_file=path)(_add_builder(built))
    np.testing.assert_allclose(np.asarray(second(x, y)), x.astype(np.float64) + y, rtol=1e-6)
    assert second.best_config(x, y) is configs[configs.index(winner)]
    assert (second.misses, second.trials, len(built)) == (0, {}, 1)   # only the winner built
