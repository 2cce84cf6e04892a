"""``trace_value`` and ``touch``: statements that change no value, JAX's
``pltpu`` names.

- ``trace_value(label, value)`` adds a scalar to the enclosing xprof trace
  scope on a TPU; the interpreters have no trace to add it to and drop it
  (as JAX's TPU interpret mode does).
- ``touch(ref)`` makes the kernel read and write ``ref`` there as far as the
  compiler's scheduling is concerned (a fake dependency); no data moves.

Each is a primitive owned by ``tpu``: on a TPU it is replayed as JAX's
function; the interpreters run it as the no-op it is for values.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from pallas_frontend.backend_api import (
    kernel_primitive, ref_effects, register_interpret_rule)

from pallas_tpu import interpret_mode

OWNER = "tpu"

trace_value_p = kernel_primitive("tpu_trace_value", owner=OWNER, multiple_results=True)
touch_p = kernel_primitive("tpu_touch", owner=OWNER, multiple_results=True)


# --- trace_value ---------------------------------------------------------------------

def _trace_value_abstract_eval(value, *, label):
    if value.shape != () or value.dtype not in (jnp.int32, jnp.float32):
        raise TypeError(f"pallas_tpu.trace_value({label!r}): the value must be an int32 or "
                        f"float32 scalar, got {value.dtype}{list(value.shape)}")
    return []


trace_value_p.def_abstract_eval(_trace_value_abstract_eval)
trace_value_p.def_impl(lambda value, *, label: [])
jax.interpreters.mlir.register_lowering(trace_value_p, lambda ctx, value, *, label: [])
register_interpret_rule(trace_value_p)


def trace_value(label: str, value) -> None:
    """Adds the scalar ``value`` (int32 or float32) to the enclosing xprof
    trace scope under ``label`` (on a TPU; the interpreters drop it)."""
    if not isinstance(label, str):
        raise TypeError(f"pallas_tpu.trace_value: label must be a str, got {label!r}")
    trace_value_p.bind(jnp.asarray(value), label=label)


# --- touch ------------------------------------------------------------------------------

def _base_ref(x):
    return x.ref if hasattr(x, "transforms") and hasattr(x, "ref") else x


touch_p.def_effectful_abstract_eval(lambda ref: ([], ref_effects(reads=[0], writes=[0])))


def _touch_interpret(ctx, ref):
    del ctx
    return [None], []          # the Ref keeps its value, nothing is returned


register_interpret_rule(touch_p, _touch_interpret)


def touch(ref) -> None:
    """A fake read-write dependency on ``ref`` (each Ref of a pytree; a view's
    whole Ref), for the compiler's scheduling; no data moves."""
    for leaf in jax.tree.leaves(ref, is_leaf=lambda x: hasattr(x, "transforms")):
        base = _base_ref(leaf)
        if not isinstance(jax.typeof(base), jax.ref.AbstractRef):
            raise TypeError(f"pallas_tpu.touch: expected Refs, got {jax.typeof(base)}")
        touch_p.bind(base)


# --- replay on TPU ------------------------------------------------------------------------

def _replay_trace_value(eqn, invals):
    if interpret_mode.active():
        return []
    from jax.experimental.pallas import tpu as jax_pltpu
    jax_pltpu.trace_value(eqn.params["label"], invals[0])
    return []


def _replay_touch(eqn, invals):
    if interpret_mode.active():      # JAX's TPU interpreter has no rule for it
        return []
    from jax.experimental.pallas import tpu as jax_pltpu
    jax_pltpu.touch(invals[0])
    return []


def _register():
    from pallas_tpu import evaluate
    evaluate.register_rule(trace_value_p, _replay_trace_value)
    evaluate.register_rule(touch_p, _replay_touch)


_register()
