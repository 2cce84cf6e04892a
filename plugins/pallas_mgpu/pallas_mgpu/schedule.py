"""How a portable kernel's grid and operands map onto a Mosaic GPU kernel:
which grid axes become CTAs, which a pipelined loop, which operands are
pipelined through SMEM, and the SMEM layouts (tiling + swizzle) that TMA
and WGMMA need for the operands of a matmul."""

from __future__ import annotations

import dataclasses

import numpy as np

import pallas_frontend as pf
from pallas_frontend import backend_api
from pallas_frontend.backend_api import BlockMapping, KernelIR

from pallas_mgpu import dot_paths
from pallas_mgpu.memory import SwizzleTransform, TilingTransform, is_gmem
from pallas_mgpu.params import CompilerParams

MAX_CTA_AXES = 3      # a CUDA grid has three dims


@dataclasses.dataclass(frozen=True)
class GridPlan:
    cta_axes: tuple[int, ...]      # grid axes run as CTAs (in grid order)
    seq_axes: tuple[int, ...]      # grid axes run in order by each CTA's pipeline
    cta_grid: tuple[int, ...]
    seq_grid: tuple[int, ...]

    @property
    def num_steps(self) -> int:
        return int(np.prod(self.seq_grid)) if self.seq_grid else 1


def parallel_axes(kernel: KernelIR) -> tuple[bool, ...]:
    params = kernel.compiler_params
    sem = params.dimension_semantics if isinstance(params, CompilerParams) else None
    found = backend_api.parallel_grid_axes(kernel)
    if sem is None:
        return _written_inputs_in_one_cta(kernel, found)
    # vmap's batch axes come first and are always parallel
    declared = (True,) * kernel.num_batch_axes + tuple(s == "parallel" for s in sem)
    # a "parallel" axis the kernel's writes contradict would race between CTAs
    return _written_inputs_in_one_cta(kernel, tuple(d and f for d, f in zip(declared, found)))


# --- inputs the kernel writes ----------------------------------------------
# A grid point sees an input block as earlier points left it (JAX's interpret
# mode writes it back). A CTA keeps such a block in SMEM while consecutive
# steps stay on it; so every point touching the block must run in one CTA, and
# no CTA may come back to a block it has left (its updates would be gone).

def written_inputs(kernel: KernelIR) -> tuple[int, ...]:
    """Positions (in ``kernel.in_mappings``) of the inputs whose Ref the kernel writes."""
    from pallas_mgpu import _jax_private
    first = len(kernel.grid) + kernel.num_scalar_prefetch
    written = _jax_private.written_ref_positions(kernel.jaxpr)
    return tuple(k for k in range(len(kernel.in_mappings)) if first + k in written)


def block_index_table(kernel: KernelIR, m: BlockMapping) -> np.ndarray:
    """``m``'s block indices at every grid point: shape ``grid + (ndim,)``."""
    import jax

    from pallas_mgpu import evaluate
    grid = tuple(kernel.grid)
    coords = [np.asarray(c, np.int32).reshape(-1) for c in np.indices(grid)]
    if not coords or not m.block_dims:
        return np.zeros(grid + (len(m.block_dims),), np.int64)
    rows = jax.vmap(lambda *ids: [jax.numpy.asarray(v, jax.numpy.int32)
                                  for v in evaluate.eval_closed(m.index_map, *ids)])(*coords)
    return np.stack([np.asarray(r, np.int64) for r in rows], -1).reshape(grid + (-1,))


def _one_group_per_block(table: np.ndarray, grid, axes) -> bool:
    """Whether points that differ along ``axes`` never share a block."""
    groups = np.zeros(grid, np.int64)
    for a, c in enumerate(np.indices(grid)):
        if a in axes:
            groups = groups * grid[a] + c
    flat = table.reshape(-1, table.shape[-1])
    pairs = np.unique(np.concatenate([flat, groups.reshape(-1, 1)], 1), axis=0)
    return len(np.unique(pairs[:, :-1], axis=0)) == len(pairs)


def _written_inputs_in_one_cta(kernel: KernelIR, par: tuple[bool, ...]) -> tuple[bool, ...]:
    # GMEM operands are the user's to synchronise (and a pipeline primitive
    # declares writes on every Ref it is handed)
    written = [k for k in written_inputs(kernel) if not is_gmem(kernel.in_mappings[k].memory_space)]
    if not written or not any(par):
        return par
    if grid_points(kernel) > MAX_MASK_POINTS:    # too many points to prove it: one CTA
        return (False,) * len(par)
    grid = tuple(kernel.grid)
    tables = [block_index_table(kernel, kernel.in_mappings[k]) for k in written]
    chosen: list[int] = []
    for a in (a for a, p in enumerate(par) if p):
        if all(_one_group_per_block(t, grid, chosen + [a]) for t in tables):
            chosen.append(a)
    return tuple(a in chosen for a in range(len(par)))


