"""``im2col_ref``: a channels-last GMEM Ref seen as the windows of a
convolution, one row per window position, for TMA copies into SMEM
(``copy_gmem_to_smem(view.at[rows, *window_offsets, channels], smem, barrier)``).

The view is JAX's own, so the rebuilt kernel's copy is lowered by JAX's rule
(Lane semantics only, as in JAX); JAX's GPU interpreter has no im2col copy,
and refuses it for ours as for JAX's kernels.
"""

from __future__ import annotations


def im2col_ref(ref, *, window_shape, padding=None):
    """``ref`` of shape ``(N, *spatial, C)`` viewed as
    ``(N * prod(spatial_out), *window_shape, C)``, ``padding`` the ``(lo, hi)``
    zeros around each spatial dim (default none)."""
    from pallas_mgpu import _jax_private
    jax_im2col = _jax_private.plgpu_function("im2col_ref")
    return jax_im2col(ref, window_shape=window_shape, padding=padding)
