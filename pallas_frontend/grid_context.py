"""Which grid point the kernel being traced stands at: the state behind
``pl.program_id`` / ``pl.num_programs``, installed by the tracer around a kernel
body and by a backend around a body it traces itself (a pipeline's inner grid).

A leaf: it imports nothing of the frontend, so ``primitives`` (the user's side)
and ``backend_helpers`` (the contract's side) can both hold it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from typing import Any


@dataclasses.dataclass
class GridContext:
    indices: tuple[Any, ...]          # traced int32 scalars, one per user grid axis
    sizes: tuple[Any, ...]
    names: tuple[str, ...] | None


_local = threading.local()


@contextlib.contextmanager
def grid_context(indices, sizes, names):
    """Inside, ``pl.program_id(a)`` is ``indices[a]`` and ``pl.num_programs(a)`` ``sizes[a]``."""
    prev = getattr(_local, "grid", None)
    _local.grid = GridContext(tuple(indices), tuple(sizes), names)
    try:
        yield
    finally:
        _local.grid = prev


def current_grid() -> GridContext | None:
    """The innermost grid installed on this thread, or None outside every kernel body."""
    return getattr(_local, "grid", None)


@contextlib.contextmanager
def kernel_params(params):
    """Inside, ``current_kernel_params()`` is ``params``: the compiler params of
    the kernel whose body the tracer is tracing."""
    prev = getattr(_local, "params", None)
    _local.params = params
    try:
        yield
    finally:
        _local.params = prev


def current_kernel_params():
    """The compiler params of the innermost kernel being traced on this thread
    (None outside a kernel trace, or for a kernel given none)."""
    return getattr(_local, "params", None)
