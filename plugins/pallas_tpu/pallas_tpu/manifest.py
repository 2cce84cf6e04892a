"""What the conformance suite (``pallas_frontend.testing``) must skip or
expect to fail on backend ``tpu``: test-name pattern -> one-line reason.

On CPU the suite runs kernels in TPU interpret mode and compiles the
lowering layer for one v5e chip with libtpu (see ``aot.py``). The suite's
kernels use blocks that tile (8, 128); only the portable-semaphore kernel is
excluded.
"""

UNSUPPORTED: dict[str, str] = {
    "test_capability_tag_is_checked[semaphores]":
        "the frontend's portable semaphores live in int32 scratch; Mosaic TPU signals only "
        "pltpu.SemaphoreType scratch (its own semaphore tests cover the tag)",
}

XFAIL: dict[str, str] = {}
