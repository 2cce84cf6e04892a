"""Version-skew shims shared by both copies of the suite (see tools/jax_suite.py)."""
import contextlib

from jax._src import config

if not hasattr(config, "jax_pallas_use_mosaic_gpu"):
    # jax 0.12 dropped this flag (it chose Mosaic GPU over Triton on GPUs);
    # the tests only enter it, and on CPU it selects nothing.
    class _DroppedFlag:
        value = False

        def __call__(self, new_value):
            return contextlib.nullcontext()

    config.jax_pallas_use_mosaic_gpu = _DroppedFlag()
