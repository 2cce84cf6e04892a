"""Export helpers: ``pallas_export_experimental``, ``lower_as_mlir``, and the
``enable_poison_buffers`` switch (JAX's names, for code written against JAX)."""

from __future__ import annotations

import contextlib
import threading

import jax

from pallas_frontend import _jax_compat as jc

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
    return getattr(_local, "dynamic_shapes", False)


def lower_as_mlir(f, *args, dynamic_shapes: bool = False, device=None, static_argnames=(),
                  platforms=None, **kwargs) -> str:
    """``f(*args, **kwargs)`` exported with ``jax.export`` for ``platforms``
    (default ``["tpu"]``, as in JAX) and returned as MLIR text. The text is for
    reading and debugging: it carries no stability guarantee."""
    with pallas_export_experimental(dynamic_shapes):
        fn = jax.jit(f, device=device, static_argnames=static_argnames)
        exported = jax.export.export(fn, platforms=platforms or ["tpu"])(*args, **kwargs)
    return exported.mlir_module()
