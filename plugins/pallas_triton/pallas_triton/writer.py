"""``KernelWriter``: the text of the generated kernel as it is emitted.

Lines at the current indentation, fresh names, common subexpressions bound once
per scope, helper functions and module imports the emitters ask for; JAX values
(jaxprs emitted equation by equation through the emitter table); and memory
access to ``BlockRef``s (pointer, bounds mask, load, store).
"""

from __future__ import annotations

import itertools
import re

import numpy as np
from jax.extend.core import Literal

from pallas_frontend.backend_api import KernelIR, source_line
from pallas_triton.emitters import EMITTERS, broadcast_expr
from pallas_triton.jaxpr_text import is_float, literal, tl_dtype, used_vars
from pallas_triton.reductions import helper_source
# the modules that register emitters beyond emitters.py's
from pallas_triton import (dots, float_edges, joins, math_library, padding,  # noqa: F401
                           widening, xla_numerics)
from pallas_triton.errors import TritonCapabilityError, unsupported
from pallas_triton.refs import (BlockRef, RegisterRef, add_expr, indexer_entries,
                                join_masks)


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
