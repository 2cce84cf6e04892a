"""``pallas_tpu.load`` / ``store`` in the frontend's reference interpreter
(``interpret=True``).

JAX's ``pltpu.load`` and ``pltpu.store`` are its generic Ref read and write,
so JAX's ``interpret=True`` runs them (its TPU tests compare a compiled kernel
with the same kernel under ``interpret=True``). Ours are primitives of backend
``tpu``; these rules let the built-in interpreter run them too, through the
plugin contract (``register_interpret_rule``).

A view (``ref.at[...]``, ``ref.reshape``, ``ref.bitcast``) is read and written
with JAX's own meaning of each transform. A mask: a load's masked-off lanes
read as zero (on the chip they are unspecified; pallas_tpu's replay gives zero
too), a store leaves them as they were.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from pallas_frontend.backend_api import register_interpret_rule

from pallas_tpu import _jax_private
from pallas_tpu import primitives as tpu_prims


def _view(tree, args, k):
    """Part ``k``'s base position among ``args`` and its view transforms."""
    positions = jax.tree.unflatten(tree, list(range(len(args))))[k]
    part = jax.tree.unflatten(tree, list(args))[k]
    base = jax.tree.leaves(positions)[0]
    transforms = part[1] if isinstance(part, tuple) and len(part) == 2 else ()
    return base, transforms


def _load_rule(ctx, *args, tree, effect_spec, has_mask, shape, dtype):
    del ctx, effect_spec
    base, transforms = _view(tree, args, 0)
    value = _jax_private.read_view(args[base], transforms)
    if has_mask:
        mask = jax.tree.unflatten(tree, list(args))[1]
        value = jnp.where(mask, value, jnp.zeros_like(value))
    return [None] * len(args), value


def _store_rule(ctx, *args, tree, effect_spec, has_mask):
    del ctx, effect_spec
    base, transforms = _view(tree, args, 0)
    _, value, mask = jax.tree.unflatten(tree, list(args))
    if has_mask:
        value = jnp.where(mask, value, _jax_private.read_view(args[base], transforms))
    new = [None] * len(args)
    new[base] = _jax_private.write_view(args[base], transforms, value)
    return new, []


register_interpret_rule(tpu_prims.load_p, _load_rule)
register_interpret_rule(tpu_prims.store_p, _store_rule)
