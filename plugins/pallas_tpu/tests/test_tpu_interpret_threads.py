"""TPU interpret mode from several threads: JAX's interpreter keeps one
process-global simulated memory, so overlapping runs of one jitted call gave
wrong results and internal errors (issue 32). pallas_tpu's runs take turns
(``_jax_private.RUN_GATE``, a ``backend_api.RunGate``)."""

import pallas_tpu
from pallas_frontend.testing.threaded import check_calls_from_threads


def test_one_jitted_call_from_six_threads_matches_numpy():
    check_calls_from_threads(threads=6, calls=3, interpret=pallas_tpu.InterpretParams())
