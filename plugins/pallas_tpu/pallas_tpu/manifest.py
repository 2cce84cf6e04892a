"""What the conformance suite (``pallas_frontend.testing``) must skip or
expect to fail on backend ``tpu``: test-name pattern -> one-line reason.

On CPU the suite runs kernels in TPU interpret mode and compiles the
lowering layer for one v5e chip with libtpu (see ``aot.py``).
"""

_UNTILED = ("a VMEM block of {block} over a {array} array tiles neither (8, 128) nor the "
            "array dims; Mosaic cannot take it and check() says so before lowering")

UNSUPPORTED: dict[str, str] = {
    "test_lowers_and_compiles[blocked_matmul]": _UNTILED.format(block="(32, 32)", array="(64, 96)"),
    "test_blocked_matmul_accumulates_over_k": _UNTILED.format(block="(32, 32)", array="(64, 96)"),
    "test_matches_reference_interpreter[blocked_matmul]":
        _UNTILED.format(block="(32, 32)", array="(64, 96)"),
    "test_lowers_and_compiles[transpose_2d]": _UNTILED.format(block="(16, 8)", array="(32, 48)"),
    "test_2d_grid_transposing_out_index_map": _UNTILED.format(block="(16, 8)", array="(32, 48)"),
    "test_matches_reference_interpreter[transpose_2d]":
        _UNTILED.format(block="(16, 8)", array="(32, 48)"),
    "test_scratch_accumulator": _UNTILED.format(block="(16, 16)", array="(32, 64)"),
    "test_input_output_aliasing": _UNTILED.format(block="(64,)", array="(256,)"),
}

XFAIL: dict[str, str] = {}
