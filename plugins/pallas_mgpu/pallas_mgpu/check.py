"""What Mosaic GPU cannot take, refused before any lowering, with the line."""

from __future__ import annotations

import numpy as np

import pallas_frontend as pf
from pallas_frontend.backend_api import (BackendCapabilityError, KernelIR, primitive_owner,
                                          source_line)

from pallas_mgpu import layouts, multi_gpu, schedule

DTYPES = frozenset({"float32", "float16", "bfloat16", "int8", "uint8", "int16", "uint16",
                    "int32", "uint32", "bool", "float8_e4m3fn", "float8_e5m2",
                    # Blackwell MMA operands: sparse metadata, block scales
                    "uint2", "float8_e8m0fnu",
                    # quantized weights, widened in registers (tokamax's ragged dots)
                    "int4"})
_NOT_A_SEMAPHORE = ("a Mosaic GPU semaphore is a pallas_mgpu.SemaphoreType scratch (GMEM), not "
                    "a buffer of another memory space; allocate it with "
                    "scratch_types=[plgpu.SemaphoreType.REGULAR]")
# Frontend primitives Mosaic GPU has no counterpart for (or JAX 0.12 cannot replay).
_REFUSED_FRONTEND = {
    "semaphore_read": _NOT_A_SEMAPHORE, "semaphore_signal": _NOT_A_SEMAPHORE,
    "semaphore_wait": _NOT_A_SEMAPHORE,
    "debug_check": "JAX 0.12's Mosaic GPU has no runtime checks",
}
TMA_MIN_BYTES = schedule.TMA_MIN_BYTES


def _where(eqn, kernel: KernelIR) -> str:
    return source_line(eqn) or kernel.source


def _fail(kernel: KernelIR, where: str, what: str, fix: str):
    raise BackendCapabilityError(
        f"Backend 'mgpu' cannot lower kernel '{kernel.name}': {what} (at {where}). {fix}")


def check_kernel(kernel: KernelIR) -> None:
    from pallas_mgpu import mesh_kernel
    is_mesh = isinstance(kernel.compiler_params, mesh_kernel.MeshKernelParams)
    if kernel.num_scalar_prefetch:
        _fail(kernel, kernel.source, "scalar prefetch operands",
              "Mosaic GPU has no scalar-prefetch grid; pass the scalars as a GMEM operand.")
    n_in, writes = len(kernel.in_mappings), set(schedule.written_inputs(kernel))
    for k, m in enumerate(kernel.mappings):
        _check_mapping(kernel, m, written=k >= n_in or k in writes)
    for a in kernel.scratch_avals:
        _check_dtype(kernel, np.dtype(a.inner_aval.dtype), "a scratch buffer", kernel.source)
    if kernel.input_output_aliases and schedule.grid_points(kernel) > schedule.MAX_MASK_POINTS:
        _fail(kernel, kernel.source, f"input_output_aliases over a grid of "
              f"{schedule.grid_points(kernel)} points",
              f"The backend finds the unwritten part of an aliased output by visiting the grid "
              f"(at most {schedule.MAX_MASK_POINTS} points); use a coarser grid.")
    if is_mesh and kernel.num_batch_axes:
        _fail(kernel, kernel.source, "vmap of a pallas_mgpu.kernel",
              "Add the batch axis to the kernel's grid instead.")
    if not is_mesh:
        _check_written_inputs(kernel)
        _check_aliased_outputs(kernel)
    for eqn in kernel.iter_equations():
        name = eqn.primitive.name
        if primitive_owner(eqn.primitive) is not None and name in _REFUSED_FRONTEND \
                and not multi_gpu.is_semaphore_op(eqn):
            _fail(kernel, _where(eqn, kernel), f"primitive '{name}'", _REFUSED_FRONTEND[name] + ".")


