"""Stand-in for ``jax._src.hypothesis_test_util`` where the installed jax lacks it.

Only what the Pallas tests use: a deterministic profile and a plain test case
(pytest does no sharding, so the sharded loader is the ordinary one).
"""
import unittest

import hypothesis as hp
from jax._src import test_util as jtu


def hypothesis_is_thread_safe() -> bool:
    return tuple(int(x) for x in hp.__version__.split(".")[:3]) >= (6, 136, 9)


def setup_hypothesis(max_examples=30) -> None:
    checks = [hp.HealthCheck.differing_executors] if hasattr(hp.HealthCheck, "differing_executors") else []
    hp.settings.register_profile("deterministic", database=None, derandomize=True, deadline=None,
                                 max_examples=max_examples, print_blob=True,
                                 suppress_health_check=checks)
    hp.settings.load_profile("deterministic")


class HypothesisShardedTestCase(jtu.JaxTestCase):
    pass


HypothesisShardedTestLoader = unittest.TestLoader
