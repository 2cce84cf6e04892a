"""Issue 39 #4 (round 4): pallas_triton.autotune's candidates as Triton users write
them. ``Config({"BLOCK": 128}, num_warps=4)`` (triton.Config's form) and plain
dicts of block sizes run; what is not a candidate is refused when the tuner is
made, saying what to give, where Python said ``'Config' object is not
iterable`` or every candidate failed with an ``AttributeError``."""

import traceback

import numpy as np
import pytest

import pallas_triton as pt
from pallas_triton.autotune import Config

import kernels as K


def _build(config):
    return lambda x, y: K.add(x, y, block=config.blocks["block"], **config.call_options())


def test_triton_style_options_and_dicts_are_candidates(rng):
    x, y = (rng.standard_normal(512).astype(np.float32) for _ in range(2))
    keyword = Config({"block": 256}, num_warps=8, num_stages=2)
    assert keyword.compiler_params == pt.CompilerParams(num_warps=8, num_stages=2)
    assert Config({"block": 256}, {"num_warps": 8}).compiler_params.num_warps == 8
    tuner = pt.autotune([keyword, {"block": 128}], repeat=1)(_build)
    np.testing.assert_allclose(np.asarray(tuner(x, y)), x.astype(np.float64) + y, rtol=1e-6)
    assert {c.blocks["block"] for c in tuner.configs} == {256, 128}


def _raised_here(call):
    try:
        call()
    except (TypeError, ValueError) as e:
        here = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == __file__]
        assert here, "the user's line is not in the traceback"
        return str(e)
    raise AssertionError("nothing raised")


@pytest.mark.parametrize("make,words", [
    (lambda: Config({"block": 8}, num_warp=4),
     ["['num_warp'] are not options of pallas_triton.CompilerParams", "num_warps"]),
    (lambda: Config([("block", 8)]), ["is not a dict of block sizes", "Config({'block': 256}"]),
    (lambda: Config({"block": 8}, compiler_params=4), ["compiler_params=4 is not a"]),
    (lambda: pt.autotune(Config({"block": 8}))(_build),
     ["configs=Config(", "is not a list of candidates"]),
    (lambda: pt.autotune([3])(_build), ["configs[0] is 3 (of type int)", "pallas_triton.Config"]),
    (lambda: pt.autotune([])(_build), ["configs is empty"]),
    (lambda: pt.Autotuner(3, [Config({"block": 8})]), ["build=3 is not callable"]),
    (lambda: pt.autotune([Config({"block": 8})], cache_file="/")(_build),
     ["cache_file='/' is not the path of a file", ".json"]),
])
def test_what_is_not_a_candidate_is_refused_when_the_tuner_is_made(make, words):
    msg = _raised_here(make)
    for w in words:
        assert w in msg, (w, msg)
