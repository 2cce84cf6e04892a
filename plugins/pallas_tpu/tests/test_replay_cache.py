"""The evaluator's memo of which jaxprs hold TPU primitives to replay lives only
as long as each jaxpr: keyed by id(), a dead jaxpr's answer was given to a new
jaxpr at the same address (tokamax / tpu-inference kernels run in one process
lost their DMAs' replay)."""

import gc
import weakref

import jax
import jax.numpy as jnp

from pallas_tpu import evaluate


def _plain_jaxpr(k):
    return jax.make_jaxpr(lambda x: x * k + 1.0)(jnp.float32(1)).jaxpr


def test_memo_dies_with_its_jaxpr():
    jaxprs = [_plain_jaxpr(float(k)) for k in range(20)]
    assert not any(evaluate.jaxpr_needs_replay(j) for j in jaxprs)
    assert all(j in evaluate._replay_cache for j in jaxprs)
    refs = [weakref.ref(j) for j in jaxprs]
    held = len(evaluate._replay_cache)
    del jaxprs
    gc.collect()
    assert all(r() is None for r in refs)
    # their answers went with them (no answer left for a reused address); other
    # entries may go too, as JAX's caches drop jaxprs of earlier tests meanwhile
    assert len(evaluate._replay_cache) <= held - 20
