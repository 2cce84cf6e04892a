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
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import math
import os
import re

import jax
import numpy as np
from jax.extend.core import Literal

import pallas_frontend as pl
from pallas_frontend.backend_api import KernelIR
from pallas_triton.emitters import EMITTERS, broadcast_expr, helper_source
from pallas_triton.jaxpr_text import (  # noqa: F401  (re-exported for plugins' callers)
    is_float, is_pow2, literal, padding_literal, source_line, tl_dtype, used_vars)
# the modules that register emitters beyond emitters.py's
from pallas_triton import joins, math_library, padding, widening, xla_numerics  # noqa: F401
from pallas_triton.errors import TritonCapabilityError, unsupported


@dataclasses.dataclass
class BlockRef:
    """A kernel Ref as pointer arithmetic: ``ptr`` + per-array-dim element offsets."""
    ptr: str
    array_shape: tuple[int, ...]
    dtype: np.dtype
    starts: list[str]               # element offset of the block, per array dim
    visible: list[int]              # array dims the kernel sees (squeezed dims dropped)
    block_sizes: list[int]          # per array dim
    masked: list[bool]              # per array dim: can the block overhang?
    fenced: bool = False            # other threads of the program may touch it in between
    # per array dim: can the block start before the array (Element padding)?
    low_masked: list[bool] = dataclasses.field(default_factory=list)
    # per array dim: the valid extent of a BoundedSlice block (an expression), else None
    limits: list = dataclasses.field(default_factory=list)
    origin: str = ""                # what messages call it (the BlockSpec's operand)
    index_map_source: str = ""


    @property
    def strides(self):
        out, acc = [], 1
        for n in reversed(self.array_shape):
            out.append(acc)
            acc *= n
        return out[::-1]


@dataclasses.dataclass
class RegisterRef:
    """A Ref held in registers: the tensor variable ``name``, rebound at every write."""
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    label: str                      # what messages call it (a BlockSpec or scratch buffer)


