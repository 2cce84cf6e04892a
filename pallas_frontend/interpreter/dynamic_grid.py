"""Running a kernel whose grid size is known only at run time.

With a dynamic grid (``grid=(n,)``, ``n`` traced) the index maps cannot be
evaluated at trace time, so this path evaluates them at each grid point, in
row-major order, inside a loop whose trip count is the product of the sizes.
The semantics are those of ``execute.run_sequential``: blocks overhanging the
array read padding and write back only their in-bounds part; output blocks,
scratch and aliased outputs carry across points. A block index outside the
array is reported when the kernel runs (the check cannot happen earlier); the
run then fails instead of returning data.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from pallas_frontend import _jax_compat as jc
from pallas_frontend.discharge import discharge_kernel_body
from pallas_frontend import primitives
from pallas_frontend.affine_maps import affine_outputs
from pallas_frontend.export import symbolic_grid_of
from pallas_frontend.backend_api import BlockMapping, KernelIR
from pallas_frontend.block_indices import BlockIndexError
from pallas_frontend.interpreter.execute import padding_value, varying_like
from pallas_frontend.specs import Blocked, BoundedSlice, Element, Squeezed


def has_symbolic_dims(kernel: KernelIR) -> bool:
    """Whether an array or block of ``kernel`` has a ``jax.export`` symbolic dim."""
    return any(g is not None and not isinstance(g, int) for g in kernel.grid) or any(
        not isinstance(d, int) for m in kernel.mappings for d in (*m.array_shape, *m.block_shape))


def prove_in_range(kernel: KernelIR, grid) -> None:
    """Under ``jax.export`` the run-time range check (a host callback) cannot be
    serialised, so each block index is proven in range for every value of the
    symbolic dims instead: affine index maps over the grid box, whose extremes
    sit at its corners, compared by JAX's symbolic-dim decision procedure."""
    stand_in = [g if isinstance(g, int) else 2 for g in grid]   # the map's form only
    for m in kernel.mappings:
        affine = None
        if None not in grid and not kernel.num_scalar_prefetch:
            affine = affine_outputs(m.index_map, stand_in) if all(stand_in) else None
        if affine is None or len(affine) != len(m.block_dims) or \
                any(isinstance(d, BoundedSlice) for d in m.block_dims):
            why = "its index_map is not affine in the grid indices, or the grid has a traced size"
        else:
            why = next((f"dim {d}" for d, (a, dim, n) in
                        enumerate(zip(affine, m.block_dims, m.array_shape))
                        if not _fits(a, dim, n, grid)), None)
            if why is None:
                continue
            why = f"in {why} a block may start outside the array for some values of the dims"
        raise BlockIndexError(
            f"Kernel '{kernel.name}' ({kernel.source}) exported with symbolic shapes: the "
            f"blocks of {m.origin} cannot be proven to lie within the array (shape "
            f"{m.array_shape}, grid {tuple(grid)}): {why}. The interpreter checks block ranges "
            "when it exports; make the grid cover the array exactly (grid=(pl.cdiv(n, b),) "
            "with index_map lambda i: (i, ...)) or state what holds with "
            "jax.export.symbolic_shape(..., constraints=[...]).")


def _fits(a, dim, n, grid) -> bool:
    lo = hi = a.const
    for c, g in zip(a.coefs, grid):
        if c > 0:
            hi = hi + c * (g - 1)
        elif c < 0:
            lo = lo + c * (g - 1)
    scale = dim.block_size if isinstance(dim, Blocked) else 1
    if isinstance(dim, Element):
        n = n + dim.padding[0] + dim.padding[1]
    try:
        return bool(lo >= 0 and hi * scale <= n - 1)
    except jax.errors.InconclusiveDimensionOperation:
        return False


def _pads(m: BlockMapping):
    """(low, high) padding per dim: room for any in-range block to overhang."""
    low, high = [], []
    for dim in m.block_dims:
        lo = dim.padding[0] if isinstance(dim, Element) else 0
        hi = dim.padding[1] if isinstance(dim, Element) else 0
        low.append(lo)
        high.append(hi + dim.block_size)
    return low, high


