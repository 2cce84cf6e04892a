"""Math that Triton has only in the vendor libraries (libdevice on CUDA, ocml on ROCm).

The generated module imports ``triton.language.extra.libdevice``, which Triton
maps to the target's library when it compiles. Under Triton's interpreter the
same primitives call NumPy (``interpret_math.py``). JAX's Triton lowering calls
the same library functions.
"""

from __future__ import annotations

import numpy as np

from pallas_triton import padding
from pallas_triton.emitters import _python_number, in_aval, out_aval, register, tl_dtype
from pallas_triton.errors import unsupported
from pallas_triton.widening import computed_dtype

_LIBDEVICE = {"asin": "asin", "acos": "acos", "atan": "atan", "asinh": "asinh",
              "acosh": "acosh", "atanh": "atanh", "atan2": "atan2", "cbrt": "cbrt",
              "erf_inv": "erfinv", "nextafter": "nextafter",
              # (1 - e^-2|x|) / (1 + e^-2|x|) loses digits near 0 (1.6e-4 relative at 0.02)
              "tanh": "tanh"}
LIBDEVICE_IMPORT = "from triton.language.extra import libdevice"
NUMPY_IMPORT = "from pallas_triton.interpret_math import elementwise as _numpy_elementwise"


def _numpy(w, name, ins):
    w.imports.add(NUMPY_IMPORT)
    return f"_numpy_elementwise({name!r}, {', '.join(ins)})"


@register(*_LIBDEVICE)
def _library_float(w, eqn, ins):
    # approx_tanh falls back here off CUDA float32 (primitives.py): the exact tanh
    name = "tanh" if eqn.primitive.name == "triton_approx_tanh" else eqn.primitive.name
    if name == "nextafter" and np.dtype(in_aval(eqn).dtype).itemsize < 4:
        raise unsupported("nextafter on 16-bit floats (the next float32 is not the next "
                          "16-bit float; the vendor libraries have float32/float64 only)")
    if w.target == "interpret":
        return [_numpy(w, name, ins)]
    if name == "cbrt" and w.target == "rocm":      # ocml's cbrt is not in Triton's table
        return [_cbrt(w, ins[0])]
    w.imports.add(LIBDEVICE_IMPORT)
    return [f"libdevice.{_LIBDEVICE[name]}({', '.join(ins)})"]


def _cbrt(w, x):
    """sign(x) * |x|^(1/3): exp2/log2 to start, one Newton step to float32 accuracy."""
    a = w.bind(f"tl.abs({x})")
    y = w.bind(f"tl.exp2(tl.log2({a}) / 3.0)")
    y = w.bind(f"tl.where(({a} == 0) | ({a} == float('inf')), {a}, "
               f"{y} - ({y} * {y} * {y} - {a}) / (3.0 * {y} * {y}))")
    return f"tl.where({x} < 0, -{y}, {y})"


@register("population_count", "clz")
def _bit_count(w, eqn, ins):
    name = eqn.primitive.name
    if w.target == "interpret":
        return [_numpy(w, name, ins)]
    dt = np.dtype(out_aval(eqn).dtype)
    bits = dt.itemsize * 8
    # the libraries count 32- and 64-bit signed ints: move the bits there unchanged
    if bits == 64:
        x = f"({ins[0]}).to(tl.int64, bitcast=True)"
    else:
        x = f"({ins[0]}).to(tl.uint{bits}, bitcast=True).to(tl.int32)"  # zero-extended
        if bits == 32:
            x = f"({ins[0]}).to(tl.int32, bitcast=True)"
    w.imports.add(LIBDEVICE_IMPORT)
    fn = "popc" if name == "population_count" else "clz"
    count = f"libdevice.{fn}({x})"
    if fn == "clz" and bits < 32:
        count = f"({count} - {32 - bits})"          # the zero-extension's leading zeros
    return [f"({count}).to({tl_dtype(dt)})"]


@register("is_finite")
def _is_finite(w, eqn, ins):
    x = w.bind(ins[0])
    return [f"(({x} == {x}) & (tl.abs({x}) != float('inf')))"]


@register("pow")
def _pow(w, eqn, ins):
    """C's pow (negative bases with integral exponents, zeros, infinities), as XLA's."""
    x, y = ins
    xd, yd = np.dtype(in_aval(eqn, 0).dtype), np.dtype(in_aval(eqn, 1).dtype)
    if _python_number(x):            # a literal base: a tensor, so the result has its type
        dt = computed_dtype(w, eqn, out_aval(eqn).dtype)    # float32 for 16-bit floats
        x = w.bind(f"tl.full({padding.shape(out_aval(eqn).shape)}, {x}, {tl_dtype(dt)})")
    if w.target == "interpret":
        return [_numpy(w, "pow", [x, y])]
    if np.issubdtype(yd, np.integer):
        y = f"({y}).to(tl.int32)"            # pown/powi take an int32 exponent
    elif yd != xd:
        y = f"({y}).to({tl_dtype(out_aval(eqn).dtype)})"
    w.imports.add(LIBDEVICE_IMPORT)
    return [f"libdevice.pow({x}, {y})"]
