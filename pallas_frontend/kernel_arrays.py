"""A ``KernelIR`` as plain JAX array code, for backends that lower through JAX.

Re-exported by the contract (``backend_api``), so that a backend can write its
own schedule (which grid points run where, how blocks move) without touching
Refs, the frontend's memory spaces or JAX's internals:

- ``kernel_body_fn(kernel)``: the body as a pure function of block arrays;
- ``block_window(mapping, *grid_ids)``: where a block sits at a grid point;
- ``scratch_structs(kernel)``: the scratch buffers as plain shapes and dtypes;
- ``replay_equations(jaxpr, env, rule)``: the equation loop of a backend that
  re-emits a kernel jaxpr in another Pallas dialect.

It imports no backend_api (which re-exports this module).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

import jax

from pallas_frontend import _jax_compat as jc
from pallas_frontend.discharge import discharge_kernel_body
from pallas_frontend.specs import Blocked, BoundedSlice

if TYPE_CHECKING:
    from pallas_frontend.contract import BlockMapping, KernelIR


def kernel_body_fn(kernel: KernelIR) -> Callable[..., list]:
    """The kernel body as a pure JAX function over arrays.

    ``fn(*program_ids, *ref_values) -> list`` takes one int32 scalar per grid
    axis (batch axes first), then the current value of every Ref operand in
    the kernel's order (scalar-prefetch operands, input blocks, output blocks,
    scratch buffers; blocks have ``BlockMapping.block_shape``, squeezed dims
    removed) and returns the new value of every Ref operand, in the same
    order. Refs and their memory spaces are gone, so ``fn`` traces under
    ``jax.jit``, ``lax.fori_loop``, ``vmap`` and any lowering. With a dynamic
    grid (API 1.4) the program ids are followed by the dynamic axes' sizes.
    """
    n_grid = kernel.num_index_operands
    n_refs = len(kernel.jaxpr.invars) - n_grid
    body = discharge_kernel_body(kernel.jaxpr, n_grid)

    def fn(*args):
        if len(args) != n_grid + n_refs:
            sizes = (f" (with {len(kernel.dynamic_grid_axes)} dynamic grid sizes)"
                     if kernel.dynamic_grid_axes else "")
            raise TypeError(f"kernel '{kernel.name}' body takes {n_grid} program ids{sizes} and "
                            f"{n_refs} Ref values, got {len(args)} arguments")
        return list(jc.eval_jaxpr(body, *args))
    return fn


def block_window(mapping: BlockMapping, *grid_ids, prefetch=()) -> tuple[list, list]:
    """``(starts, sizes)`` of ``mapping``'s block at grid point ``grid_ids``
    (int32 scalars, tracers allowed): per array dim, the element offset of the
    block and its valid extent (the block size, or a ``BoundedSlice``'s size).
    ``Element`` offsets are in the coordinates of the array padded by the
    dim's padding; ``prefetch`` are the scalar-prefetch operands, if any, as
    arrays (the values the launch received) or as Refs (``jax.new_ref``)."""
    index_map = mapping.index_map
    if prefetch and not any(jc.is_ref_value(p) for p in prefetch):
        # The index map reads the prefetch operands as Refs; discharge them to values.
        index_map = discharge_kernel_body(index_map, len(index_map.invars) - len(prefetch))
    outs = iter(jc.eval_jaxpr(index_map, *grid_ids, *prefetch))
    starts, sizes = [], []
    for dim in mapping.block_dims:
        value = next(outs)
        if isinstance(dim, Blocked):
            starts.append(value * dim.block_size)
            sizes.append(dim.block_size)
        elif isinstance(dim, BoundedSlice):
            starts.append(value)
            sizes.append(next(outs))
        else:   # Element and Squeezed: the index map returns the element offset
            starts.append(value)
            sizes.append(dim.block_size)
    return starts, sizes


def scratch_structs(kernel: KernelIR) -> list:
    """The kernel's scratch buffers as ``jax.ShapeDtypeStruct`` (no memory space)."""
    import jax
    return [jax.ShapeDtypeStruct(a.inner_aval.shape, a.inner_aval.dtype)
            for a in kernel.scratch_avals]


def replay_equations(jaxpr, env: dict, rule: Callable, *, start: int = 0,
                     open_scope: Callable | None = None) -> list:
    """Evaluates ``jaxpr.eqns[start:]`` one equation at a time and returns the
    values of ``jaxpr.outvars``: the loop a backend that re-emits a kernel
    jaxpr in another Pallas dialect needs, with what it does per equation left
    to it. (API 1.6)

    ``env`` maps the variables already bound (the caller binds constvars and
    invars) to values and receives every result. ``rule(eqn, invals)`` returns
    the equation's results as ``eqn.primitive.bind`` would (a list when the
    primitive has multiple results). Results bound to a ``DropVar`` are not
    kept. A scoped allocation (``empty_ref``) hands over the rest of the body:
    the result of ``open_scope(jaxpr, k, env)`` (``k`` its equation index; it
    typically binds the buffer and calls back with ``start=k + 1``) is
    returned; the matching ``free_ref`` equations are skipped. Each rule runs
    under its equation's named scopes (``jax.named_scope``)."""
    def read(atom):
        return atom.val if isinstance(atom, jc.Literal) else env[atom]

    eqns = jaxpr.eqns
    for k in range(start, len(eqns)):
        eqn = eqns[k]
        name = eqn.primitive.name
        if name == "free_ref":
            continue
        if name == "empty_ref":
            if open_scope is None:
                raise NotImplementedError(
                    "replay_equations met a scoped allocation (empty_ref) but no open_scope "
                    "was given: pass open_scope to lower pl.run_scoped.")
            return open_scope(jaxpr, k, env)
        with _named_scopes(eqn):      # named scopes reach the backend's trace
            outs = rule(eqn, [read(a) for a in eqn.invars])
        if not eqn.primitive.multiple_results:
            outs = [outs]
        for v, x in zip(eqn.outvars, outs):
            if not isinstance(v, jc.DropVar):
                env[v] = x
    return [read(a) for a in jaxpr.outvars]


def _named_scopes(eqn):
    """``eqn``'s ``jax.named_scope``s entered again, so what a rule binds carries
    them, as under JAX's eval_jaxpr (Mosaic makes trace regions of them)."""
    scopes = contextlib.ExitStack()
    info = getattr(eqn, "source_info", None)     # none on an equation-like stand-in
    for scope in (info.name_stack.stack if info is not None else ()):
        scopes.enter_context(jax.named_scope(scope.name))
    return scopes
