"""Whether two results of a kernel agree: the check ``pl.autotune`` drops a
candidate with (other block sizes may sum in another order, so floats agree
within a tolerance of their dtype; everything else exactly).

The tolerance bounds the largest absolute difference relative to the expected
output's largest finite magnitude, so values near zero do not need their own
absolute tolerance; NaN and infinities must sit at the same places.
"""

from __future__ import annotations

import functools

import numpy as np

#: dtype name -> how far a result may be from the expected one, relative to the
#: expected output's largest magnitude (bfloat16: about 2.5 units in the last place)
TOLERANCE = {"float64": 1e-9, "float32": 1e-4, "float16": 2e-3, "bfloat16": 1e-2}
#: the tolerance of the other floats (float8 and the like)
LOW_PRECISION_TOLERANCE = 0.25


def mismatch(out, expected, tolerance: float | None = None, same_dtype: bool = True) -> str:
    """Why the pytree ``out`` is not ``expected`` (structure, shapes, dtypes
    unless not ``same_dtype``, or values beyond ``tolerance``, by default that
    of ``out``'s dtype); "" when it is. Device arrays are compared where they
    are: only a few numbers come to the host (a 8192x8192 output each time
    ``pl.autotune`` checks a candidate would be 128 MiB or more)."""
    import jax
    import jax.numpy as jnp
    got_leaves, got_tree = jax.tree.flatten(out)
    want_leaves, want_tree = jax.tree.flatten(expected)
    if got_tree != want_tree:
        return f"output structure {got_tree} is not {want_tree}"
    for i, (got, want) in enumerate(zip(got_leaves, want_leaves)):
        got, want = _array(got), _array(want)
        where = f"output {i}" if len(want_leaves) > 1 else "the output"
        if got.shape != want.shape or (same_dtype and got.dtype != want.dtype):
            return (f"{where} is {got.dtype}{list(got.shape)}, expected "
                    f"{want.dtype}{list(want.shape)}")
        if not jnp.issubdtype(got.dtype, jnp.inexact):
            differ = _count_differing(got, want)
            if differ:
                return f"{where} differs at {differ} elements (exact dtype)"
            continue
        equal, finite, error, scale = _float_differences(got, want)
        if equal:
            continue
        if not finite:
            return f"{where} has NaN or infinity where the expected output has not (or reverse)"
        allowed = tolerance if tolerance is not None else TOLERANCE.get(
            np.dtype(got.dtype).name, LOW_PRECISION_TOLERANCE)
        if error > allowed * max(scale, np.finfo(np.float64).tiny):
            return (f"{where} differs by {error:.3g} (largest magnitude {scale:.3g}, "
                    f"tolerance {allowed:g} of it)")
    return ""


def nan_count(out) -> int:
    """How many NaN elements the pytree of arrays ``out`` holds: a result with
    more NaN than another's has read unwritten or out-of-range memory."""
    import jax
    import jax.numpy as jnp
    total = 0
    for leaf in jax.tree.leaves(out):
        a = _array(leaf)
        if not jnp.issubdtype(a.dtype, jnp.inexact):
            continue
        if _on_device(a):
            total += int(jnp.count_nonzero(jnp.isnan(a)))
        else:
            wide = np.complex128 if jnp.issubdtype(a.dtype, jnp.complexfloating) else np.float64
            total += int(np.count_nonzero(np.isnan(np.asarray(a).astype(wide))))
    return total


def _array(leaf):
    """A device array as it is; anything else as a NumPy array."""
    import jax
    return leaf if isinstance(leaf, jax.Array) else np.asarray(leaf)


def _on_device(a) -> bool:
    """Compared on its device: a JAX array of at most 32-bit real elements (what
    float32 holds exactly, or within far less than any tolerance here)."""
    import jax
    import jax.numpy as jnp
    return (isinstance(a, jax.Array) and np.dtype(a.dtype).itemsize <= 4
            and not jnp.issubdtype(a.dtype, jnp.complexfloating))


def _count_differing(got, want) -> int:
    if _on_device(got):
        import jax.numpy as jnp
        return int(jnp.count_nonzero(got != jnp.asarray(want, got.dtype)))
    got, want = np.asarray(got), np.asarray(want)
    return 0 if np.array_equal(got, want) else int(np.sum(got != want))


def _float_differences(got, want) -> tuple[bool, bool, float, float]:
    """(all equal, NaN and infinities in the same places, largest absolute
    difference elsewhere, largest finite magnitude of ``want``); equal
    infinities and NaN against NaN count as equal."""
    if _on_device(got):
        summary = _device_summary()(got, want)
        return tuple(t(v) for t, v in zip((bool, bool, float, float), summary))
    import jax.numpy as jnp
    got, want = np.asarray(got), np.asarray(want)
    wide = np.complex128 if jnp.issubdtype(got.dtype, jnp.complexfloating) else np.float64
    g, w = got.astype(wide), want.astype(wide)
    same = (g == w) | (np.isnan(g) & np.isnan(w))
    if same.all():
        return True, True, 0.0, 0.0
    error = np.abs(g[~same] - w[~same])
    finite = bool(np.all(np.isfinite(error)))
    scale = float(np.max(np.abs(w[np.isfinite(w)]), initial=0.0))
    return False, finite, float(error.max()) if finite else float("inf"), scale


@functools.cache
def _device_summary():
    import jax
    import jax.numpy as jnp

    @jax.jit
    def summary(got, want):
        g, w = got.astype(jnp.float32), jnp.asarray(want).astype(jnp.float32)
        same = (g == w) | (jnp.isnan(g) & jnp.isnan(w))
        error = jnp.where(same, 0.0, jnp.abs(g - w))
        scale = jnp.max(jnp.where(jnp.isfinite(w), jnp.abs(w), 0.0), initial=0.0)
        return same.all(), jnp.isfinite(error).all(), jnp.max(error, initial=0.0), scale
    return summary
