"""Work across the CTAs of a cluster, JAX's ``plgpu`` names: cluster launch
control (Blackwell), where a CTA asks to cancel the launch of a cluster not yet
started and take over its work (``try_cluster_cancel``), then decodes the
16-byte answer (``query_cluster_cancel``) kept in a ``TryClusterCancelResult``
SMEM buffer; and ``async_store_smem``, a store into a peer CTA's SMEM.

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


# --- stores into a peer CTA's SMEM ------------------------------------------------------------

_ATOMICS = (None, "add", "max", "min", "and", "or", "xor")


def async_store_smem(src, ref, barrier, *, cluster_idx, cluster_dim, optimized: bool = True,
                     atomic=None) -> None:
    """Stores the register array ``src`` into ``ref`` (tiled, swizzled SMEM) of
    the block ``cluster_idx`` along the cluster axis ``cluster_dim``, arriving
    on that block's ``barrier`` when done; ``atomic`` combines instead of
    overwriting ("add", "max", "min", "and", "or", "xor")."""
    if atomic not in _ATOMICS:
        raise ValueError(f"pallas_mgpu.async_store_smem: atomic must be one of {_ATOMICS}, "
                         f"got {atomic!r}.")
    bind("async_store_smem", src, ref, barrier, jnp.asarray(cluster_idx, jnp.int32),
         cluster_dim=cluster_dim, optimized=bool(optimized), atomic=atomic)


def _replay_store(src, ref, barrier, cluster_idx, *, cluster_dim, optimized, atomic):
    from jax.experimental.pallas import mosaic_gpu as plgpu
    plgpu.async_store_smem(src, ref, barrier, cluster_idx=cluster_idx, cluster_dim=cluster_dim,
                           optimized=optimized, atomic=atomic)


ops.ADAPTERS["async_store_smem"] = _replay_store
