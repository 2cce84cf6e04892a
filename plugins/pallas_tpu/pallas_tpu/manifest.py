"""What the conformance suite (``pallas_frontend.testing``) must skip or
expect to fail on backend ``tpu``: test-name pattern -> one-line reason.

On CPU the suite runs kernels in TPU interpret mode and compiles the
lowering layer for one v5e chip with libtpu (see ``aot.py``). The suite's
kernels use blocks that tile (8, 128). Excluded: the portable-semaphore
kernel, and the two tests whose point is a ``pl.Element`` window at offsets
that are not multiples of the tile, which Mosaic cannot compile. (The second
also writes (squeezed, 128) blocks, which ``check.check_for_chip`` refuses in
TPU interpret mode too; window offsets are not checked before Mosaic.)
"""

UNSUPPORTED: dict[str, str] = {
    "test_capability_tag_is_checked[semaphores]":
        "the frontend's portable semaphores live in int32 scratch; Mosaic TPU signals only "
        "pltpu.SemaphoreType scratch (its own semaphore tests cover the tag)",
    "test_unaligned_element_offsets":
        "pl.Element windows at offsets i * 128 + 5: Mosaic TPU needs a window offset it "
        "can prove a multiple of the lane tile (128) ('Couldn't prove that tiling (128) "
        "divides index returned by transform_indices'); its aligned Element windows are "
        "covered by the capability kernel and tests/test_element_blocks.py",
    "test_overlapping_unaligned_element_windows":
        "pl.Element windows at offsets 3 + 44 * i, not multiples of the lane tile (128), "
        "which Mosaic TPU cannot compile; and (squeezed, 128) output blocks of a (6, 128) "
        "array, which JAX's TPU lowering refuses (the last two block dims must be "
        "divisible by 8 and 128 or equal the array's)",
}

XFAIL: dict[str, str] = {}
