"""KernelIR -> the Python source of one ``@triton.jit`` function.

The kernel runs on a 1-D Triton grid: one program per point of the grid axes
that ``schedule.plan`` launches, each recovering its coordinates along them
(row-major); the other axes become nested ``for`` loops inside the program.
A block Ref in memory is a pointer to its whole array plus per-dim element
offsets computed from the index_map at the current coordinates; reads and
writes become masked ``tl.load``/``tl.store`` where a block may overhang its
array. A Ref in registers (scratch, and outputs that stay put while the
program loops) is a tensor variable carried across the loops. Array shapes
are static, so strides and bounds are literals in the source.

The parts: ``refs`` (how a Ref is addressed), ``writer`` (the text as it is
emitted, values and memory access), the emitter table (``emitters`` and the
modules that register into it), ``fingerprint`` (the cache key).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

import pallas_frontend as pl
from pallas_frontend.backend_api import KernelIR
from pallas_triton import padding
from pallas_triton.errors import unsupported
from pallas_triton.jaxpr_text import padding_literal, tl_dtype
from pallas_triton.refs import BlockRef, RegisterRef, mul_expr
from pallas_triton.writer import KernelWriter
from pallas_triton.jaxpr_text import (  # noqa: F401  (re-exported for plugins' callers)
    is_float, is_pow2, literal, used_vars)


# --- the kernel --------------------------------------------------------------------------

def program_coordinate_lines(w: KernelWriter, grid, axes) -> None:
    """Binds ``pid{a}`` for each launched axis from the 1-D program id (row-major)."""
    if not axes:
        return
    if len(axes) == 1:
        w.line(f"pid{axes[0]} = tl.program_id(0)")
        return
    w.line("pid = tl.program_id(0)")
    inner = 1
    for k in range(len(axes) - 1, -1, -1):
        e = "pid" if inner == 1 else f"pid // {inner}"
        w.line(f"pid{axes[k]} = ({e}) % {grid[axes[k]]}" if k > 0 else f"pid{axes[k]} = {e}")
        inner *= grid[axes[k]]


def block_ref(w: KernelWriter, mapping, ptr: str, grid_names) -> BlockRef:
    index = iter(w.emit_jaxpr(mapping.index_map, grid_names))
    from pallas_triton import prefetch
    n_grid = len(w.kernel.grid)
    # under the interpreter, block indices read from data are checked as the kernel runs
    checked = w.target == "interpret" and w.kernel.num_scalar_prefetch and \
        prefetch.reads_prefetch(mapping, n_grid)
    starts, masked, low_masked, limits, visible, sizes = [], [], [], [], [], []
    # element offsets past 2**31 need 64-bit arithmetic (program ids and ranges are int32)
    wide = math.prod(mapping.array_shape) >= 2 ** 31
    for d, dim in enumerate(mapping.block_dims):
        n = mapping.array_shape[d]
        idx, limit, low = next(index), None, False
        if wide and not idx.lstrip("-").isdigit():
            idx = f"({idx}).to(tl.int64)"
        if checked and isinstance(dim, (pl.Blocked, pl.Squeezed)):
            _check_line(w, mapping, d, idx, -(-n // dim.block_size), grid_names[:n_grid])
        if isinstance(dim, pl.Blocked):
            starts.append(mul_expr(idx, dim.block_size))
            masked.append(n % dim.block_size != 0)
        elif isinstance(dim, pl.Element):
            # the index map's offset is into the array padded by padding[0] in front
            lo = dim.padding[0]
            starts.append(f"{idx} - {lo}" if lo else idx)
            masked.append(True)
            low = lo > 0
        elif isinstance(dim, pl.Squeezed):
            starts.append(idx)
            masked.append(False)
        elif isinstance(dim, pl.BoundedSlice):
            # (start, size): the block's first `size` elements are the slice
            starts.append(idx)
            limit = next(index)
            limit = limit if limit.isidentifier() or limit.isdigit() else w.bind(limit, "lim")
            masked.append(True)
        else:
            raise unsupported(f"{type(dim).__name__} block dims")
        low_masked.append(low)
        limits.append(limit)
        sizes.append(dim.block_size)
        if not isinstance(dim, pl.Squeezed):
            visible.append(d)
    starts = [s if s.isidentifier() or s.lstrip("-").isdigit() else w.bind(s, f"{ptr[:-4]}_start")
              for s in starts]
    return BlockRef(ptr, tuple(mapping.array_shape), np.dtype(mapping.dtype), starts, visible,
                    sizes, masked, low_masked=low_masked, limits=limits, origin=mapping.origin,
                    index_map_source=mapping.index_map_source)


def _check_line(w, mapping, d, idx, bound, grid_names) -> None:
    from pallas_triton.prefetch import CHECK_IMPORT
    w.imports.add(CHECK_IMPORT)
    what = printable(f"Kernel '{w.kernel.name}': the index_map of {mapping.origin} "
                     f"({mapping.index_map_source or w.kernel.source}), along dim {d},")
    w.line(f"_pallas_check_block({idx}, {bound}, {what!r}, {', '.join(grid_names)})")


@dataclasses.dataclass(frozen=True)
class GeneratedKernel:
    name: str                       # the @triton.jit function's name in ``source``
    source: str
    num_programs: int
    arg_names: tuple[str, ...]
    arg_dtypes: tuple[np.dtype, ...]


def generate(kernel: KernelIR, *, target: str = "interpret",
             dot_input_precision: str = "tf32") -> GeneratedKernel:
    from pallas_triton import schedule
    plan = schedule.plan(kernel)
    w = KernelWriter(kernel, target=target, dot_input_precision=dot_input_precision)
    fn_name = python_name(kernel.name)
    n_in = len(kernel.in_mappings)
    # scalar-prefetch operands come first, as in the call: whole arrays that the
    # index maps and the body read with scalar loads
    prefetch = prefetch_refs(kernel)
    arg_names = tuple([f"in{k}_ptr" for k in range(n_in)] +
                      [f"out{k}_ptr" for k in range(len(kernel.out_mappings))])
    grid = tuple(kernel.grid)
    if plan.note:
        w.line(f"# {printable(plan.note)!r}")
    program_coordinate_lines(w, grid, plan.parallel_axes)
    # Registers start before the loops; their blocks do not move along the looped axes.
    outer_names = [f"pid{a}" if a in plan.parallel_axes else "0" for a in range(len(grid))]
    registers = {}
    aliased = {o for _, o in kernel.input_output_aliases}
    for k in sorted(plan.register_outputs):
        m = kernel.out_mappings[k]
        memory = block_ref(w, m, arg_names[n_in + k], outer_names + prefetch)
        reg = RegisterRef(f"out{k}_blk", tuple(m.block_shape), np.dtype(m.dtype), m.origin)
        start = w.load(memory, None) if k in aliased else padding_block(reg.shape, reg.dtype)
        w.line(f"{reg.name} = {start}")
        registers[k] = (reg, memory)
    scratch = []
    for k, aval in enumerate(kernel.scratch_avals):
        inner = getattr(aval, "inner_aval", aval)
        reg = RegisterRef(f"scratch{k}", tuple(inner.shape), np.dtype(inner.dtype),
                          f"scratch_shapes[{k}]")
        w.line(f"{reg.name} = {padding_block(reg.shape, reg.dtype)}")
        scratch.append(reg)
    for a in plan.sequential_axes:
        w.line(f"for pid{a} in range({grid[a]}):")
        w.depth += 1
    grid_names = [f"pid{a}" for a in range(len(grid))]
    refs = []
    for k, (m, ptr) in enumerate(zip(kernel.mappings, arg_names)):
        if k >= n_in and k - n_in in registers:
            refs.append(registers[k - n_in][0])
            continue
        ref = block_ref(w, m, ptr, grid_names + prefetch)
        ref.fenced = k >= n_in and k - n_in in plan.fenced_outputs
        refs.append(ref)
    w.emit_jaxpr(kernel.jaxpr, grid_names + prefetch + refs + scratch)
    w.depth -= len(plan.sequential_axes)
    for reg, memory in registers.values():
        w.store(memory, None, reg.name)
    header = ["import triton", "import triton.language as tl", *sorted(w.imports), "", ""]
    helpers = [src + "\n" for src in w.helpers.values()]
    arg_names = tuple(r.ptr for r in prefetch) + arg_names
    signature = f"def {fn_name}({', '.join(arg_names)}):"
    # user text (kernel name, file path) only ever enters the module as a repr
    doc = "    " + repr(printable(f"Generated by pallas_triton from {kernel.name} "
                                   f"({kernel.source})."))
    source = "\n".join(header + helpers + ["@triton.jit", signature, doc] + w.lines) + "\n"
    return GeneratedKernel(fn_name, source, math.prod(grid[a] for a in plan.parallel_axes),
                           arg_names, tuple([r.dtype for r in prefetch] +
                                            [np.dtype(m.dtype) for m in kernel.mappings]))


def prefetch_refs(kernel: KernelIR) -> list[BlockRef]:
    """A whole-array Ref in memory per scalar-prefetch operand (``pf{k}_ptr``)."""
    invars = getattr(kernel.jaxpr, "jaxpr", kernel.jaxpr).invars
    out = []
    for k in range(kernel.num_scalar_prefetch):
        aval = invars[len(kernel.grid) + k].aval
        inner = getattr(aval, "inner_aval", aval)
        shape = tuple(int(n) for n in inner.shape)
        out.append(BlockRef(f"pf{k}_ptr", shape, np.dtype(inner.dtype), ["0"] * len(shape),
                            list(range(len(shape))), list(shape), [False] * len(shape),
                            origin=f"scalar prefetch {k}"))
    return out


def python_name(kernel_name: str) -> str:
    """``pallas_`` + the kernel name with everything but ASCII letters, digits and ``_``
    replaced: always a valid identifier, whatever the user named the kernel."""
    safe = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_"
                   for c in str(kernel_name))[:64]
    return "pallas_" + safe


def printable(text: str, limit: int = 300) -> str:
    """``text`` with control characters (newlines included) replaced, and shortened."""
    return "".join(c if c.isprintable() else "?" for c in str(text))[:limit]


def padding_block(shape, dtype) -> str:
    """A block of the padding value: what an unwritten output or scratch holds."""
    return f"tl.full({padding.shape(shape)}, {padding_literal(dtype)}, {tl_dtype(dtype)})"
