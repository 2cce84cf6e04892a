"""Scalar prefetch on this backend: which grid axes may launch, and what is refused.

The prefetched operands are plain pointer arguments of the generated kernel;
index maps and the body read them with scalar loads, so block offsets are
computed inside the kernel from data. The frontend's grid analysis evaluates
index maps ahead of time and so declines such kernels; this module gives the
verdict instead, from the index maps' structure alone:

- grid axis ``a`` launches (one program per point) when every output has a
  ``Blocked`` or ``Squeezed`` dim whose index map returns the program id of
  ``a`` unchanged. Points that differ along ``a`` then write disjoint blocks of
  every output, whatever the prefetched data says, so their order cannot matter.
  Inputs are only read, so their (data-dependent) maps never matter.
- no axis launches when the body has an effect whose order is observable (a
  debug print).
The rest loop inside each program in grid order, as ``schedule.plan`` does for
any kernel (and its scratch rule still applies on top).

A block index read from data cannot be range-checked ahead of time. Under
Triton's interpreter each one is checked as the kernel runs
(``check_block_index``, called from the generated source), so a bad index is
an error there, as in the frontend's interpreter, not a read of stray host
memory. The GPU code has no check (nor has JAX's on TPU).
"""

from __future__ import annotations

from jax.extend.core import Literal

import pallas_frontend as pl
from pallas_frontend.backend_api import KernelIR, source_line
from pallas_triton.errors import TritonCapabilityError
from pallas_triton.jaxpr_text import used_vars

# what the generated source imports to check data-dependent block indices (interpreter only)
CHECK_IMPORT = "from pallas_triton.prefetch import check_block_index as _pallas_check_block"

# primitives whose order across grid points a user can observe
_ORDERED = ("debug_print", "debug_callback")


def _open(jaxpr):
    return getattr(jaxpr, "jaxpr", jaxpr)


def projected_axes(mapping, num_grid: int) -> set[int]:
    """The grid axes whose program id some Blocked/Squeezed dim's index is, unchanged."""
    index_map = _open(mapping.index_map)
    grid_vars = {v: a for a, v in enumerate(index_map.invars[:num_grid])}
    outs = iter(index_map.outvars)
    found = set()
    for dim in mapping.block_dims:
        out = next(outs)
        if isinstance(dim, pl.BoundedSlice):
            next(outs)                       # (start, size): neither is a plain block index
            continue
        if isinstance(dim, (pl.Blocked, pl.Squeezed)) and not isinstance(out, Literal) \
                and out in grid_vars:
            found.add(grid_vars[out])
    return found


def parallel_axes(kernel: KernelIR) -> tuple[bool, ...]:
    """Per grid axis of a scalar-prefetch kernel: whether its points may run as
    independent programs (see the module docstring)."""
    n = len(kernel.grid)
    if any(eqn.primitive.name in _ORDERED for eqn in kernel.iter_equations()):
        return (False,) * n
    flags = [True] * n
    for m in kernel.out_mappings:
        mine = projected_axes(m, n)
        flags = [f and a in mine for a, f in enumerate(flags)]
    return tuple(flags)


def check_prefetch_refs(kernel: KernelIR, uses) -> None:
    """Prefetched operands are XLA's input buffers, read-only here: refuse writes.
    ``uses``: a ``schedule.RefUse`` per scalar-prefetch operand."""
    for k, use in enumerate(uses):
        if use.writes:
            where = _first_write(kernel, k)
            raise TritonCapabilityError(
                f"Kernel '{kernel.name}' writes scalar-prefetch operand {k} at {where}. The "
                "Triton backend passes prefetched operands as the caller's read-only "
                "buffers, so writes to them are not supported: copy the values into "
                "scratch or an output and write there.")


def _first_write(kernel, k) -> str:
    target = _open(kernel.jaxpr).invars[len(kernel.grid) + k]
    for eqn in _open(kernel.jaxpr).eqns:
        if eqn.primitive.name in ("swap", "addupdate") and eqn.invars[0] is target:
            return source_line(eqn) or kernel.source
    return kernel.source


def reads_prefetch(mapping, num_grid: int) -> bool:
    """Whether ``mapping``'s index map reads a scalar-prefetch Ref."""
    used = used_vars(mapping.index_map)
    return any(v in used for v in _open(mapping.index_map).invars[num_grid:])


def check_block_index(index, bound, what, *grid_point):
    """Raises unless 0 <= ``index`` < ``bound``; runs inside Triton's interpreter,
    where values are NumPy-backed tensors (or Python ints in loops)."""
    value = _host_int(index)
    if 0 <= value < bound:
        return
    point = tuple(_host_int(p) for p in grid_point)
    raise IndexError(f"{what} selected block {value} at grid point {point}; its valid "
                     f"block indices are 0..{bound - 1}. Keep the prefetched indices within "
                     "the array (JAX's GPU and TPU code would read or write past it).")


def _host_int(x) -> int:
    import numpy as np
    data = getattr(getattr(x, "handle", None), "data", x)
    return int(np.asarray(data).reshape(()))