def revisited_written_input(kernel: KernelIR) -> tuple[int, tuple, int, int] | None:
    """A written, pipelined input whose block some CTA leaves and later comes
    back to, as ``(input position, block index, left at step, back at step)``."""
    written = [k for k in written_inputs(kernel) if not is_whole(kernel.in_mappings[k])]
    if not written or grid_points(kernel) > MAX_MASK_POINTS:
        return None
    plan = plan_grid(kernel)
    rest = tuple(a for a in range(len(kernel.grid)) if a not in plan.cta_axes + plan.seq_axes)
    order = plan.cta_axes + plan.seq_axes + rest
    for k in written:
        table = block_index_table(kernel, kernel.in_mappings[k])
        per_cta = np.transpose(table, order + (len(order),)).reshape(
            int(np.prod(plan.cta_grid)) if plan.cta_grid else 1, plan.num_steps, -1)
        for steps in per_cta:
            moved = np.concatenate([[True], np.any(steps[1:] != steps[:-1], axis=1)])
            starts = np.flatnonzero(moved)
            seen: dict[tuple, int] = {}
            for s in starts:
                key = tuple(int(v) for v in steps[s])
                if key in seen:
                    return k, key, seen[key], int(s)
                seen[key] = int(s)
    return None


def plan_grid(kernel: KernelIR) -> GridPlan:
    par = parallel_axes(kernel)
    cta = [a for a, p in enumerate(par) if p and kernel.grid[a] > 1][:MAX_CTA_AXES]
    # axes of size 1 are neither: their index is always 0
    seq = [a for a in range(len(kernel.grid)) if a not in cta and kernel.grid[a] > 1]
    return GridPlan(tuple(cta), tuple(seq), tuple(kernel.grid[a] for a in cta),
                    tuple(kernel.grid[a] for a in seq))


TMA_MIN_BYTES = 16     # a TMA box's minor dim must span at least 16 bytes


def is_whole(m: BlockMapping) -> bool:
    """Handed to the kernel as a GMEM Ref, not pipelined through SMEM: GMEM
    operands, and tiny operands that are one block (too narrow for TMA)."""
    if is_gmem(m.memory_space):
        return True
    shape = m.block_shape
    one_block = all(isinstance(d, pf.Blocked) and d.block_size == s
                    for d, s in zip(m.block_dims, m.array_shape))
    narrow = bool(shape) and shape[-1] * np.dtype(m.dtype).itemsize < TMA_MIN_BYTES
    return one_block and narrow and _is_constant(m.index_map)


MAX_TMA_BOX = 256     # a tiled TMA copy moves at most 256 elements along each dim


def is_contiguous_block(m: BlockMapping) -> bool:
    """Whether every block of ``m`` is one contiguous run of the array: the
    dims after the first one the block cuts are whole, the ones before it 1."""
    cut = False
    for d, n in zip(reversed(m.block_dims), reversed(m.array_shape)):
        size = 1 if isinstance(d, pf.Squeezed) else d.block_size
        if cut and size != 1:
            return False
        cut = cut or size != n
    return True


def needs_bulk_copy(m: BlockMapping) -> bool:
    """A block with a dim past the TMA box limit: it moves by one bulk copy
    (``cp.async.bulk``, no box limit, clipped at the array's end), which needs
    the block contiguous in the array and its SMEM buffer neither tiled nor
    swizzled (``check.py`` refuses the rest)."""
    return not is_whole(m) and any(s > MAX_TMA_BOX for s in m.block_shape)


def _used_invars(closed) -> set[int]:
    """Positions of the invars that the jaxpr's outputs depend on."""
    jaxpr = getattr(closed, "jaxpr", closed)
    live = {v for v in jaxpr.outvars if not hasattr(v, "val")}
    for eqn in reversed(jaxpr.eqns):
        if any(v in live for v in eqn.outvars):
            live |= {v for v in eqn.invars if not hasattr(v, "val")}
    return {k for k, v in enumerate(jaxpr.invars) if v in live}


def _is_constant(index_map) -> bool:
    return not _used_invars(index_map)


def is_resident_output(m: BlockMapping, plan: GridPlan) -> bool:
    """An output block that stays the same over the whole pipeline (e.g. a
    matmul accumulating over k): it lives in SMEM and is written once, after it."""
    return not (_used_invars(m.index_map) & set(plan.seq_axes))


