"""The emitter of ``dot_general``: a 2-D ``tl.dot``, with JAX's precision mapped to
Triton's input precision."""

from __future__ import annotations

import numpy as np

from pallas_triton import padding
from pallas_triton.emitters import in_aval, out_aval, register
from pallas_triton.jaxpr_text import tl_dtype


@register("dot_general")
def _dot_general(w, eqn, ins):
    from pallas_triton.errors import unsupported
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    la, ra = in_aval(eqn, 0), in_aval(eqn, 1)
    if lb or rb or la.ndim != 2 or ra.ndim != 2:
        raise unsupported("dot_general other than a 2-D matrix product (no batch dims)")
    # padded contraction lanes hold unspecified data (maybe NaN): 0 there on both sides
    a = padding.fill_padding(w, ins[0], la.shape, lc, "0")
    b = padding.fill_padding(w, ins[1], ra.shape, rc, "0")
    widened = w.target == "interpret" and np.dtype(la.dtype).name in ("bfloat16", "float16")
    if widened:
        # Triton's interpreter multiplies 16-bit floats as their raw bits (garbage, not an
        # error); float32 operands give the GPU's result: 16-bit products are exact in
        # float32 and tl.dot accumulates in float32 there too.
        a, b = f"{a}.to(tl.float32)", f"{b}.to(tl.float32)"
    if tuple(lc) == (0,):
        a = f"tl.trans({a})"
    if tuple(rc) == (1,):
        b = f"tl.trans({b})"
    m = padding.size(la.shape[1 - lc[0]])
    n = padding.size(ra.shape[1 - rc[0]])
    k = padding.size(la.shape[lc[0]])
    if min(m, n, k) < 16:
        raise unsupported(f"a dot of shape ({m}x{k}) @ ({k}x{n}): tl.dot needs every dim >= 16")
    out = np.dtype(out_aval(eqn).dtype)
    acc = "tl.int32" if np.issubdtype(la.dtype, np.integer) else "tl.float32"
    extra = ""
    if widened:
        extra = ", input_precision='ieee'"        # exact: 16-bit values fit tf32 anyway
    elif np.dtype(la.dtype) == np.float32:
        precision = eqn.params.get("precision")
        highest = precision is not None and "HIGHEST" in str(precision)
        high = precision is not None and not highest and "HIGH" in str(precision)
        choice = "ieee" if highest else "tf32" if high else w.dot_input_precision
        extra = f", input_precision={choice!r}"
    expr = f"tl.dot({a}, {b}, out_dtype={acc}{extra})"
    if tl_dtype(out) != acc:
        from pallas_triton.widening import cast
        expr = cast(w, expr, acc[3:], out)
    return [expr]
