"""Loading generated Triton source, and running it under Triton's interpreter.

Generated modules never call Triton's standard-library ``@triton.jit``
helpers (``tl.sum``, ``tl.zeros``, ...): those are decorated when ``triton``
is imported, and only work in the interpreter if ``TRITON_INTERPRET=1`` was
set before that import. With our own helpers in the generated module, the
interpreter works whatever the process did first, and compile-only
(``triton.compile``) works in the same process.
"""

from __future__ import annotations

import itertools
import linecache
import threading

import numpy as np

_counter = itertools.count()
_lock = threading.Lock()


def load_module(source: str, kernel_name: str) -> dict:
    """Executes generated source; returns its namespace (functions are JITFunctions).

    Triton reads a kernel's source through ``inspect``, so the text is put in
    ``linecache`` under a unique pseudo file name.
    """
    with _lock:
        fname = f"<pallas_triton:{kernel_name}:{next(_counter)}>"
    linecache.cache[fname] = (len(source), None, source.splitlines(True), fname)
    namespace: dict = {"__name__": f"pallas_triton_generated.{kernel_name}"}  # Triton reads __module__
    exec(compile(source, fname, "exec"), namespace)
    return namespace


def interpreted(namespace: dict) -> dict:
    """A copy of the namespace whose @triton.jit functions run in Triton's interpreter."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction
    out = dict(namespace)
    for name, value in namespace.items():
        if isinstance(value, JITFunction):
            out[name] = InterpretedFunction(value.fn)
    # The kernel resolves helpers through its globals: point them at the interpreted ones.
    for value in out.values():
        if hasattr(value, "fn") and hasattr(value.fn, "__globals__"):
            value.fn.__globals__.update({k: v for k, v in out.items() if k != "__builtins__"})
    return out


class HostBuffer:
    """What Triton's interpreter needs of a tensor, over a NumPy array (no torch).

    Host and "device" memory are the same, so the storage-copy methods the
    interpreter calls are no-ops and writes land directly in the array.
    """

    def __init__(self, array: np.ndarray):
        if not array.flags.c_contiguous:
            raise ValueError("HostBuffer needs a C-contiguous array")
        self.array = array
        name = array.dtype.name
        self.dtype = name if name == "bfloat16" else array.dtype
        self.shape = array.shape

    def data_ptr(self):
        return self.array.ctypes.data

    def stride(self, dim=None):
        strides = tuple(s // self.array.itemsize for s in self.array.strides)
        return strides if dim is None else strides[dim]

    def untyped_storage(self):
        return self

    def cpu(self):
        return self

    def new_empty(self, *args, **kwargs):
        return self

    def set_(self, *args, **kwargs):
        return self

    def storage_offset(self):
        return 0

    def size(self):
        return self.array.shape

    def copy_(self, other):
        return self


def run_interpreted(kernel_fn, num_programs: int, buffers: list[np.ndarray]) -> None:
    """Launches ``kernel_fn`` (an InterpretedFunction) on a 1-D grid over host arrays."""
    kernel_fn[(num_programs,)](*[HostBuffer(b) for b in buffers])