def has_ragged_blocks(kernel: KernelIR) -> bool:
    return any(not is_whole(m) and any(
        isinstance(d, pf.Blocked) and s % d.block_size for d, s in zip(m.block_dims, m.array_shape))
        for m in kernel.mappings)


def _dot_operand_mappings(kernel: KernelIR) -> set[int]:
    """Operands read whole by a top-level ``dot_general`` (WGMMA reads them from SMEM)."""
    jaxpr = kernel.jaxpr
    n_ids = len(kernel.grid) + kernel.num_scalar_prefetch
    operand_of = {v: k for k, v in enumerate(jaxpr.invars[n_ids:n_ids + len(kernel.mappings)])}
    read_from = {}
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "get" and eqn.invars[0] in operand_of:
            read_from[eqn.outvars[0]] = operand_of[eqn.invars[0]]
    used = set()
    for eqn in jaxpr.eqns:
        # mma.sync operands are loaded from plain (unswizzled) SMEM
        if eqn.primitive.name == "dot_general" and dot_paths.plan_eqn(eqn).path == "wgmma":
            used |= {read_from[v] for v in eqn.invars if v in read_from}
    return used


def smem_transforms(block_shape, dtype) -> tuple:
    """Tiling (8, swizzle / itemsize) and the widest swizzle the minor dim allows."""
    if len(block_shape) < 2:
        return ()
    row_bytes = block_shape[-1] * np.dtype(dtype).itemsize
    for swizzle in (128, 64, 32):
        if row_bytes % swizzle == 0 and block_shape[-2] % 8 == 0:
            return (TilingTransform((8, swizzle // np.dtype(dtype).itemsize)),
                    SwizzleTransform(swizzle))
    return ()


def smem_layouts(kernel: KernelIR) -> dict[int, tuple]:
    """Mapping position -> SMEM transforms (as JAX objects) for the matmul operands."""
    out = {}
    for k in _dot_operand_mappings(kernel):
        m = kernel.mappings[k]
        ts = smem_transforms(m.block_shape, m.dtype)
        if ts:
            out[k] = tuple(t.to_jax() for t in ts)
    return out


MAX_MASK_POINTS = 1 << 16     # grid points evaluated for an aliased output's written region


def written_mask(kernel: KernelIR, m: BlockMapping):
    """Which elements of output ``m`` some grid point writes (a NumPy bool
    array), or None when that is all of them. For aliased outputs: what no
    grid point writes keeps the aliased input's values."""
    import itertools

    from pallas_mgpu import evaluate
    mask = np.zeros(m.array_shape, bool)
    for point in itertools.product(*(range(g) for g in kernel.grid)):
        starts = evaluate.eval_closed(m.index_map, *[np.int32(p) for p in point])
        window = []
        for d, s, n in zip(m.block_dims, starts, m.array_shape):
            s = int(s)
            if isinstance(d, pf.Squeezed):
                window.append(slice(s, s + 1))
            else:
                window.append(slice(s * d.block_size, min((s + 1) * d.block_size, n)))
        mask[tuple(window)] = True
    return None if mask.all() else mask


def grid_points(kernel: KernelIR) -> int:
    return int(np.prod(kernel.grid)) if kernel.grid else 1


SMEM_BYTES = 232448    # the most SMEM a CTA may use on an H100 (227 KiB)


def smem_use(kernel: KernelIR) -> list[tuple[int, str]]:
    """The SMEM the rebuilt kernel holds for its blocks and scratch, as
    ``(bytes, what)``: a streamed input once per pipeline slot, an output or a
    written input once, scratch as declared."""
    params = kernel.compiler_params
    steps = params.max_concurrent_steps if isinstance(params, CompilerParams) else 2
    plan = plan_grid(kernel)
    slots = max(1, min(steps, plan.num_steps))
    written = set(written_inputs(kernel))
    use = []
    for k, m in enumerate(kernel.mappings):
        if is_whole(m):
            continue
        size = int(np.prod(m.block_shape)) * np.dtype(m.dtype).itemsize
        n = slots if k < len(kernel.in_mappings) and k not in written else 1
        use.append((size * n, f"{m.origin} block {m.block_shape} x{n}"))
    for a in kernel.scratch_avals:
        shape, dtype = a.inner_aval.shape, a.inner_aval.dtype
        if not is_gmem(a.memory_space):
            use.append((int(np.prod(shape)) * np.dtype(dtype).itemsize, f"scratch {tuple(shape)}"))
    return use
