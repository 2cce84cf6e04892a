"""SparseCore kernels: JAX's ``jax.experimental.pallas.tpu_sc`` names.

``import pallas_tpu.tpu_sc as plsc``. A SparseCore kernel is a ``pl.kernel``
over ``VectorSubcoreMesh`` (or ``ScalarSubcoreMesh``); the ops below are this
plugin's primitives (``sc_primitives``, ``sc_vector_ops``), each documented
with its semantics. On CPU they run in this plugin's SparseCore model
(``sc_interpret``: ``interpret=pltpu.InterpretParams()``), which stands for the
chip ``sc_mesh.model_chip()`` names. Modules by concept: ``sc_mesh`` (meshes,
chip facts, ``Indices``), ``sc_primitives`` (memory ops, atomics, barrier),
``sc_vector_ops`` (scans, sort, mask reductions, pack/unpack, parallel_loop).
"""

from __future__ import annotations

from pallas_tpu.sc_mesh import (
    Indices, ScalarSubcoreMesh, SparseCorePushStreamWarning, VectorSubcoreMesh,
    get_sparse_core_info)
from pallas_tpu.sc_primitives import (
    addupdate, addupdate_compressed, addupdate_scatter, fetch_and_add, load_expanded,
    load_gather, slice_subcore_vmem_from_shared, store_compressed, store_scatter,
    subcore_barrier)
from pallas_tpu.sc_vector_ops import (
    PackFormat, all_reduce_ffs, all_reduce_population_count, bitcast, cummax, cumsum, pack,
    parallel_loop, scan_count, sort_key_val, unpack)

# JAX 0.12's public SparseCore names (jax.experimental.pallas.tpu_sc)
SPARSECORE_NAMES = frozenset({
    "get_sparse_core_info", "Indices", "ScalarSubcoreMesh", "SparseCorePushStreamWarning",
    "VectorSubcoreMesh", "addupdate", "addupdate_compressed", "addupdate_scatter",
    "all_reduce_ffs", "all_reduce_population_count", "bitcast", "cummax", "cumsum",
    "fetch_and_add", "load_expanded", "load_gather", "pack", "parallel_loop",
    "scan_count", "slice_subcore_vmem_from_shared", "sort_key_val", "store_compressed",
    "store_scatter", "subcore_barrier", "unpack",
})

__all__ = sorted(SPARSECORE_NAMES | {"PackFormat"})
