"""The cache key of a generated kernel: a hash of everything its code depends on."""

from __future__ import annotations

import hashlib

import numpy as np
from jax.extend.core import Literal

from pallas_frontend.backend_api import KernelIR


def kernel_fingerprint(kernel: KernelIR, extra=()) -> str:
    """A hash of everything the generated code depends on: the KernelIR dump, every
    index-map jaxpr, the values of all constants and literals (the text of a jaxpr
    may abbreviate them), and ``extra`` (target, params)."""
    h = hashlib.sha256()
    h.update(kernel.pretty().encode())
    for m in kernel.mappings:
        h.update(str(m.index_map).encode())
        _hash_values(h, m.index_map)
    _hash_values(h, kernel.jaxpr)
    h.update(repr(extra).encode())
    return h.hexdigest()[:32]


def _hash_values(h, jaxpr) -> None:
    from jax.extend.core import jaxprs_in_params
    for const in getattr(jaxpr, "consts", ()):
        _hash_array(h, const)
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    for eqn in jaxpr.eqns:
        for v in eqn.invars:
            if isinstance(v, Literal):
                _hash_array(h, v.val)
        for sub in jaxprs_in_params(eqn.params):
            h.update(str(sub).encode())
            _hash_values(h, sub)


def _hash_array(h, value) -> None:
    try:
        arr = np.asarray(value)
    except Exception:  # noqa: BLE001  (not an array: its repr is all there is)
        h.update(repr(value).encode())
        return
    h.update(f"{arr.dtype}{arr.shape}".encode())
    h.update(np.ascontiguousarray(arr).tobytes())
