"""Execution layer, ``pl.Element`` windows whose results depend on where they
start: halo stencils over padded arrays (symmetric and asymmetric padding, 1-D
and down the rows of a 2-D grid) and unpadded windows at unaligned, overlapping
offsets. The capability kernel for ``element`` uses aligned offsets and no
padding, which a backend padding at the wrong end or rounding offsets passes.
Tolerance 1e-5 (float32 sums of a few terms)."""

import numpy as np
import pytest

from pallas_frontend.testing import element_kernels as E

pytestmark = pytest.mark.execution


def _f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.requires("element", "element_padding")
def test_halo_stencil_with_symmetric_padding(call_kernel, rng):
    x, w = _f32(rng, 512), (0.25, -1.0, 2.5, 0.5, -0.75)      # halo 2 on each side
    got = call_kernel(E.stencil_1d, 512, 128, w, 2)(x)
    np.testing.assert_allclose(np.asarray(got), E.stencil_1d_ref(x, w, 2), rtol=1e-5, atol=1e-5)


@pytest.mark.requires("element", "element_padding")
def test_halo_stencil_with_asymmetric_padding(call_kernel, rng):
    x, w = _f32(rng, 384), (1.5, -0.5, 0.25, 2.0, -1.25)      # 3 elements before, 1 after
    got = call_kernel(E.stencil_1d, 384, 128, w, 3)(x)
    np.testing.assert_allclose(np.asarray(got), E.stencil_1d_ref(x, w, 3), rtol=1e-5, atol=1e-5)


@pytest.mark.requires("element", "element_padding")
def test_row_stencil_with_asymmetric_padding_on_a_2d_grid(call_kernel, rng):
    x = _f32(rng, 32, 256)
    got = call_kernel(E.stencil_rows, 32, 256, 8, 1, 2)(x)
    np.testing.assert_allclose(np.asarray(got), E.stencil_rows_ref(x, 1, 2), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.requires("element")
def test_unaligned_element_offsets(call_kernel, rng):
    x = _f32(rng, 512 + 5)
    got = call_kernel(E.shifted_window, 512, 128, 5)(x)
    np.testing.assert_allclose(np.asarray(got), E.shifted_window_ref(x, 512, 5), rtol=1e-6,
                               atol=0)


@pytest.mark.requires("element", "squeezed")
def test_overlapping_unaligned_element_windows(call_kernel, rng):
    x = _f32(rng, 3 + 5 * 44 + 128)
    got = call_kernel(E.overlapping_windows, 6, 128, 44, 3)(x)
    np.testing.assert_allclose(np.asarray(got), E.overlapping_windows_ref(x, 6, 128, 44, 3),
                               rtol=1e-6, atol=0)
