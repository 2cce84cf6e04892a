"""Execution layer, ragged grids whose results depend on position: blocks
that run past the array must be padded (reads) and cropped (writes) where
they are, not shifted into the array. An elementwise kernel cannot tell the
two apart (every element gets the same function of itself); these kernels
compute from program ids and iotas, and reduce over masked edge blocks.
Tolerances: elementwise 1e-5; the reductions 1e-4 (float32 sums of ~300)."""

import numpy as np
import pytest

from pallas_frontend.testing import kernels as K

pytestmark = pytest.mark.execution

# Neither dim divides into (8, 128) blocks: a 3x3 grid with ragged last blocks.
ROWS, COLS, BR, BC = 20, 300, 8, 128


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_position_dependent_ragged_blocks(call_kernel, rng):
    x = _f32(rng, ROWS, COLS)
    got_a, got_b = call_kernel(K.position_ragged, ROWS, COLS, BR, BC)(x)
    want_a, want_b = K.position_ragged_ref(x, BR, BC)
    np.testing.assert_allclose(got_a, want_a, rtol=1e-5, atol=1e-5, err_msg="output 0 (position)")
    np.testing.assert_allclose(got_b, want_b, rtol=1e-5, atol=1e-5,
                               err_msg="output 1 (program ids)")


@pytest.mark.requires("scratch")
def test_ragged_row_reduction_masks_by_position(call_kernel, rng):
    x = _f32(rng, ROWS, COLS) + 0.5      # sums well away from zero
    got_sum, got_max = call_kernel(K.ragged_row_reduction, ROWS, COLS, BR, BC)(x)
    want_sum, want_max = K.ragged_row_reduction_ref(x, BC)
    np.testing.assert_allclose(got_sum, want_sum, rtol=1e-4, atol=1e-4, err_msg="output 0 (sum)")
    np.testing.assert_allclose(got_max, want_max, rtol=1e-6, atol=0, err_msg="output 1 (max)")
