"""Semaphores that cross a kernel's boundary: operands and outputs in ``SEMAPHORE``.

A kernel may return a semaphore (``out_shape=pltpu.SemaphoreType.DMA(())``)
and a later kernel may take it as an operand, e.g. to start a DMA in one
call and wait for it in another. Outside a kernel the frontend carries such
a semaphore as an int32 array, which is also how XLA holds JAX's semaphore
types. Mosaic, however, needs the kind: a DMA start or wait takes a
``!tpu.dma_semaphore``, ``pl.semaphore_signal`` a ``!tpu.semaphore``. JAX
reads the kind off the operand's dtype; ours carries none, so it is read off
the kernel: a Ref that a DMA signals or waits on is a DMA semaphore, any
other is a regular one.

When the kernel is rebuilt, such operands and outputs are typed with JAX's
semaphore dtype of that kind (``typed_lowering_context``): their lowered
values are int32 scalars either way, so nothing is converted.
"""

from __future__ import annotations

import dataclasses

import jax
from jax.extend.core import Literal

from pallas_frontend.backend_api import KernelIR

from pallas_tpu.memory import MemorySpace, SemaphoreKind
from pallas_tpu.semaphore_deadlock import nested_bodies
from pallas_tpu.view_parts import is_selection_part, part_refs

_DMA_PRIMITIVES = frozenset({"tpu_dma_start", "tpu_dma_wait"})
_REGULAR_PRIMITIVES = frozenset({"semaphore_signal", "semaphore_wait", "semaphore_read"})
_DATA_PRIMITIVES = frozenset({"get", "swap", "addupdate"})
# a use as data (a DMA's source or target, a load or store), not as a semaphore
_DATA = "data"


def _in_semaphore_space(mapping) -> bool:
    return mapping.memory_space is MemorySpace.SEMAPHORE or isinstance(
        mapping.memory_space, SemaphoreKind)


def _dma_refs(eqn, first: int, stop: int) -> list:
    """The Refs (not views) of a DMA start or wait's parts ``first:stop``: its
    parts are (src, dst, dst_sem, src_sem, device_id), a view being (Ref, transforms)."""
    parts = eqn.params["tree"].unflatten(eqn.invars)
    # a selection (pl.select_ref) views each of its choices' Refs
    return [r for part in parts[first:stop] if part is not None and jax.tree.leaves(part)
            for r in (part_refs(part) if is_selection_part(part) else jax.tree.leaves(part)[:1])]


def _dma_semaphores(eqn) -> list:
    return _dma_refs(eqn, 2, 4)


def _uses(kernel: KernelIR, roots: dict) -> dict:
    """root -> the set of kinds ("dma", "regular") its uses ask for, and ``_DATA``
    where it is used as data."""
    uses: dict = {}

    def visit(jaxpr, alias):
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            if name in _DMA_PRIMITIVES:
                for v in _dma_semaphores(eqn):
                    if not isinstance(v, Literal) and v in alias:
                        uses.setdefault(alias[v], set()).add(SemaphoreKind.DMA)
                for v in _dma_refs(eqn, 0, 2):
                    if not isinstance(v, Literal) and v in alias:
                        uses.setdefault(alias[v], set()).add(_DATA)
            elif (name in _DATA_PRIMITIVES and not isinstance(eqn.invars[0], Literal)
                  and eqn.invars[0] in alias):
                uses.setdefault(alias[eqn.invars[0]], set()).add(_DATA)
            elif name in _REGULAR_PRIMITIVES:
                v = eqn.invars[0]
                if not isinstance(v, Literal) and v in alias:
                    uses.setdefault(alias[v], set()).add(SemaphoreKind.REGULAR)
            for sub, operands in nested_bodies(eqn):
                visit(sub, {s: alias[o] for s, o in zip(sub.invars, operands or ())
                            if not isinstance(o, Literal) and o in alias})

    visit(kernel.jaxpr, dict(roots))
    return uses


