"""``annotate(ref, ...)``: Mosaic memory-access assumptions on a Ref or a
view, JAX's ``pltpu`` name.

The assumptions (no stores, no bank conflicts, a short or no read-after-write
hazard) only let Mosaic schedule the kernel's loads and stores differently;
they never change what a load returns. The view carries JAX's own transform,
so the kernel replayed on a TPU is lowered by JAX's rule (the hints reach
Mosaic) and the built-in interpreter, which reads through it, ignores it. JAX's
TPU interpret mode (0.12.0.1) cannot read through it: there it fails as it
does under JAX.
"""

from __future__ import annotations

import jax

from pallas_tpu import _jax_private
from pallas_tpu.memory import MemorySpace


def annotate(ref, *, no_store: bool = False, no_bank_conflict: bool = False,
             no_hazard: bool = False, no_hazard_no_deps: bool = False):
    """``ref`` (a Ref or ``ref.at[...]``) viewed with the given access
    assumptions, merged with those already on the view. ``no_bank_conflict``
    goes with at most one of the others; the hazard overrides need a Ref
    declared in ``VMEM``."""
    flags = dict(no_store=no_store, no_bank_conflict=no_bank_conflict, no_hazard=no_hazard,
                 no_hazard_no_deps=no_hazard_no_deps)
    base = ref.ref if hasattr(ref, "transforms") and hasattr(ref, "ref") else ref
    if not isinstance(jax.typeof(base), jax.ref.AbstractRef):
        raise TypeError(f"pallas_tpu.annotate: ref must be a Ref or a view of one, got "
                        f"{jax.typeof(base)}.")
    space = jax.typeof(base).memory_space
    if (no_hazard or no_hazard_no_deps) and space is not MemorySpace.VMEM:
        raise ValueError(f"pallas_tpu.annotate: no_hazard / no_hazard_no_deps hold only for a "
                         f"Ref declared in VMEM (pltpu.VMEM scratch or "
                         f"BlockSpec(memory_space=pltpu.VMEM)), this one is in {space}; "
                         "as in JAX.")
    new, transform_type = _jax_private.access_assumption_transform(**flags)
    transforms = tuple(getattr(ref, "transforms", ()))
    kept = []
    for t in transforms:
        if isinstance(t, transform_type):
            new = transform_type(t.assumption.union(new.assumption))
        else:
            kept.append(t)
    return _jax_private.transformed_ref(base, (*kept, new))
