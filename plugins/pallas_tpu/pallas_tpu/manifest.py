"""What the conformance suite (``pallas_frontend.testing``) must skip or
expect to fail on backend ``tpu``: test-name pattern -> one-line reason.

On CPU the suite runs kernels in TPU interpret mode and compiles the
lowering layer for one v5e chip with libtpu (see ``aot.py``). The suite's
kernels use blocks that tile (8, 128), so nothing is excluded today.
"""

UNSUPPORTED: dict[str, str] = {}

XFAIL: dict[str, str] = {}
