"""Cluster launch control (Blackwell), JAX's ``plgpu`` names: a CTA asks to
cancel the launch of a cluster not yet started and take over its work
(``try_cluster_cancel``), then decodes the 16-byte answer
(``query_cluster_cancel``) kept in a ``TryClusterCancelResult`` SMEM buffer.

Recorded by ``ops.bind`` and replayed as JAX's functions, so the semantics are
JAX's: in Mosaic GPU interpret mode the request arrives on the barrier and
never succeeds (every block still runs from the grid); compiled, Mosaic's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from pallas_mgpu import ops
from pallas_mgpu.memory import SMEM
from pallas_mgpu.ops import bind


def TryClusterCancelResult(num_buffers: int | None = None):  # noqa: N802 (JAX's name)
    """The SMEM scratch type of one 16-byte answer, or of ``num_buffers`` of them."""
    if num_buffers is None:
        return SMEM((16,), jnp.int8)
    return SMEM((int(num_buffers), 16), jnp.int8)


def _axes(axes) -> tuple:
    return axes if isinstance(axes, tuple) else (axes,)


def try_cluster_cancel(result_ref, barrier, *, collective_axes=()) -> None:
    """Requests the work of a not-yet-launched cluster; the answer lands in
    ``result_ref`` and ``barrier`` is arrived on (wait on it before querying).
    Along ``collective_axes`` only index 0 issues the request."""
    bind("try_cluster_cancel", result_ref, barrier, collective_axes=_axes(collective_axes))


def query_cluster_cancel(result_ref, grid_names):
    """``(grid indices for grid_names, success)`` decoded from ``result_ref``;
    the indices mean nothing where success is False."""
    grid_names = tuple(grid_names)
    avals = [jax.core.ShapedArray((), jnp.dtype(jnp.int32))] * len(grid_names)
    outs = bind("query_cluster_cancel", result_ref, grid_names=grid_names,
                out_avals=(*avals, jax.core.ShapedArray((), jnp.dtype(bool))))
    return tuple(outs[:-1]), outs[-1]


def _replay_query(result_ref, *, grid_names):
    from jax.experimental.pallas import mosaic_gpu as plgpu
    indices, success = plgpu.query_cluster_cancel(result_ref, grid_names=grid_names)
    return [*indices, success]


ops.ADAPTERS["query_cluster_cancel"] = _replay_query
