"""pl.search_space and pl.tile_sizes: candidates from block parameters, pruned
before compiling, and what pl.autotune shows of the pruned ones."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl


@pytest.mark.parametrize("dim,tile", [(8192, 128), (384, 128), (96, 8), (100, 128)])
def test_tile_sizes_are_dividing_multiples_of_the_tile(dim, tile):
    every = [s for s in range(1, dim + 1) if s % tile == 0 and dim % s == 0]
    assert pl.tile_sizes(dim, tile, powers_of_two=False) == (every or [dim])
    powers = [s for s in every if bin(s // tile).count("1") == 1]
    assert pl.tile_sizes(dim, tile) == (powers or [dim])
    assert all(256 <= s <= 1024 for s in pl.tile_sizes(dim, tile, smallest=256, largest=1024)
               if dim >= 256)


def test_pruning_order_reasons_and_what_is_kept():
    rng = np.random.default_rng()
    budget = int(rng.integers(3, 6)) << 20
    values = {"a": [128, 256, 512, 1024], "b": [128, 256, 512]}
    vmem = lambda p: 2 * 4 * p["a"] * p["b"] + 4096           # noqa: E731
    space = pl.search_space(values, check=lambda p: "b over a" if p["b"] > p["a"] else None,
                            vmem=vmem, budget=budget, rank=lambda p: -p["a"] * p["b"], limit=3,
                            config=lambda p: {"block": (p["a"], p["b"])})
    combos = [dict(a=a, b=b) for a, b in itertools.product(values["a"], values["b"])]
    fits = [p for p in combos if p["b"] <= p["a"] and vmem(p) < budget]
    best = sorted(fits, key=lambda p: -p["a"] * p["b"])[:3]
    assert list(space.params) == best
    assert list(space) == [{"block": (p["a"], p["b"])} for p in best]
    reasons = {tuple(x.params.values()): x.reason for x in space.pruned}
    assert len(reasons) + len(space) == len(combos)
    for p in combos:
        key = (p["a"], p["b"])
        if p["b"] > p["a"]:
            assert reasons[key] == "b over a"
        elif vmem(p) >= budget:
            assert reasons[key].startswith("VMEM estimate") and f"{budget >> 20}.00 MiB" in \
                reasons[key]
        elif p not in best:
            assert "ranked below the first 3" in reasons[key]
    assert space.params_of({"block": (best[0]["a"], best[0]["b"])}) == best[0]


def test_bad_spaces_are_refused_before_anything_runs():
    with pytest.raises(ValueError, match="at least one value"):
        pl.search_space({"a": []})
    with pytest.raises(ValueError, match="together"):
        pl.search_space({"a": [1]}, vmem=lambda p: 1)
    with pytest.raises(ValueError, match="every candidate was pruned"):
        pl.search_space({"a": [1, 2]}, check=lambda p: "no")
    with pytest.raises(ValueError, match="tile=0"):
        pl.tile_sizes(128, 0)


def test_configs_that_coincide_are_kept_once():
    space = pl.search_space({"a": [1, 2], "unused": [0, 1]}, config=lambda p: {"a": p["a"]})
    assert list(space) == [{"a": 1}, {"a": 2}]
    assert all("the same config as" in x.reason for x in space.pruned)


def test_autotune_lists_the_pruned_candidates_in_trials(tmp_path):
    x = jnp.asarray(np.random.default_rng().standard_normal((64, 128)), jnp.float32)

    def scale(v, *, block):
        return v * 2.0 + 0 * block

    space = pl.search_space({"block": [8, 16, 32, 64]}, check=lambda p: None,
                            vmem=lambda p: p["block"] << 16, budget=3 << 20)
    tuned = pl.autotune(scale, configs=space, name="test.space", cache=False, measure=True)
    out = tuned(x)
    np.testing.assert_allclose(np.asarray(out, np.float64), np.asarray(x, np.float64) * 2)
    trials = tuned.trials[tuned.cache_key(x)]
    timed = [t for t in trials if t.seconds is not None]
    pruned = [t for t in trials if t.error.startswith("pruned: VMEM estimate")]
    assert [t.config for t in timed] == [{"block": 8}, {"block": 16}, {"block": 32}]
    assert [t.config for t in pruned] == [{"block": 64}]
    assert tuned.best_config(x) in list(space)
