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
def _thread_state(name: str, value):
    """``_local.<name>`` is ``value`` inside; the outer value returns after."""
    prev = getattr(_local, name, None)
    setattr(_local, name, value)
    try:
        yield
    finally:
        setattr(_local, name, prev)


def grid_context(indices, sizes, names):
    """Inside, ``pl.program_id(a)`` is ``indices[a]`` and ``pl.num_programs(a)`` ``sizes[a]``."""
    return _thread_state("grid", GridContext(tuple(indices), tuple(sizes), names))


def current_grid() -> GridContext | None:
    """The innermost grid installed on this thread, or None outside every kernel body."""
    return getattr(_local, "grid", None)


def kernel_params(params):
    """Inside, ``current_kernel_params()`` is ``params``: the compiler params of
    the kernel whose body the tracer is tracing."""
    return _thread_state("params", params)


def current_kernel_params():
    """The compiler params of the innermost kernel being traced on this thread
    (None outside a kernel trace, or for a kernel given none)."""
    return getattr(_local, "params", None)