def _pad(x, m: BlockMapping):
    low, high = _pads(m)
    return lax.pad(x, padding_value(x.dtype), [(lo, hi, 0) for lo, hi in zip(low, high)])


def _unpad(x, m: BlockMapping):
    low, _ = _pads(m)
    return x[tuple(slice(lo, lo + n) for lo, n in zip(low, m.array_shape))]


def _starts(m: BlockMapping, idx, prefetch=(), index_map=None):
    """Element starts (padded coordinates), valid sizes and an in-range flag.
    ``index_map``: ``m``'s with its prefetch Refs discharged (they are values here)."""
    outs = iter(jc.eval_jaxpr(index_map or m.index_map, *idx, *prefetch))
    starts, sizes, ok = [], [], jnp.bool_(True)
    for d, dim in enumerate(m.block_dims):
        v = jnp.asarray(next(outs), jnp.int32)
        extent = m.array_shape[d]
        size = jnp.int32(dim.block_size)
        if isinstance(dim, Blocked):
            # the block index itself: its element offset may wrap in int32
            # (2**25 + 1 blocks of 128 would start at element 128, block 1)
            if extent > 0:
                ok &= (v >= 0) & (v < -(-extent // dim.block_size))
            v = v * dim.block_size
            starts.append(v)
            sizes.append(size)
            continue
        elif isinstance(dim, Element):
            extent += dim.padding[0] + dim.padding[1]
        elif isinstance(dim, BoundedSlice):
            size = jnp.asarray(next(outs), jnp.int32)
            ok &= (size >= 0) & (size <= dim.block_size)
        if extent > 0:
            ok &= (v >= 0) & (v < extent)
        starts.append(v)
        sizes.append(size)
    return starts, sizes, ok


def _read(buf, m: BlockMapping, starts):
    block = lax.dynamic_slice(buf, starts, [d.block_size for d in m.block_dims])
    squeezed = tuple(i for i, d in enumerate(m.block_dims) if isinstance(d, Squeezed))
    return lax.squeeze(block, squeezed) if squeezed else block


def _write(buf, m: BlockMapping, starts, sizes, block):
    squeezed = tuple(i for i, d in enumerate(m.block_dims) if isinstance(d, Squeezed))
    if squeezed:
        block = lax.expand_dims(block, squeezed)
    bounded = [i for i, d in enumerate(m.block_dims) if isinstance(d, BoundedSlice)]
    if bounded:
        old = lax.dynamic_slice(buf, starts, block.shape)
        keep = jnp.ones(block.shape, bool)
        for ax in bounded:
            keep &= lax.broadcasted_iota(jnp.int32, block.shape, ax) < sizes[ax]
        block = jnp.where(keep, block, old)
    return lax.dynamic_update_slice(buf, block, starts)


def _raise_out_of_range(bad, point, kernel_name, origins):
    bad = np.asarray(bad)
    if bad.any():
        k = int(np.argmax(bad))
        # recorded, so that pallas_call re-raises it with its own type
        primitives._fail(BlockIndexError(
            f"Kernel '{kernel_name}' (dynamic grid): the index_map of {origins[k]} selected a "
            f"block outside the array at grid point {tuple(int(c) for c in np.asarray(point))}"
            ". Keep block indices within the array for every point of the grid."))


def run(kernel: KernelIR, dyn_sizes, *operands):
    """``dyn_sizes`` are the run-time sizes of ``kernel.dynamic_grid_axes``. Also
    runs scalar-prefetch kernels (static grid or not): their index maps read the
    prefetch values, so they too are evaluated at each grid point."""
    sym_grid = symbolic_grid_of(kernel)
    symbolic = sym_grid is not None or has_symbolic_dims(kernel)
    if symbolic:
        prove_in_range(kernel, sym_grid or kernel.grid)
    n_pf = kernel.num_scalar_prefetch
    flat_args = operands     # input_output_aliases count the prefetch operands too
    prefetch, operands = list(operands[:n_pf]), operands[n_pf:]
    n_in, n_out = len(kernel.in_mappings), len(kernel.out_mappings)
    n_grid = len(kernel.grid)
    dyn = iter(jnp.asarray(s, jnp.int32) for s in dyn_sizes)
    sizes = [jnp.asarray(g, jnp.int32) if g is not None else next(dyn) for g in kernel.grid]
    dyn_values = [sizes[a] for a in kernel.dynamic_grid_axes]
    total = jnp.int32(1)
    for s in sizes:
        total = total * jnp.maximum(s, 0)

    body = discharge_kernel_body(kernel.jaxpr, kernel.num_index_operands)
    inputs = operands
    padded_in = [_pad(x, m) for x, m in zip(inputs, kernel.in_mappings)]
    aliased = {o: i for i, o in kernel.input_output_aliases}
    outs = []
    for k, m in enumerate(kernel.out_mappings):
        base = flat_args[aliased[k]] if k in aliased else jnp.full(
            m.array_shape, padding_value(m.dtype), m.dtype)
        outs.append(varying_like(_pad(base, m), inputs))
    scratch = [varying_like(jnp.full(a.inner_aval.shape, padding_value(a.inner_aval.dtype),
                                     a.inner_aval.dtype), inputs)
               for a in kernel.scratch_avals]
    origins = [m.origin for m in kernel.mappings]

    def coords_of(p):
        idx, rest = [], p
        for a in reversed(range(n_grid)):
            idx.append(lax.rem(rest, jnp.maximum(sizes[a], 1)))
            rest = lax.div(rest, jnp.maximum(sizes[a], 1))
        return idx[::-1]

    # the kernel's Refs: prefetch, inputs, outputs, scratch (prefetch Refs may be written)
    index_maps = [discharge_kernel_body(m.index_map, n_grid) if n_pf else None
                  for m in kernel.mappings]
    ins_at = kernel.num_index_operands + n_pf
    written = tuple(k for k in range(n_in) if body.jaxpr.outvars[n_pf + k]
                    is not body.jaxpr.invars[ins_at + k])

    def step(p, carry):
        (outs, ins, prefetch), scratch, bad = carry
        idx = coords_of(p)
        places = [_starts(m, idx, prefetch, im) for m, im in zip(kernel.mappings, index_maps)]
        oks = jnp.stack([ok for _, _, ok in places]) if places else jnp.ones((0,), bool)
        ok_so_far, point = bad
        fresh = jnp.all(ok_so_far) & ~jnp.all(oks)     # the first failing point
        bad = (jnp.where(fresh, oks, ok_so_far),
               jnp.where(fresh, jnp.stack(idx), point) if idx else point)
        in_blocks = [_read(x, m, st) for x, m, (st, _, _) in
                     zip(ins, kernel.in_mappings, places)]
        out_blocks = [_read(x, m, st) for x, m, (st, _, _) in
                      zip(outs, kernel.out_mappings, places[n_in:])]
        new = jc.eval_jaxpr(body, *idx, *dyn_values, *prefetch, *in_blocks, *out_blocks,
                            *scratch)
        prefetch, new = list(new[:n_pf]), new[n_pf:]
        outs = [_write(buf, m, st, sz, blk) for buf, m, (st, sz, _), blk in
                zip(outs, kernel.out_mappings, places[n_in:], new[n_in:n_in + n_out])]
        # a written input block is written back: later points read the update
        ins = [_write(buf, m, st, sz, new[k]) if k in written else buf
               for k, (buf, m, (st, sz, _)) in enumerate(zip(ins, kernel.in_mappings, places))]
        return (outs, ins, prefetch), list(new[n_in + n_out:]), bad

    no_bad = (jnp.ones((len(origins),), bool), jnp.zeros((n_grid,), jnp.int32))
    (outs, _, _), _, (ok, point) = lax.fori_loop(
        0, total, step, ((outs, padded_in, prefetch), scratch, no_bad))
    if not symbolic:    # under jax.export the ranges were proven before the loop
        jax.debug.callback(functools.partial(_raise_out_of_range, kernel_name=kernel.name,
                                             origins=origins), ~ok, point)
    return [_unpad(o, m) for o, m in zip(outs, kernel.out_mappings)]
