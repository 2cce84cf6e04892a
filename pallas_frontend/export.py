"""Export helpers: ``pallas_export_experimental``, ``lower_as_mlir``, and the
``enable_poison_buffers`` switch (JAX's names, for code written against JAX)."""

from __future__ import annotations

import contextlib
import threading
import weakref

import jax

from pallas_frontend import _jax_compat as jc
from pallas_frontend.contract import Blocked

_local = threading.local()

#: JAX's config switch. The frontend interpreter always fills scratch and
#: unwritten outputs with poison (NaN / the lowest int), so it reads the same
#: either way; backends that allocate real memory may consult it.
enable_poison_buffers = jc.poison_buffers_flag


@contextlib.contextmanager
def pallas_export_experimental(dynamic_shapes: bool):
    """Within it, ``jax.export`` of a ``pallas_call`` may use symbolic dims
    (``dynamic_shapes=True``); the flag is read at trace time."""
    prev = getattr(_local, "dynamic_shapes", False)
    _local.dynamic_shapes = bool(dynamic_shapes)
    try:
        yield
    finally:
        _local.dynamic_shapes = prev


def dynamic_shapes_export_enabled() -> bool:
    """Ours or JAX's ``pallas_export_experimental(dynamic_shapes=True)`` is on:
    then blocks may have symbolic dims (JAX refuses them otherwise)."""
    return getattr(_local, "dynamic_shapes", False) or jc.jax_dynamic_shapes_export_enabled()


def is_runtime_size(g) -> bool:
    """Whether grid size ``g`` becomes a run-time operand (KernelIR.grid None):
    a traced size, or a symbolic one unless dynamic-shapes export keeps it in
    the grid (as JAX does)."""
    if isinstance(g, int):
        return False
    return not (jc.is_symbolic_dim(g) and dynamic_shapes_export_enabled())


# The symbolic sizes of a kernel's dynamic grid axes, by KernelIR (the contract's
# grid holds None there): the built-in interpreter proves block ranges with them.
_symbolic_grids: dict[int, tuple] = {}


def record_symbolic_grid(kernel, grid) -> None:
    """Notes ``grid`` (ints and ``jax.export`` symbolic dims; traced sizes
    become None) for ``kernel``."""
    grid = tuple(g if isinstance(g, int) or jc.is_symbolic_dim(g) else None for g in grid)
    if any(g is not None and not isinstance(g, int) for g in grid):
        key = id(kernel)
        _symbolic_grids[key] = grid
        weakref.finalize(kernel, _symbolic_grids.pop, key, None)


def symbolic_grid_of(kernel) -> tuple | None:
    """The grid recorded for ``kernel`` by ``record_symbolic_grid``, if any."""
    return _symbolic_grids.get(id(kernel))


def lower_as_mlir(f, *args, dynamic_shapes: bool = False, device=None, static_argnames=(),
                  platforms=None, **kwargs) -> str:
    """``f(*args, **kwargs)`` exported with ``jax.export`` for ``platforms``
    (default ``["tpu"]``, as in JAX) and returned as MLIR text. The text is for
    reading and debugging: it carries no stability guarantee."""
    with pallas_export_experimental(dynamic_shapes):
        fn = jax.jit(f, device=device, static_argnames=static_argnames)
        exported = jax.export.export(fn, platforms=platforms or ["tpu"])(*args, **kwargs)
    return exported.mlir_module()


def symbolic_blocked(dim, origin: str) -> Blocked:
    """``Blocked(dim)`` for a ``jax.export`` symbolic ``dim``: JAX's experimental
    dynamic-shapes export, refused (with JAX's message) unless switched on."""
    if not dynamic_shapes_export_enabled():
        raise ValueError(
            "shape polymorphism for Pallas does not support dynamically-shaped blocks. "
            f"Block spec for {origin} has a block dim {dim}. Give blocks static sizes (a "
            "symbolic grid such as pl.cdiv(n, 128) is fine) or, if this is intentional, use "
            "the pl.pallas_export_experimental(dynamic_shapes=True) context manager.")
    # The contract types block sizes as ints; a symbolic one exists only while
    # jax.export traces, so it bypasses the int check (a dim is >= 1 by construction).
    b = object.__new__(Blocked)
    object.__setattr__(b, "block_size", dim)
    return b