def _check_aliased_outputs(kernel: KernelIR):
    """plgpu.kernel has no aliasing: an aliased output is a fresh buffer whose
    blocks no grid point visits are filled from the input afterwards. A visited
    block therefore starts empty, so the body must write it whole before
    anything reads it, and not under a condition (else it would not keep, or
    not start as, the input's values)."""
    jaxpr = getattr(kernel.jaxpr, "jaxpr", kernel.jaxpr)
    first = kernel.num_index_operands + kernel.num_scalar_prefetch + len(kernel.in_mappings)
    for i, o in kernel.input_output_aliases:
        ref = jaxpr.invars[first + o]
        for eqn in jaxpr.eqns:
            if not any(v is ref for v in eqn.invars):
                continue
            whole_write = (eqn.primitive.name == "swap" and eqn.invars[0] is ref
                           and tuple(eqn.invars[1].aval.shape) == tuple(ref.aval.shape))
            if whole_write:
                break
            _fail(kernel, _where(eqn, kernel),
                  f"output {o}, aliased to input {i}, is read, or written in part or under a "
                  f"condition ('{eqn.primitive.name}') before the body writes its whole block",
                  "A Mosaic GPU kernel starts each aliased output block empty, not as the "
                  "input's values: write the whole block first (o_ref[...] = ...), e.g. "
                  "o_ref[...] = x_ref[...] before updating it, or run it with interpret=True.")
        else:
            _fail(kernel, kernel.source, f"output {o}, aliased to input {i}, is never written",
                  "A Mosaic GPU kernel starts each aliased output block empty: write the "
                  "whole block (o_ref[...] = x_ref[...]).")


def _check_written_inputs(kernel: KernelIR):
    """A written input block lives in one SMEM buffer of one CTA while
    consecutive steps stay on it; leaving it drops the updates (the caller's
    array is never written), so coming back to it later would read stale data."""
    found = schedule.revisited_written_input(kernel)
    if found is None:
        return
    k, block, first, again = found
    m = kernel.in_mappings[k]
    _fail(kernel, m.index_map_source,
          f"the kernel writes {m.origin}, and a CTA's pipeline comes back to its block "
          f"{block} at step {again} after leaving it (first at step {first})",
          "Grid points see a written input block as earlier points left it, but the pipeline "
          "keeps a written block in SMEM only while consecutive steps stay on it. Order the "
          "grid so that the steps on one block are consecutive, or keep the state in an "
          "output (with input_output_aliases) or a scratch buffer.")


def _check_dtype(kernel, dtype: np.dtype, what: str, where: str):
    if dtype.name not in DTYPES:
        _fail(kernel, where, f"dtype {dtype.name} of {what}",
              f"Mosaic GPU supports {', '.join(sorted(DTYPES))} (no 64-bit types).")


def refuse_bounded_slices(kernel: KernelIR) -> None:
    """Before the base check (whose missing-capability message is generic):
    ``pl.BoundedSlice`` dims, with what to use instead."""
    for m in kernel.mappings:
        if not schedule.is_whole(m) and any(isinstance(d, pf.BoundedSlice)
                                            for d in m.block_dims):
            _fail(kernel, m.index_map_source, f"BoundedSlice block dims of {m.origin}",
                  "The backend lacks capability 'bounded_slice': a TMA copy moves a block of "
                  "one fixed size. Use pl.Element(n) (n elements "
                  "at the offset the index map returns; for inputs the kernel only reads), "
                  "Blocked dims, or BlockSpec(memory_space=pallas_mgpu.GMEM) and copy by hand.")


