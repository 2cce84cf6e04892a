"""Which grid axes become Triton programs, which become loops, and where each Ref lives.

Triton runs programs in parallel, so only the axes along which grid points are
independent (``backend_api.parallel_grid_axes``) are launched; the others
become nested ``for`` loops inside each program, in grid order (row-major, the
inner axes fastest). A Ref then lives either

- in memory: a pointer plus offsets, loaded and stored at each access (with a
  ``tl.debug_barrier()`` in front when other accesses of the same output block
  by other threads of the program may precede it); or
- in registers: a tensor carried across the loops. Scratch always lives there,
  so it may only be read and written whole. An output lives there when the
  kernel loops, its block does not move along the looped axes, and it is only
  read and written whole: it starts as padding (or its aliased input's block),
  and is stored once after the loops.

Scratch is private to a program, while the frontend's meaning carries it from
one grid point to the next in grid order. The two agree when a program's steps
are consecutive in that order (the looped axes are innermost) and its first
step writes every scratch buffer it reads whole before reading it. Launched
axes are given up, innermost first, until both hold.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from jax.extend.core import Literal, jaxprs_in_params

import pallas_frontend as pl
from pallas_frontend import backend_api
from pallas_frontend.backend_api import KernelIR, source_line
from pallas_triton.jaxpr_text import used_vars

ACCESS_PRIMITIVES = {"get": 1, "swap": 2, "addupdate": 2}     # -> number of leading operands
CALL_PRIMITIVES = ("pjit", "jit", "closed_call", "core_call", "remat", "checkpoint",
                   "custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr", "scan")


@dataclasses.dataclass
class RefUse:
    """How the kernel body uses one Ref operand."""
    reads: int = 0
    writes: int = 0
    partial: str = ""          # the first access that is not a whole read/write, and where

    @property
    def accesses(self) -> int:
        return self.reads + self.writes


@dataclasses.dataclass(frozen=True)
class Schedule:
    parallel_axes: tuple[int, ...]        # one Triton program per point of these
    sequential_axes: tuple[int, ...]      # loops inside each program, outermost first
    register_outputs: frozenset[int]      # output positions kept in registers
    fenced_outputs: frozenset[int]        # memory outputs whose accesses need a barrier
    uses: tuple[RefUse, ...]              # per Ref operand: inputs, outputs, scratch
    note: str = ""                        # why launched axes were given up, if they were


def scratch_label(kernel: KernelIR, k: int) -> str:
    aval = kernel.scratch_avals[k]
    inner = getattr(aval, "inner_aval", aval)
    return f"scratch_shapes[{k}] ({np.dtype(inner.dtype).name}{list(inner.shape)})"


# --- how Refs are accessed ------------------------------------------------------------

def _static_int(x):
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, Literal):
        return int(np.asarray(x.val))
    return None


def whole_access(eqn) -> bool:
    """Whether a get/swap/addupdate reads or writes its Ref whole (``ref[...]``)."""
    n_leading = ACCESS_PRIMITIVES[eqn.primitive.name]
    transforms = jax.tree_util.tree_unflatten(eqn.params["tree"], eqn.invars[n_leading:])
    if not transforms:
        return True
    if len(transforms) != 1 or not hasattr(transforms[0], "indices"):
        return False
    (nd,) = transforms
    shape = tuple(eqn.invars[0].aval.shape)
    if getattr(nd, "int_indexer_shape", ()) or len(nd.indices) != len(shape):
        return False
    for ix, n in zip(nd.indices, shape):
        if not isinstance(ix, pl.Slice):
            return False
        if _static_int(ix.start) != 0 or int(ix.size) != n or int(ix.stride) != 1:
            return False
    return True


def sub_jaxprs(eqn):
    """(jaxpr, outer operands bound to its invars) for each nested jaxpr we can follow."""
    p, ins = eqn.params, list(eqn.invars)
    name = eqn.primitive.name
    if name == "cond":
        return [(b, ins[1:]) for b in p["branches"]]
    if name == "while":
        nc, nb = p["cond_nconsts"], p["body_nconsts"]
        carry = ins[nc + nb:]
        return [(p["cond_jaxpr"], ins[:nc] + carry), (p["body_jaxpr"], ins[nc:nc + nb] + carry)]
    if name in CALL_PRIMITIVES:
        sub = p.get("jaxpr") or p.get("call_jaxpr") or p.get("fun_jaxpr")
        return [(sub, ins)] if sub is not None else []
    return []


def _open(jaxpr):
    return getattr(jaxpr, "jaxpr", jaxpr)


def ref_uses(kernel: KernelIR) -> tuple[RefUse, ...]:
    """Per Ref operand past the scalar-prefetch ones: inputs, outputs, scratch."""
    return all_ref_uses(kernel)[kernel.num_scalar_prefetch:]


def all_ref_uses(kernel: KernelIR) -> tuple[RefUse, ...]:
    """Per Ref operand: the scalar-prefetch ones first, then as ``ref_uses``."""
    n_grid = len(kernel.grid)
    ref_vars = _open(kernel.jaxpr).invars[n_grid:]
    uses = [RefUse() for _ in ref_vars]

    def walk(jaxpr, refs):
        for eqn in _open(jaxpr).eqns:
            mine = [(pos, refs[v]) for pos, v in enumerate(eqn.invars)
                    if not isinstance(v, Literal) and v in refs]
            if not mine:
                continue
            name = eqn.primitive.name
            if name in ACCESS_PRIMITIVES and mine == [(0, mine[0][1])]:
                use = uses[mine[0][1]]
                use.reads += name != "swap" or eqn.outvars[0] in _used(kernel)
                use.writes += name != "get"
                if not use.partial and not whole_access(eqn):
                    use.partial = f"a sliced '{name}' at {source_line(eqn) or kernel.source}"
                continue
            subs = sub_jaxprs(eqn)
            if subs:
                for sub, outer in subs:
                    inner = _open(sub).invars
                    walk(sub, {iv: refs[o] for iv, o in zip(inner, outer)
                               if not isinstance(o, Literal) and o in refs})
                continue
            for _, r in mine:                  # a backend primitive (atomics, masked load/store)
                uses[r].reads += 1
                uses[r].writes += 1
                if not uses[r].partial:
                    uses[r].partial = f"'{name}' at {source_line(eqn) or kernel.source}"
    walk(kernel.jaxpr, {v: k for k, v in enumerate(ref_vars)})
    return tuple(uses)


# --- is scratch written before it is read at a program's first step? --------------------

class _Observed(Exception):
    pass


def scratch_unobserved_at_first_step(kernel: KernelIR, sequential_axes, scratch) -> str:
    """'' when, with the looped program ids at 0, every scratch buffer in ``scratch``
    (positions among the scratch operands) is written whole before any read, on every
    path the first step can take, and is written by its end; else why not."""
    jaxpr = _open(kernel.jaxpr)
    n_grid, n_io = len(kernel.grid), len(kernel.mappings)
    known = {jaxpr.invars[a]: np.int32(0) for a in sequential_axes}
    first = n_grid + kernel.num_scalar_prefetch + n_io
    refs = {jaxpr.invars[first + k]: k for k in scratch}
    try:
        state = _walk_first_step(jaxpr, known, refs, {k: False for k in scratch}, kernel)
    except _Observed as e:
        return str(e)
    stale = [k for k, clean in state.items() if not clean]
    if stale:
        return f"{scratch_label(kernel, stale[0])} is not written whole on every path of the first step"
    return ""


def _value(atom, known):
    if isinstance(atom, Literal):
        return np.asarray(atom.val)
    return known.get(atom)


def _walk_first_step(jaxpr, known, refs, state, kernel):
    jaxpr = _open(jaxpr)
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        mine = [refs[v] for v in eqn.invars if not isinstance(v, Literal) and v in refs]
        if name in ACCESS_PRIMITIVES and mine and eqn.invars[0] in refs:
            k = refs[eqn.invars[0]]
            reads = name != "swap" or eqn.outvars[0] in _used(kernel)
            if reads and not state[k]:
                raise _Observed(f"{scratch_label(kernel, k)} is read at "
                                f"{source_line(eqn) or kernel.source} before the program writes it")
            if name == "swap" and whole_access(eqn):
                state = {**state, k: True}
            continue
        if name == "cond":
            index = _value(eqn.invars[0], known)
            branches = eqn.params["branches"]
            taken = [branches[int(np.clip(index, 0, len(branches) - 1))]] if index is not None \
                else branches
            ops = eqn.invars[1:]
            after = [_walk_first_step(b, _bind(b, ops, known), _bind(b, ops, refs), state, kernel)
                     for b in taken]
            state = {k: all(s[k] for s in after) for k in state}
            continue
        subs = sub_jaxprs(eqn)
        if subs:
            loop = name in ("scan", "while")
            for sub, outer in subs:
                inner_known = {} if loop else _bind(sub, outer, known)
                new = _walk_first_step(sub, inner_known, _bind(sub, outer, refs), state, kernel)
                # a scan of length >= 1 runs its body; a while loop may not
                if not (name == "while" or (name == "scan" and eqn.params["length"] == 0)):
                    state = new
            continue
        if mine:
            if not all(state[k] for k in mine):
                raise _Observed(f"{scratch_label(kernel, mine[0])} is used by '{name}' at "
                                f"{source_line(eqn) or kernel.source} before the program writes it")
            continue
        _fold_scalar(eqn, known)
    return state


def _bind(sub, outer, table):
    inner = _open(sub).invars
    return {iv: table[o] for iv, o in zip(inner, outer)
            if not isinstance(o, Literal) and o in table}


def _fold_scalar(eqn, known):
    """Evaluates a scalar equation whose operands are known (program-id arithmetic)."""
    vals = [_value(v, known) for v in eqn.invars]
    if any(v is None for v in vals) or list(jaxprs_in_params(eqn.params)) or eqn.effects:
        return
    if any(getattr(v.aval, "shape", None) != () for v in eqn.outvars):
        return
    try:
        out = eqn.primitive.bind(*vals, **eqn.params)
    except Exception:  # noqa: BLE001 - not foldable: stays unknown (conservative)
        return
    outs = out if eqn.primitive.multiple_results else [out]
    for v, o in zip(eqn.outvars, outs):
        known[v] = np.asarray(o)


_USED_CACHE: dict = {}


def _used(kernel):
    key = id(kernel.jaxpr)
    if key not in _USED_CACHE:
        _USED_CACHE.clear()
        _USED_CACHE[key] = used_vars(kernel.jaxpr)
    return _USED_CACHE[key]


# --- the schedule ------------------------------------------------------------------------

def index_map_uses(mapping, axes, num_grid=None) -> bool:
    """Whether ``mapping``'s index_map reads any of the grid ``axes`` or, past
    the first ``num_grid`` invars, a scalar-prefetch Ref (data: it may move at any step)."""
    used = used_vars(mapping.index_map)
    invars = _open(mapping.index_map).invars
    prefetched = invars[num_grid:] if num_grid is not None else ()
    return any(invars[a] in used for a in axes) or any(v in used for v in prefetched)


def plan(kernel: KernelIR) -> Schedule:
    grid = tuple(kernel.grid)
    uses = ref_uses(kernel)
    n_in, n_out = len(kernel.in_mappings), len(kernel.out_mappings)
    if not grid:
        return Schedule((), (), frozenset(), _fenced(uses, n_in, n_out, looped=False), uses)
    if kernel.num_scalar_prefetch:       # index maps read data: the frontend cannot tell
        from pallas_triton.prefetch import parallel_axes
        flags = parallel_axes(kernel)
    else:
        flags = backend_api.parallel_grid_axes(kernel, private_scratch=True)
    # A size-1 axis is both: launching it costs nothing and keeps the looped axes innermost.
    parallel = [a for a in range(len(grid)) if flags[a] or grid[a] == 1]
    note = ""
    read_scratch = [k for k in range(len(kernel.scratch_avals)) if uses[n_in + n_out + k].reads]
    if read_scratch:
        looped = [a for a in range(len(grid)) if a not in parallel]
        if looped:          # a program's steps must be consecutive in grid order
            parallel = [a for a in parallel if a < looped[0] or grid[a] == 1]
        while True:
            looped = tuple(a for a in range(len(grid)) if a not in parallel)
            why = scratch_unobserved_at_first_step(kernel, looped, read_scratch)
            movable = [a for a in parallel if grid[a] > 1]
            if not why or not movable:
                break
            note = f"grid axis {movable[-1]} looped: {why}"
            parallel.remove(movable[-1])
    sequential = tuple(a for a in range(len(grid)) if a not in parallel)
    looped = bool(sequential)
    registers = frozenset(
        k for k, m in enumerate(kernel.out_mappings)
        if looped and not uses[n_in + k].partial and not index_map_uses(m, sequential, len(grid)))
    fenced = _fenced(uses, n_in, n_out, looped) - registers
    return Schedule(tuple(parallel), sequential, registers, fenced, uses, note)


def _fenced(uses, n_in, n_out, looped) -> frozenset[int]:
    """Outputs in memory that more than one access (or loop step) touches."""
    return frozenset(k for k in range(n_out)
                     if uses[n_in + k].accesses >= 2 or (looped and uses[n_in + k].accesses))