class KernelWriter:
    def __init__(self, kernel: KernelIR, *, target: str, dot_input_precision: str):
        self.kernel = kernel
        self.target = target                        # "interpret", "cuda" or "rocm"
        self.dot_input_precision = dot_input_precision
        self.allow_gather = False      # set while pallas_triton.load/store resolve their index
        self.lines: list[str] = []
        # Common subexpressions (offsets, masks, ranges) are bound once per scope and
        # reused: Triton's interpreter evaluates every expression in NumPy, so repeats cost.
        self._scope_ids = itertools.count()
        self._scopes: list[int] = []
        self._memo: dict[str, tuple[str, int]] = {}
        self._bound: set[str] = set()          # names assigned exactly once (by bind)
        self.depth = 1
        self.counter = 0
        self.helpers: dict[str, str] = {}
        self.imports: set[str] = set()          # module-level imports emitters asked for
        self.env: dict = {}
        self.current_eqn = None
        self.used_vars = used_vars(kernel.jaxpr)

    # --- text ------------------------------------------------------------------
    @property
    def depth(self) -> int:
        return len(self._scopes)

    @depth.setter
    def depth(self, value: int) -> None:
        # entering a block opens a scope; leaving it forgets what was bound inside
        while len(self._scopes) < value:
            self._scopes.append(next(self._scope_ids))
        del self._scopes[value:]

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def bind(self, expr: str, prefix: str = "t") -> str:
        """Assigns ``expr`` to a fresh local; returns the name (keeps lines short)."""
        if expr.isidentifier():
            return expr
        reusable = self._reusable(expr)
        if reusable:
            hit = self._memo.get(expr)
            if hit is not None and hit[1] in self._scopes:
                return hit[0]
        name = self.fresh(prefix)
        self.line(f"{name} = {expr}")
        self._bound.add(name)
        if reusable:
            self._memo[expr] = (name, self._scopes[-1])
        return name

    def _reusable(self, expr: str) -> bool:
        """Pure, and reads only names that never change within their scope."""
        if any(word in expr for word in _EFFECTFUL):
            return False
        for name in _IDENTIFIER.findall(expr):
            if name not in self._bound and not _STABLE_NAME.match(name) and \
                    name not in _TL_WORDS:
                return False
        return True

    def helper(self, kind: str) -> str:
        self.helpers.setdefault(kind, helper_source(kind))
        return f"_combine_{kind}"

    # --- values ---------------------------------------------------------------------
    def read(self, atom):
        if isinstance(atom, Literal):
            return literal(atom.val, atom.aval.dtype)
        return self.env[atom]

    def emit_jaxpr(self, jaxpr, args) -> list[str]:
        """Emits ``jaxpr`` with its invars bound to ``args``; returns its outputs."""
        consts = getattr(jaxpr, "consts", ())
        if hasattr(jaxpr, "jaxpr"):               # a ClosedJaxpr
            jaxpr = jaxpr.jaxpr
        for v, c in zip(jaxpr.constvars, consts):
            if np.shape(c):
                raise unsupported("array constants captured by a kernel (pass them as inputs)")
            c = np.asarray(c)
            self.env[v] = self.bind(f"tl.full([], {literal(c.item(), np.float32 if is_float(c.dtype) else np.int32)}, "
                                    f"{tl_dtype(c.dtype)})", "k")
        for v, a in zip(jaxpr.invars, args):
            self.env[v] = a
        for eqn in jaxpr.eqns:
            self.emit_eqn(eqn)
        return [self.read(v) for v in jaxpr.outvars]

    def emit_eqn(self, eqn) -> None:
        name = eqn.primitive.name
        emitter = EMITTERS.get(name)
        if emitter is None:
            raise TritonCapabilityError(
                f"The Triton backend has no code generator for primitive '{name}' "
                f"(kernel '{self.kernel.name}', at {source_line(eqn) or self.kernel.source}).")
        self.current_eqn = eqn
        ins = [self.read(v) for v in eqn.invars]
        wide = widening.widened_dtypes(self.target, eqn)
        if wide:
            ins = widening.widen_inputs(self, eqn, ins, wide)
        try:
            outs = emitter(self, eqn, ins)
            if wide:
                outs = widening.narrow_outputs(self, eqn, outs, wide)
        except TritonCapabilityError as e:
            if " at " in str(e):
                raise
            raise TritonCapabilityError(
                f"{e} (primitive '{name}' in kernel '{self.kernel.name}', at "
                f"{source_line(eqn) or self.kernel.source})") from None
        for v, expr in zip(eqn.outvars, outs or ()):
            if type(v).__name__ == "DropVar":
                continue
            if isinstance(expr, (BlockRef, RegisterRef)):
                self.env[v] = expr
            else:
                self.env[v] = self.bind(expr, "v")

    # --- memory -------------------------------------------------------------------
    def address(self, ref: BlockRef, indexer):
        """(pointer expr, mask expr or None, result shape) for ``ref[indexer]``."""
        indices = indexer_entries(ref, indexer)
        result_axes = [i for i, ix in enumerate(indices) if ix[0] == "slice"]
        rank = len(result_axes)
        gather_shape = list(np.broadcast_shapes(*[ix[2] for ix in indices if ix[0] == "array"]))
        # the result: the broadcast index arrays' dims first, then the sliced dims (as JAX)
        g = len(gather_shape)
        offset_terms, mask_terms, shape = [], [], list(gather_shape)
        pos_of_visible = dict(zip(ref.visible, indices))
        axis = 0
        for d in range(len(ref.array_shape)):
            stride = ref.strides[d]
            local = None                                     # position within the block
            if d not in pos_of_visible:                      # squeezed dim
                pos, size = ref.starts[d], None
            else:
                kind, start, size, step = pos_of_visible[d]
                if kind == "array":        # gather: the index tensor broadcasts over the result
                    local = start
                    if rank:                # room for the sliced dims after the gathered ones
                        full = broadcast_expr(start, size, gather_shape,
                                              tuple(range(g - len(size), g)))
                        local = f"({full})[{', '.join([':'] * g + ['None'] * rank)}]"
                    pos = add_expr(ref.starts[d], f"({local})")
                elif kind == "scalar":
                    local = start
                    pos = add_expr(ref.starts[d], start)
                else:
                    lanes = "tl.arange(0, %d)" % padding.size(size)
                    local = lanes if step == 1 else f"{lanes} * {step}"
                    local = add_expr(start, local)
                    idx = ", ".join(["None"] * g + [":" if k == axis else "None"
                                                     for k in range(rank)])
                    pos = add_expr(ref.starts[d], local)
                    pos = f"({pos})[{idx}]" if g + rank > 1 else f"({pos})"
                    local = f"({local})[{idx}]" if g + rank > 1 else f"({local})"
                    if padding.size(size) != size:      # lanes past the block: masked
                        mask_terms.append(f"(({lanes})[{idx}] < {size})" if g + rank > 1
                                          else f"({lanes} < {size})")
                    shape.append(padding.size(size))
                    axis += 1
            if "tl.arange" in pos:
                pos = self.bind(pos, "o")        # shared by the pointer, the mask, other operands
            if ref.masked[d]:
                mask_terms.append(f"({pos} < {ref.array_shape[d]})")
            if ref.low_masked and ref.low_masked[d]:
                mask_terms.append(f"({pos} >= 0)")
            limit = ref.limits[d] if ref.limits else None
            if limit is not None and local is not None:
                mask_terms.append(f"({local} < {limit})")
            if pos != "0":
                offset_terms.append(pos if stride == 1 else f"({pos}) * {stride}")
        offset = " + ".join(offset_terms) or "0"
        ptr = self.bind(f"{ref.ptr} + {offset}", "p")
        mask = self.bind(" & ".join(mask_terms), "m") if mask_terms else None
        return ptr, mask, shape

    def load(self, ref: BlockRef, indexer, *, mask=None, other=None, extra="") -> str:
        self.fence(ref)
        ptr, bounds, _ = self.address(ref, indexer)
        mask = join_masks(bounds, mask)
        if mask is None:
            return f"tl.load({ptr}{extra})"
        if other is None:
            # Reads past an array's edge are unspecified (docs/user-guide.md): no fill
            # value, as hand-written Triton does. A fill costs a broadcast per load under
            # Triton's interpreter (about 2x on an add) and is not free on a GPU either.
            return f"tl.load({ptr}, mask={mask}{extra})"
        return f"tl.load({ptr}, mask={mask}, other={other}{extra})"

    def store(self, ref: BlockRef, indexer, value: str, *, mask=None, extra="",
              value_dtype=None) -> None:
        self.fence(ref)
        ptr, bounds, _ = self.address(ref, indexer)
        mask = join_masks(bounds, mask)
        if value.isidentifier() and (value_dtype is None or np.dtype(value_dtype) != ref.dtype):
            value = widening.cast(self, value, value_dtype or ref.dtype, ref.dtype)
        self.line(f"tl.store({ptr}, {value}" + (f", mask={mask}" if mask else "") + f"{extra})")


    def fence(self, ref: BlockRef) -> None:
        # Threads own different elements in a load's and a store's layouts; order
        # this access after the program's earlier ones to the same block.
        if ref.fenced:
            self.line("tl.debug_barrier()")


