"""``plgpu.dynamic_scheduling_loop``: JAX's loop over the grid points a CTA
claims at run time through Blackwell's cluster launch control
(``try_cluster_cancel`` / ``query_cluster_cancel``, ``TryClusterCancelResult``
scratch). This plugin has none of the three yet, so the name exists (code
that defines such kernels imports and builds) and using it raises, before
anything is traced, naming what is missing.
"""

from __future__ import annotations


def dynamic_scheduling_loop(grid_names, thread_axis=None, cluster_axes=(), init_carry=None):
    """Would run the decorated body for each grid point this CTA claims; raises."""
    del thread_axis, cluster_axes, init_carry

    def decorator(body):
        raise NotImplementedError(
            f"pallas_mgpu.dynamic_scheduling_loop (grid {tuple(grid_names)}, body "
            f"{getattr(body, '__name__', body)!r}): needs Blackwell cluster launch control "
            "(plgpu.try_cluster_cancel, plgpu.query_cluster_cancel and the "
            "TryClusterCancelResult scratch type), which pallas_mgpu does not provide yet. "
            "Use plgpu.nd_loop (static round-robin scheduling) instead.")
    return decorator
