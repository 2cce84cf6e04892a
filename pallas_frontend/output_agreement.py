"""Whether two results of a kernel agree: the check ``pl.autotune`` drops a
candidate with (other block sizes may sum in another order, so floats agree
within a tolerance of their dtype; everything else exactly).

The tolerance bounds the largest absolute difference relative to the expected
output's largest finite magnitude, so values near zero do not need their own
absolute tolerance; NaN and infinities must sit at the same places.
"""

from __future__ import annotations

import numpy as np

#: dtype name -> how far a result may be from the expected one, relative to the
#: expected output's largest magnitude (bfloat16: about 2.5 units in the last place)
TOLERANCE = {"float64": 1e-9, "float32": 1e-4, "float16": 2e-3, "bfloat16": 1e-2}
#: the tolerance of the other floats (float8 and the like)
LOW_PRECISION_TOLERANCE = 0.25


def mismatch(out, expected, tolerance: float | None = None, same_dtype: bool = True) -> str:
    """Why the pytree ``out`` is not ``expected`` (structure, shapes, dtypes
    unless not ``same_dtype``, or values beyond ``tolerance``, by default that
    of ``out``'s dtype); "" when it is."""
    import jax
    import jax.numpy as jnp
    got_leaves, got_tree = jax.tree.flatten(out)
    want_leaves, want_tree = jax.tree.flatten(expected)
    if got_tree != want_tree:
        return f"output structure {got_tree} is not {want_tree}"
    for i, (got, want) in enumerate(zip(got_leaves, want_leaves)):
        got, want = np.asarray(got), np.asarray(want)
        where = f"output {i}" if len(want_leaves) > 1 else "the output"
        if got.shape != want.shape or (same_dtype and got.dtype != want.dtype):
            return (f"{where} is {got.dtype}{list(got.shape)}, expected "
                    f"{want.dtype}{list(want.shape)}")
        if not jnp.issubdtype(got.dtype, jnp.inexact):
            if not np.array_equal(got, want):
                return f"{where} differs at {int(np.sum(got != want))} elements (exact dtype)"
            continue
        wide = np.complex128 if jnp.issubdtype(got.dtype, jnp.complexfloating) else np.float64
        g, w = got.astype(wide), want.astype(wide)
        same = (g == w) | (np.isnan(g) & np.isnan(w))     # equal infinities included
        if same.all():
            continue
        error = np.abs(g[~same] - w[~same])
        if not np.all(np.isfinite(error)):
            return f"{where} has NaN or infinity where the expected output has not (or reverse)"
        scale = float(np.max(np.abs(w[np.isfinite(w)]), initial=0.0))
        allowed = tolerance if tolerance is not None else TOLERANCE.get(
            got.dtype.name, LOW_PRECISION_TOLERANCE)
        if error.max() > allowed * max(scale, np.finfo(np.float64).tiny):
            return (f"{where} differs by {error.max():.3g} (largest magnitude {scale:.3g}, "
                    f"tolerance {allowed:g} of it)")
    return ""


def nan_count(out) -> int:
    """How many NaN elements the pytree of (host) arrays ``out`` holds: a result
    with more NaN than another's has read unwritten or out-of-range memory."""
    import jax
    import jax.numpy as jnp
    total = 0
    for leaf in jax.tree.leaves(out):
        a = np.asarray(leaf)
        if jnp.issubdtype(a.dtype, jnp.complexfloating):
            total += int(np.count_nonzero(np.isnan(a.astype(np.complex128))))
        elif jnp.issubdtype(a.dtype, jnp.floating):
            total += int(np.count_nonzero(np.isnan(a.astype(np.float64))))
    return total
