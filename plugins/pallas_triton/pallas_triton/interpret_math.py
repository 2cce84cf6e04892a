"""NumPy versions of the vendor-library math functions, for Triton's interpreter.

On a GPU the generated kernel calls libdevice/ocml (``math_library.py``);
Triton's interpreter has no vendor library ("extern_elementwise not supported
in interpreter mode"), so under it the generated code calls ``elementwise``
here instead: a plain Python function that the interpreted kernel calls like any
other, computing on the NumPy arrays that back the interpreter's tensors.
16-bit floats never reach it (widening.py hands it float32).
"""

from __future__ import annotations

import math

import numpy as np


def _clz(x: np.ndarray) -> np.ndarray:
    bits = x.dtype.itemsize * 8
    u = x.view(f"uint{bits}").astype(np.uint64)
    length = np.zeros(u.shape, np.int64)
    for b in range(bits):                      # bit_length, vectorised over the array
        length = np.where((u >> np.uint64(b)) != 0, b + 1, length)
    return (bits - length).astype(x.dtype)


def _popcount(x: np.ndarray) -> np.ndarray:
    u = x.view(f"uint{x.dtype.itemsize * 8}")
    return np.bitwise_count(u).astype(x.dtype)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _erf_inv(y: np.ndarray) -> np.ndarray:
    """Winitzki's closed form as the start, then Newton steps on erf(x) = y (float64)."""
    yd = y.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ln = np.log((1 - yd) * (1 + yd))
        a = 0.147
        t = 2 / (np.pi * a) + ln / 2
        x = np.sign(yd) * np.sqrt(np.sqrt(t * t - ln / a) - t)
        for _ in range(4):
            step = (_erf(x) - yd) / (2 / np.sqrt(np.pi) * np.exp(-x * x))
            x = np.where(np.isfinite(step), x - step, x)
    x = np.where(np.abs(yd) == 1, np.sign(yd) * np.inf, x)
    return np.where(np.abs(yd) > 1, np.nan, x).astype(y.dtype)


_FUNCTIONS = {
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "atan2": np.arctan2, "cbrt": np.cbrt,
    "nextafter": np.nextafter, "erf_inv": _erf_inv, "clz": _clz, "pow": np.power,
    "tanh": np.tanh,
    "population_count": _popcount,
}


# One-argument functions whose denormal input is read as zero. XLA on CPU computes in
# the processor's denormals-are-zero mode, and so do NumPy's AVX-512 loops; NumPy's
# loops for other processors (AMD EPYC Zen 2/3, any AVX2 host) call the C library,
# which returns a tiny input unchanged (asinh of the largest float32 denormal was that
# denormal there, +0.0 in XLA: issue 39). Flushed here, the result is the same on every
# host.
_DENORMAL_INPUT_AS_ZERO = frozenset({"asin", "acos", "atan", "asinh", "acosh", "atanh",
                                     "cbrt", "tanh"})


def _denormals_as_zero(x: np.ndarray) -> np.ndarray:
    if x.dtype.kind != "f":
        return x
    return np.where(np.abs(x) < np.finfo(x.dtype).tiny, np.copysign(0.0, x), x).astype(x.dtype)


def elementwise(name: str, *args):
    """``name`` applied to interpreter tensors (or Python numbers); an interpreter tensor."""
    from triton.runtime.interpreter import TensorHandle
    tensors = [a for a in args if hasattr(a, "handle")]
    like = tensors[0]
    np_dtype = like.handle.data.dtype
    data = [a.handle.data if hasattr(a, "handle") else np.asarray(a, np_dtype) for a in args]
    with np.errstate(all="ignore"):
        if name in _DENORMAL_INPUT_AS_ZERO:
            data = [_denormals_as_zero(d) for d in data]
        out = np.asarray(_FUNCTIONS[name](*data)).astype(np_dtype)
    return type(like)(TensorHandle(out, like.handle.dtype), like.type)