def kinds(kernel: KernelIR) -> tuple[dict[int, SemaphoreKind], dict[int, SemaphoreKind]]:
    """The kind of each input (by position among ``in_mappings``) and output
    that is a semaphore; empty dicts when the kernel has none."""
    ins = [i for i, m in enumerate(kernel.in_mappings) if _in_semaphore_space(m)]
    outs = [j for j, m in enumerate(kernel.out_mappings) if _in_semaphore_space(m)]
    if not ins and not outs:
        return {}, {}
    n_pf, n_in = kernel.num_scalar_prefetch, len(kernel.in_mappings)
    n_refs = n_pf + n_in + len(kernel.out_mappings) + len(kernel.scratch_avals)
    refs = kernel.jaxpr.invars[len(kernel.jaxpr.invars) - n_refs:]
    roots = {refs[n_pf + i]: ("in", i) for i in ins}
    roots.update({refs[n_pf + n_in + j]: ("out", j) for j in outs})
    uses = _uses(kernel, roots)
    found: dict = {"in": {}, "out": {}}
    for var, (side, k) in roots.items():
        m = (kernel.in_mappings if side == "in" else kernel.out_mappings)[k]
        asked = uses.get((side, k), set())
        if _DATA in asked and asked == {_DATA} and m.memory_space is MemorySpace.SEMAPHORE:
            # values placed in semaphore memory (pltpu.SEMAPHORE(shape, int32)): JAX
            # keeps their dtype and only the memory space says semaphore
            continue
        asked = asked - {_DATA}
        if isinstance(m.memory_space, SemaphoreKind):
            asked = asked | {m.memory_space}
        if len(asked) > 1:
            raise ValueError(
                f"Kernel {kernel.name_and_src_info}: {m.origin} is a semaphore used both by a "
                "DMA and by pl.semaphore_signal/wait/read; Mosaic types a semaphore as one "
                "kind. Use separate semaphores for DMAs and for signals.")
        found[side][k] = next(iter(asked)) if asked else SemaphoreKind.REGULAR
    return found["in"], found["out"]


def jax_dtype(kind: SemaphoreKind):
    """JAX's semaphore dtype of ``kind``."""
    from jax.experimental.pallas import tpu as pltpu
    return getattr(pltpu.SemaphoreType, kind.name).dtype


def jax_out_shape(kind: SemaphoreKind, shape):
    """The ``out_shape`` entry JAX takes for a semaphore output of ``kind``."""
    from jax.experimental.pallas import tpu as pltpu
    return getattr(pltpu.SemaphoreType, kind.name)(tuple(shape))


def typed_lowering_context(kernel: KernelIR, ctx):
    """``ctx`` (our LoweringContext) with its semaphore operands' and outputs'
    types in JAX's semaphore dtypes. The call's operands end with the
    prefetched scalars and the inputs (dynamic grid sizes come first)."""
    in_kinds, out_kinds = kinds(kernel)
    if not in_kinds and not out_kinds:
        return ctx
    mlir_ctx = ctx.mlir_ctx
    avals_in = list(mlir_ctx.avals_in)
    at = len(avals_in) - len(kernel.in_mappings)
    for i, kind in in_kinds.items():
        avals_in[at + i] = avals_in[at + i].update(dtype=jax_dtype(kind))
    avals_out = list(mlir_ctx.avals_out)
    for j, kind in out_kinds.items():
        avals_out[j] = avals_out[j].update(dtype=jax_dtype(kind))
    return dataclasses.replace(ctx, mlir_ctx=mlir_ctx.replace(avals_in=avals_in,
                                                               avals_out=avals_out))


def jax_dtype_kind(aval) -> SemaphoreKind | None:
    """The kind of ``aval``'s dtype if it is one of JAX's semaphore dtypes."""
    dtype = getattr(aval, "dtype", None)
    if dtype is None or not jax.dtypes.issubdtype(dtype, jax.dtypes.extended):
        return None
    for kind in SemaphoreKind:
        if dtype == jax_dtype(kind):
            return kind
    return None
