"""Execution layer, ragged grids whose results depend on position: blocks
that run past the array must be padded (reads) and cropped (writes) where
they are, not shifted into the array. An elementwise kernel cannot tell the
two apart (every element gets the same function of itself); these kernels
compute from program ids and iotas, and reduce over masked edge blocks.
Tolerances: elementwise 1e-5; the reductions 1e-4 (float32 sums of ~300)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
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


def _past_the_valid_size(rows, stride, size, block, **call):
    """Row window ``i`` is ``[stride * i, stride * i + size)`` in a block of ``block``
    rows; the body writes the whole block from the program id; ``x`` is aliased to
    the output, so rows that no window holds keep their values."""
    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2 + pl.program_id(0).astype(jnp.float32)
    spec = pl.BlockSpec((pl.BoundedSlice(block), COLS), lambda i: (pl.ds(i * stride, size), 0))
    return pl.pallas_call(body, jax.ShapeDtypeStruct((rows, COLS), jnp.float32),
                          grid=(rows // stride,), in_specs=[spec], out_specs=spec,
                          input_output_aliases={0: 0}, **call)


@pytest.mark.requires("bounded_slice", "aliasing")
def test_bounded_slice_drops_writes_past_the_valid_size(call_kernel, rng):
    """A BoundedSlice block spans its block size, but only its first ``size`` rows are
    the window: writes to the rest are dropped wherever they land (the next window's
    rows, rows no window holds, rows past the array). A backend that writes the whole
    block changes the rows between the windows, in any grid order."""
    rows, stride, size, block = 16, 4, 3, 8
    x = _f32(rng, rows, COLS)
    got = np.asarray(call_kernel(_past_the_valid_size, rows, stride, size, block)(x))
    want = x.astype(np.float64)
    for i in range(rows // stride):
        want[i * stride:i * stride + size] = 2 * want[i * stride:i * stride + size] + i
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
