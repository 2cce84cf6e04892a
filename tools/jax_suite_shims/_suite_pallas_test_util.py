"""Stand-in for ``jax._src.pallas.pallas_test_util`` where the installed jax lacks it.

Both copies of the suite import this same file; ``PALLAS_JAX_SUITE_TARGET``
(set by tools/jax_suite.py) says whose ``pallas_call`` the helper method uses.
"""
import os

from jax._src import test_util as jtu

if os.environ.get("PALLAS_JAX_SUITE_TARGET") == "ours":
    import pallas_frontend as _pallas
else:
    from jax.experimental import pallas as _pallas


class PallasTest(jtu.JaxTestCase):
    INTERPRET: bool = False

    def setUp(self):
        # This machine has no accelerator: only the interpret-mode variants run.
        on_cpu = jtu.test_device_matches(["cpu"])
        if on_cpu and not self.INTERPRET:
            self.skipTest("On CPU the test works only in interpret mode")
        if not on_cpu and self.INTERPRET:
            self.skipTest("Only run interpret tests on CPU.")
        super().setUp()

    def pallas_call(self, *args, **kwargs):
        return _pallas.pallas_call(*args, **kwargs, interpret=self.INTERPRET)


class PallasTPUTest(PallasTest):
    def setUp(self):
        if not jtu.test_device_matches(["tpu"]) and not self.INTERPRET:
            self.skipTest("Test requires TPUs")
        super().setUp()
