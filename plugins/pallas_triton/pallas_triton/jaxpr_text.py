"""Leaf helpers shared by code generation, the emitters and the scheduler.

They read jaxprs and write Python literals; they import nothing else from
pallas_triton, so ``codegen``, ``emitters`` and ``schedule`` can all use them
without importing one another in a cycle.
"""

from __future__ import annotations

import math

import numpy as np
from jax.extend.core import Literal

TL_DTYPES = {
    "float32": "tl.float32", "float16": "tl.float16", "bfloat16": "tl.bfloat16",
    "float64": "tl.float64", "int8": "tl.int8", "int16": "tl.int16", "int32": "tl.int32",
    "int64": "tl.int64", "uint8": "tl.uint8", "uint16": "tl.uint16", "uint32": "tl.uint32",
    "uint64": "tl.uint64", "bool": "tl.int1",
}


def tl_dtype(dtype) -> str:
    name = np.dtype(dtype).name
    if name not in TL_DTYPES:
        from pallas_triton.errors import unsupported
        raise unsupported(f"dtype {name} has no Triton equivalent")
    return TL_DTYPES[name]


def is_float(dtype) -> bool:
    return np.issubdtype(np.dtype(dtype), np.floating) or np.dtype(dtype).name == "bfloat16"


def used_vars(jaxpr) -> set:
    """Every variable read by an equation or returned, nested jaxprs included."""
    from jax.extend.core import jaxprs_in_params
    out = set()

    def walk(j):
        j = getattr(j, "jaxpr", j)
        for eqn in j.eqns:
            out.update(v for v in eqn.invars if not isinstance(v, Literal))
            for sub in jaxprs_in_params(eqn.params):
                walk(sub)
        out.update(v for v in j.outvars if not isinstance(v, Literal))
    walk(jaxpr)
    return out


def is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def literal(value, dtype) -> str:
    dtype = np.dtype(dtype)
    value = np.asarray(value).item()
    if dtype == np.dtype(bool):
        return "True" if value else "False"
    if is_float(dtype):
        text = repr(float(value)) if math.isfinite(value) else f"float('{value}')"
        return text if dtype == np.float32 else f"tl.full([], {text}, {tl_dtype(dtype)})"
    if dtype == np.uint64 and int(value) >= 2 ** 63:
        # past int64: Triton (and its interpreter) would make the Python int a float
        return f"tl.full([], {int(value) - 2 ** 64}, tl.int64).to(tl.uint64, bitcast=True)"
    return str(int(value)) if dtype == np.int32 else f"tl.full([], {int(value)}, {tl_dtype(dtype)})"


def padding_literal(dtype) -> str:
    """What an overhanging read gives: NaN / the lowest int, as in the frontend interpreter."""
    dtype = np.dtype(dtype)
    if is_float(dtype):
        return "float('nan')"
    if np.issubdtype(dtype, np.integer):
        return str(int(np.iinfo(dtype).min))
    return "False"


