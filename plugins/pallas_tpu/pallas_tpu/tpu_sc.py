"""SparseCore kernels (JAX's ``jax.experimental.pallas.tpu_sc``): not provided.

Importing this module works, so code that imports it for a TensorCore path
keeps working; every SparseCore name raises with the reason. Why: JAX 0.12
lowers SparseCore kernels through ``pl.kernel`` over ``VectorSubcoreMesh`` /
``ScalarSubcoreMesh`` with their own primitives (gathers/scatters into
subcore VMEM, ``parallel_loop``, subcore barriers, sorts and scans), each
bound to JAX's SparseCore lowering; this backend would have to trace each as
its own primitive and replay it, and the host-side compile checks need a
topology with SparseCores (v5p/v6e/v7x, not this plugin's v5e). See
plugins/pallas_tpu/README.md.
"""

from __future__ import annotations

import enum

# JAX 0.12's public SparseCore names (jax.experimental.pallas.tpu_sc)
SPARSECORE_NAMES = frozenset({
    "get_sparse_core_info", "Indices", "ScalarSubcoreMesh", "SparseCorePushStreamWarning",
    "VectorSubcoreMesh", "addupdate", "addupdate_compressed", "addupdate_scatter",
    "all_reduce_ffs", "all_reduce_population_count", "bitcast", "cummax", "cumsum",
    "fetch_and_add", "load_expanded", "load_gather", "pack", "parallel_loop",
    "scan_count", "slice_subcore_vmem_from_shared", "sort_key_val", "store_compressed",
    "store_scatter", "subcore_barrier", "unpack",
})

__all__: list[str] = ["PackFormat"]


class PackFormat(enum.Enum):
    """How SparseCore's ``pack`` lays out two vectors (JAX's members and values).
    Plain data, so code naming a format imports (JAX's SparseCore tests list
    every format in their test parameters); ``pack`` itself is not provided."""
    COMPRESSED = "compressed"     # [a0, a1], [b0, b1] -> [[a0, a1], [b0, b1]]
    INTERLEAVED = "interleaved"   # [a0, a1], [b0, b1] -> [a0, b0, a1, b1]


def __getattr__(name: str):
    if name in SPARSECORE_NAMES:
        raise AttributeError(
            f"pallas_tpu.tpu_sc.{name}: SparseCore kernels are not provided by pallas-tpu "
            "(JAX's SparseCore primitives and meshes have no counterpart in this backend yet); "
            "use jax.experimental.pallas.tpu_sc directly for SparseCore kernels.")
    raise AttributeError(f"module 'pallas_tpu.tpu_sc' has no attribute {name!r}")
