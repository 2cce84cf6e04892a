"""``has_memory_space(ref, space)``: where a ``pl.ANY`` Ref actually lives,
JAX's ``pltpu`` name.

A ``pl.ANY`` operand is placed by Mosaic; on a TPU the answer is Mosaic's,
resolved when the kernel compiles (the replay calls JAX's function). The
interpreters have no placement to ask: there a ``pl.ANY`` Ref is in HBM, where
Mosaic leaves a ``pallas_call`` operand in ``pl.ANY`` (JAX's TPU interpret
mode has no rule for it at all).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

import pallas_frontend as pf
from pallas_frontend.backend_api import kernel_primitive, register_interpret_rule

from pallas_tpu import _jax_private, interpret_mode
from pallas_tpu.memory import MemorySpace

OWNER = "tpu"
_ANY = (pf.MemorySpace.ANY, MemorySpace.ANY)
_CONCRETE = (MemorySpace.HBM, MemorySpace.VMEM, MemorySpace.VMEM_SHARED, MemorySpace.SMEM,
             MemorySpace.CMEM)

has_memory_space_p = kernel_primitive("tpu_has_memory_space", owner=OWNER)
has_memory_space_p.def_abstract_eval(
    lambda ref, *, memory_space: jax.core.ShapedArray((), jnp.dtype(bool)))


def _interpreted(memory_space) -> jax.Array:
    return jnp.bool_(memory_space is MemorySpace.HBM)


def _interpret_rule(ctx, ref, *, memory_space):
    del ctx, ref
    return [None], _interpreted(memory_space)     # one result (not multiple_results)


register_interpret_rule(has_memory_space_p, _interpret_rule)


def has_memory_space(ref, memory_space) -> jax.Array:
    """A bool scalar: whether the ``pl.ANY`` Ref ``ref`` (or a view of it) is
    in ``memory_space`` (``HBM``, ``VMEM``, ``SMEM``, ...); for ``pl.when`` /
    ``lax.cond`` branches specialised to where Mosaic put the operand."""
    base = ref.ref if hasattr(ref, "transforms") and hasattr(ref, "ref") else ref
    aval = jax.typeof(base)
    if not isinstance(aval, jax.ref.AbstractRef):
        raise TypeError(f"pallas_tpu.has_memory_space: expected a Ref, got {aval}")
    if aval.memory_space not in _ANY:
        raise ValueError(f"pallas_tpu.has_memory_space: the Ref must be in pl.ANY (its space "
                         f"is decided by Mosaic), got {aval.memory_space}; a Ref in a named "
                         "space is there by construction.")
    if memory_space not in _CONCRETE:
        raise ValueError(f"pallas_tpu.has_memory_space: ask about a concrete space "
                         f"(pallas_tpu.HBM, VMEM, SMEM, ...), not {memory_space}.")
    return has_memory_space_p.bind(base, memory_space=memory_space)


def _replay(eqn, invals):
    space = eqn.params["memory_space"]
    if interpret_mode.active():
        return _interpreted(space)
    from pallas_tpu.spaces import block_memory_space
    return _jax_private.jax_pltpu("has_memory_space")(invals[0], block_memory_space(space))


def _register():
    from pallas_tpu import evaluate
    evaluate.register_rule(has_memory_space_p, _replay)


_register()