def _check_mapping(kernel: KernelIR, m, *, written: bool):
    _check_dtype(kernel, np.dtype(m.dtype), m.origin, m.index_map_source)
    if schedule.is_whole(m):
        return
    for d in m.block_dims:
        if isinstance(d, pf.Element) and tuple(d.padding) != (0, 0):
            _fail(kernel, m.index_map_source, f"pl.Element padding {tuple(d.padding)} of "
                  f"{m.origin}", "Mosaic GPU's pipeline reads Element windows inside the "
                  "array only: pad the operand (jnp.pad) and use pl.Element(n).")
        if isinstance(d, pf.Element) and written:
            _fail(kernel, m.index_map_source, f"pl.Element block dims of {m.origin}, which the "
                  "kernel writes",
                  "Element windows may overlap, and the grid's points run in parallel CTAs "
                  "that each write their whole block back: use Blocked dims for outputs and "
                  "for inputs the kernel writes (Element suits inputs it only reads).")
    shape = m.block_shape
    if shape and not schedule.is_whole(m):
        minor = shape[-1] * np.dtype(m.dtype).itemsize
        if minor % TMA_MIN_BYTES:
            _fail(kernel, m.index_map_source,
                  f"block {shape} of {m.origin}: its minor dim spans {minor} bytes",
                  f"A TMA box's minor dim must be a multiple of {TMA_MIN_BYTES} bytes; widen "
                  "the block's last dim.")


def _check_dot(kernel: KernelIR, eqn):
    from pallas_mgpu import dot_paths
    plan = dot_paths.plan_eqn(eqn)
    if plan.path is None:
        shapes = [tuple(v.aval.shape) for v in eqn.invars]
        _fail(kernel, _where(eqn, kernel),
              f"a {plan.dtype} matmul of {shapes} (m={plan.m}, n={plan.n}, k={plan.k})",
              f"No Hopper matmul instruction maps it: {plan.reason}. Reshape the blocks, or run "
              "with interpret=pallas_mgpu.InterpretParams().")


# What only the Mosaic GPU compiler refuses (interpret mode runs it): checked
# in lower() when compiling, still before any lowering work.
_NO_COMPILED_LOWERING = {
    "transpose": "JAX 0.12's Mosaic GPU has no in-register transpose; transpose through the "
                 "index maps or a Ref view (ref.T) read by WGMMA",
}


def check_compiled(kernel: KernelIR) -> None:
    from pallas_mgpu.memory import is_gmem
    for k in schedule.written_inputs(kernel):
        m = kernel.in_mappings[k]
        if schedule.is_whole(m) and not is_gmem(m.memory_space):
            _fail(kernel, m.index_map_source,
                  f"the kernel writes {m.origin}, whose block {m.block_shape} is too narrow for "
                  f"TMA ({TMA_MIN_BYTES} bytes) and is passed whole in GMEM",
                  "On the GPU the write would change the caller's array. Widen the block, or "
                  "keep the state in an output or a scratch buffer.")
    from pallas_mgpu import mesh_kernel
    if not isinstance(kernel.compiler_params, mesh_kernel.MeshKernelParams):
        # the rebuilt grid's blocks (a pallas_mgpu.kernel allocates its own SMEM)
        _check_tma_boxes(kernel)
        _check_smem(kernel)
        _check_tiled_arrays(kernel)
    for eqn in kernel.iter_equations():
        name = eqn.primitive.name
        if name in _NO_COMPILED_LOWERING:
            _fail(kernel, _where(eqn, kernel), f"primitive '{name}' when compiled",
                  _NO_COMPILED_LOWERING[name] + ". interpret=pallas_mgpu.InterpretParams() runs it.")
        if name == "dot_general":
            # JAX's GPU interpreter multiplies any shapes; only WGMMA has tiles
            _check_dot(kernel, eqn)
        if name.startswith("reduce_") and eqn.invars and len(eqn.invars[0].aval.shape) == 2:
            shape = eqn.invars[0].aval.shape
            if layouts.tile_layout(shape) is None:
                _fail(kernel, _where(eqn, kernel), f"a reduction over a {shape} tile",
                      f"Mosaic GPU lays 2-D register tiles out in {layouts.SUB_ROWS}x"
                      f"{layouts.MIN_COLS} sub-tiles (a warp's 32 lanes): make the block's rows "
                      f"a multiple of {layouts.SUB_ROWS} and its columns a multiple of "
                      f"{layouts.MIN_COLS}, or run with interpret=pallas_mgpu.InterpretParams().")


