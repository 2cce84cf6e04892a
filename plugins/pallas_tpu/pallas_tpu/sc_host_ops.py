"""The SparseCore CPU model's fast path: elementwise primitives on NumPy.

A kernel's control code (a pipeline's schedule: slot indices, conditions,
loop bounds) is hundreds of scalar int32 operations per step, each run once
per program; binding each as a JAX primitive costs tens of microseconds.
Here the primitives whose NumPy result is bit-for-bit XLA's (integer and
boolean arithmetic with wrap-around, comparisons, selects, float32 ``+ - *``,
``max``/``min``) are computed by NumPy instead. Anything else, and any case
whose result could differ (a division by zero, a float to int conversion,
other float types), returns ``None`` and is bound by JAX as before.
"""

from __future__ import annotations

import numpy as np

_INTS = frozenset(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8,
                                        np.uint16, np.uint32, np.uint64))
_BOOL = np.dtype(np.bool_)
_F32 = np.dtype(np.float32)
_EXACT = _INTS | {_BOOL}          # every elementwise op below is exact on these
_FLOAT_OK = _EXACT | {_F32}       # IEEE single ops XLA's CPU computes alike

_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum,
           "min": np.minimum, "and": np.bitwise_and, "or": np.bitwise_or,
           "xor": np.bitwise_xor}
_COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
            "gt": np.greater, "ge": np.greater_equal}


def _arrays(eqn, invals):
    """The operands as NumPy arrays of their jaxpr types (a literal may be a
    Python number), or None if one is not a plain value."""
    out = []
    for v, x in zip(eqn.invars, invals):
        dtype = getattr(v.aval, "dtype", None)
        if dtype is None or not isinstance(x, (np.ndarray, np.generic, int, float, bool)):
            return None
        try:
            dtype = np.dtype(dtype)
        except TypeError:         # an extended dtype (a PRNG key)
            return None
        if dtype not in _FLOAT_OK:
            return None
        out.append(np.asarray(x, dtype=dtype))
    return out


def evaluate(eqn, invals):
    """The outputs of ``eqn`` on ``invals`` by NumPy, or None where JAX must bind it."""
    name = eqn.primitive.name
    if eqn.primitive.multiple_results or len(eqn.outvars) != 1:
        return None
    xs = _arrays(eqn, invals)
    if xs is None:
        return None
    aval = eqn.outvars[0].aval
    out_dtype = np.dtype(getattr(aval, "dtype", None) or _BOOL)
    dtypes = {x.dtype for x in xs}
    with np.errstate(over="ignore"):
        if name in _BINARY and dtypes <= _FLOAT_OK and out_dtype in _FLOAT_OK:
            if out_dtype == _F32 and name in ("and", "or", "xor"):
                return None
            return _shaped(_BINARY[name](xs[0], xs[1]), aval)
        if name in _COMPARE and dtypes <= _FLOAT_OK:
            return _shaped(_COMPARE[name](xs[0], xs[1]), aval)
        if not dtypes <= _EXACT:
            if name == "select_n" and xs[0].dtype in _EXACT and {x.dtype for x in xs[1:]} <= _FLOAT_OK:
                return _select(xs, aval)
            if name == "convert_element_type" and xs[0].dtype == _F32 and out_dtype == _F32:
                return _shaped(xs[0], aval)
            return None
        if name == "select_n":
            return _select(xs, aval)
        if name == "not":
            return _shaped(np.invert(xs[0]), aval)
        if name == "neg" and out_dtype in _INTS:
            return _shaped(np.negative(xs[0]), aval)
        if name == "sign" and out_dtype in _INTS:
            return _shaped(np.sign(xs[0]), aval)
        if name == "convert_element_type" and out_dtype in _FLOAT_OK:
            if out_dtype == _BOOL:
                return _shaped(xs[0] != 0, aval)
            return _shaped(xs[0].astype(out_dtype), aval)
        if name in ("rem", "div") and out_dtype in _INTS:
            a, b = xs
            if np.any(b == 0):
                return None          # XLA's answer for a zero divisor stays XLA's
            a64, b64 = a.astype(np.int64), b.astype(np.int64)
            if out_dtype.kind == "u":
                q = a64 // b64
            else:                    # C division: the quotient rounds toward zero
                q = np.abs(a64) // np.abs(b64) * np.sign(a64) * np.sign(b64)
            return _shaped(q if name == "div" else a64 - q * b64, aval)
    return None


def _select(xs, aval):
    which, cases = xs[0], xs[1:]
    if which.dtype == _BOOL:
        which = which.astype(np.int32)
    if np.any((which < 0) | (which >= len(cases))):
        return None
    return _shaped(np.choose(which, np.broadcast_arrays(*cases)), aval)


def _shaped(value, aval):
    return np.asarray(value).astype(aval.dtype, copy=False).reshape(aval.shape)
