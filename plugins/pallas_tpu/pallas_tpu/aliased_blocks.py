"""Aliased outputs start as their inputs, block by block.

Mosaic (and JAX's TPU interpret mode, which mimics it) never reads an output
block from memory: a visited block starts as whatever its VMEM buffer held
(the previous block's data, or NaN), and all of it is written back. So a
block the kernel visits without writing, or writes only in part, loses the
aliased input's values. The frontend promises they are kept (docs/user-guide.md,
"Aliasing"): when an aliased output is windowed exactly as its input, the
rebuilt kernel copies the input block into the output block on the first
grid point of each run of points on that block (a revisit run keeps what the
previous point wrote). Outputs windowed differently from their inputs are
left as Mosaic has them (documented in the plugin README).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax.numpy as jnp

from pallas_frontend.backend_api import KernelIR


def _same_window(a, b) -> bool:
    return (a.block_dims == b.block_dims and a.memory_space == b.memory_space
            and str(a.index_map) == str(b.index_map)
            and [id(c) for c in a.index_map.consts] == [id(c) for c in b.index_map.consts])


def copied_pairs(kernel: KernelIR, is_unwindowed: Callable) -> list[tuple[int, int]]:
    """``(input mapping index, output mapping index)`` of the aliases whose
    output block must be seeded from the input block."""
    pairs = []
    for i, o in kernel.input_output_aliases:
        k = i - kernel.num_scalar_prefetch
        if k < 0:
            continue
        m_in, m_out = kernel.in_mappings[k], kernel.out_mappings[o]
        if is_unwindowed(m_out) or not _same_window(m_in, m_out):
            continue
        pairs.append((k, o))
    return pairs


def _previous_point(ids: Sequence, sizes: Sequence) -> list:
    """The grid point before ``ids`` in row-major order (the last axis fastest)."""
    prev, borrow = [None] * len(ids), jnp.bool_(True)
    for a in reversed(range(len(ids))):
        at_zero = ids[a] == 0
        wrapped = jnp.where(at_zero, sizes[a] - 1, ids[a] - 1)
        prev[a] = jnp.where(borrow, wrapped, ids[a])
        borrow = borrow & at_zero
    return prev


def seed_from_inputs(kernel: KernelIR, pairs, index_map_fn: Callable, ids: Sequence,
                     sizes: Sequence, prefetch: Sequence, ins: Sequence, outs: Sequence) -> None:
    """Copies each pair's input block into its output block when this grid
    point is the first of a run on that output block."""
    from jax.experimental import pallas as pl
    if not pairs:
        return
    first_point = jnp.bool_(True)
    for i in ids:
        first_point = first_point & (i == 0)
    prev = _previous_point(ids, sizes)
    for k, o in pairs:
        index_map = index_map_fn(kernel.out_mappings[o])
        now, before = index_map(*ids, *prefetch), index_map(*prev, *prefetch)
        moved = first_point
        for a, b in zip(now, before):
            moved = moved | (jnp.asarray(a) != jnp.asarray(b))

        @pl.when(moved)
        def _copy(src=ins[k], dst=outs[o]):
            dst[...] = src[...]