def _check_tma_boxes(kernel: KernelIR) -> None:
    """A block past the TMA box limit (256 elements a dim) moves by one bulk
    copy: it must be one contiguous run of the array and unswizzled in SMEM."""
    swizzled = schedule.smem_layouts(kernel)
    for k, m in enumerate(kernel.mappings):
        if not schedule.needs_bulk_copy(m):
            continue
        if any(isinstance(d, pf.Element) for d in m.block_dims):
            _fail(kernel, m.index_map_source,
                  f"pl.Element block {m.block_shape} of {m.origin} is wider than a TMA box "
                  f"({schedule.MAX_TMA_BOX} elements a dim)",
                  "A larger block moves by one bulk copy, which needs 16-byte-aligned starts, "
                  "and an Element offset may be any element: keep Element blocks at most "
                  f"{schedule.MAX_TMA_BOX} elements a dim (interpret mode runs any size).")
        if not schedule.is_contiguous_block(m):
            _fail(kernel, m.index_map_source,
                  f"block {m.block_shape} of {m.origin} (array {m.array_shape}) is wider than "
                  f"a TMA box ({schedule.MAX_TMA_BOX} elements a dim) and not contiguous in the "
                  "array",
                  "A larger block moves by one bulk copy only when it is one contiguous run of the "
                  "array (whole trailing dims). Keep each block dim at most "
                  f"{schedule.MAX_TMA_BOX}, or make the trailing dims whole.")
        if k in swizzled:
            _fail(kernel, m.index_map_source,
                  f"block {m.block_shape} of {m.origin} is a matmul operand wider than a TMA box "
                  f"({schedule.MAX_TMA_BOX} elements a dim)",
                  "WGMMA reads its operands from swizzled SMEM tiles, which only box-sized TMA "
                  "copies fill: keep the block dims of matmul operands at most "
                  f"{schedule.MAX_TMA_BOX}.")


def _check_smem(kernel: KernelIR) -> None:
    use = schedule.smem_use(kernel)
    total = sum(b for b, _ in use)
    if total > schedule.SMEM_BYTES:
        parts = ", ".join(f"{what}: {b // 1024} KiB" for b, what in sorted(use, reverse=True))
        _fail(kernel, kernel.source,
              f"its SMEM blocks need {total // 1024} KiB ({parts})",
              f"A CTA has at most {schedule.SMEM_BYTES // 1024} KiB of SMEM on an H100. Use "
              "smaller blocks, or CompilerParams(max_concurrent_steps=1) to keep one slot per "
              "streamed input.")


def _check_tiled_arrays(kernel: KernelIR) -> None:
    """A 2-D block read into registers as a tile is kept in SMEM in swizzled
    8-row tiles (Mosaic GPU's choice for the tile's register layout), and the
    TMA that fills them needs the array's own dims to be whole tiles."""
    for m in kernel.mappings:
        shape = m.block_shape
        if schedule.is_whole(m) or len(shape) != 2 or len(m.array_shape) < 2:
            continue
        if layouts.tile_layout(shape) is None:
            continue
        item = np.dtype(m.dtype).itemsize
        swizzle = next((s for s in (128, 64, 32) if (shape[-1] * item) % s == 0), None)
        if swizzle is None:
            continue
        rows, cols = m.array_shape[-2], m.array_shape[-1]
        tile = (8, swizzle // item)
        if rows % tile[0] or cols % tile[1]:
            _fail(kernel, m.index_map_source,
                  f"{m.origin} has shape {m.array_shape}, whose last two dims are not whole "
                  f"{tile} tiles for its block {shape}",
                  f"Mosaic GPU keeps a 2-D block read into registers in SMEM as {swizzle}-byte "
                  f"swizzled tiles of {tile}, and its TMA needs the array's dims to be multiples "
                  "of the tile. Pad the array (and slice the result), or run with "
                  "interpret=pallas_mgpu.InterpretParams().")