# Calls that read memory or have effects: never reused.
_EFFECTFUL = ("tl.load", "tl.atomic", "tl.store", "inline_asm", "tl.debug", "tl.device", "tl.rand")
# identifiers not preceded by a dot (attribute names such as tl.arange are skipped)
_IDENTIFIER = re.compile(r"(?<![.\w'\"])([A-Za-z_]\w*)")
_STABLE_NAME = re.compile(r"^(pid|it)\d*$")   # program ids, for-loop indices
_TL_WORDS = {"tl", "None", "True", "False", "float", "bitcast", "out_dtype", "input_precision",
             "propagate_nan", "mask", "other", "reverse", "dtype", "pack", "is_pure"}


def join_masks(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return f"({a}) & ({b})"


def add_expr(a: str, b: str) -> str:
    if a == "0":
        return b
    if b == "0":
        return a
    return f"{a} + {b}"


def indexer_entries(ref: BlockRef, indexer):
    """One ``(kind, start, size, step)`` per visible dim; kind is "scalar" or "slice"."""
    block = [ref.block_sizes[d] for d in ref.visible]
    if indexer is None:
        return [("slice", "0", n, 1) for n in block]
    out = []
    for k, ix in enumerate(indexer.indices):
        if isinstance(ix, pl.Slice):
            start = ix.start if isinstance(ix.start, str) else str(int(ix.start))
            out.append(("slice", start, int(ix.size), int(ix.stride)))
        elif isinstance(ix, str):
            out.append(("scalar", ix, None, None))
        elif isinstance(ix, ArrayIndex):
            if not all(is_pow2(n) for n in ix.shape):
                raise unsupported(f"an integer-array index of shape {ix.shape} (Triton needs "
                                  "power-of-two dims for index arrays)")
            out.append(("array", ix.expr, ix.shape, None))
        else:
            raise unsupported("integer-array (gather) indexing of Refs")
    kinds = [e[0] for e in out]
    arrays = [k for k, kind in enumerate(kinds) if kind == "array"]
    slices = [k for k, kind in enumerate(kinds) if kind == "slice"]
    if arrays and slices and min(slices) < max(arrays):
        raise unsupported("a Ref access with a slice before an integer-array index (put the "
                          "array-indexed dims first, as JAX's paged attention does)")
    return out


@dataclasses.dataclass(frozen=True)
class ArrayIndex:
    """An integer-array index of a Ref access (gather/scatter): its tensor expression."""
    expr: str
    shape: tuple[int, ...]


def resolve_indexer(w: KernelWriter, transforms):
    """The single NDIndexer of a Ref access with its dynamic parts as expressions."""
    if not transforms:
        return None
    if len(transforms) != 1 or not hasattr(transforms[0], "indices"):
        raise unsupported(f"Ref transforms {[type(t).__name__ for t in transforms]}")
    (nd,) = transforms
    gather = bool(getattr(nd, "int_indexer_shape", ()))
    if gather and not w.allow_gather:
        raise unsupported("integer-array (gather) indexing of plain Refs (use "
                          "pallas_triton.load/store with mask= for array offsets)")

    def res(x):
        if isinstance(x, pl.Slice):
            return pl.Slice(res(x.start), x.size, x.stride)
        if isinstance(x, (int, np.integer)):
            return str(int(x))
        shape = tuple(getattr(getattr(x, "aval", None), "shape", ()) or ())
        if shape:
            return ArrayIndex(w.read(x), shape)
        return w.read(x)
    return type("Indexer", (), {"indices": [res(i) for i in nd.indices]})()


def unflatten_transforms(eqn, leaves):
    return jax.tree_util.tree_unflatten(eqn.params["tree"], leaves)


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


def mul_expr(idx: str, k: int) -> str:
    if idx.lstrip("-").isdigit():
        return str(int(idx) * k)
    return idx if k == 1 else f"{idx} * {k}"


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


def kernel_fingerprint(kernel: KernelIR, extra=()) -> str:
    """A hash of everything the generated code depends on: the KernelIR dump, every
    index-map jaxpr, the values of all constants and literals (the text of a jaxpr
    may abbreviate them), and ``extra`` (target, params)."""
    h = hashlib.sha256()
    h.update(kernel.pretty().encode())
    for m in kernel.mappings:
        h.update(str(m.index_map).encode())
        _hash_values(h, m.index_map)
    _hash_values(h, kernel.jaxpr)
    h.update(repr(extra).encode())
    return h.hexdigest()[:32]


def _hash_values(h, jaxpr) -> None:
    from jax.extend.core import jaxprs_in_params
    for const in getattr(jaxpr, "consts", ()):
        _hash_array(h, const)
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    for eqn in jaxpr.eqns:
        for v in eqn.invars:
            if isinstance(v, Literal):
                _hash_array(h, v.val)
        for sub in jaxprs_in_params(eqn.params):
            h.update(str(sub).encode())
            _hash_values(h, sub)


def _hash_array(h, value) -> None:
    try:
        arr = np.asarray(value)
    except Exception:  # noqa: BLE001  (not an array: its repr is all there is)
        h.update(repr(value).encode())
        return
    h.update(f"{arr.dtype}{arr.shape}".encode())
    h.update(np.ascontiguousarray(arr).tobytes())
