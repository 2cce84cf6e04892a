"""The only module of pallas_tpu that touches JAX internals (``jax._src``).

- Read/write effects on Ref operands: JAX has no public constructor for them,
  and a stateful kernel primitive must declare them so that tracing and
  discharge treat it as touching those Refs.
- ``AbstractDevice``: JAX's ``emit_pipeline`` asks the *context* mesh which
  TPU it targets; on a CPU host (AOT compilation, TPU interpret mode) we must
  name one ourselves.
"""

from __future__ import annotations

from jax._src.state import types as _state_types


def read_effect(input_index: int):
    return _state_types.ReadEffect(input_index)


def write_effect(input_index: int):
    return _state_types.WriteEffect(input_index)


def abstract_tpu_device(device_kind: str = "TPU v5 lite", num_cores: int = 1):
    from jax._src.mesh import AbstractDevice
    return AbstractDevice(device_kind=device_kind, num_cores=num_cores, platform="tpu")


def trace_with_explicit_consts(fn, in_avals):
    """Traces ``fn(*in_avals) -> list`` into ``(jaxpr, consts)`` where the
    jaxpr takes ``*consts, *args``: values ``fn`` closes over (possibly tracers
    of an enclosing kernel trace) become explicit operands."""
    from jax._src import api_util
    from jax._src import linear_util as lu
    from jax._src.interpreters import partial_eval as pe
    dbg = api_util.debug_info("pallas_tpu.emit_pipeline", fn, tuple(in_avals), {})
    jaxpr, _, consts = pe.trace_to_jaxpr_dynamic(lu.wrap_init(fn, debug_info=dbg), list(in_avals))
    consts = list(consts) if consts else list(getattr(jaxpr, "consts", ()) or ())
    jaxpr = pe.convert_constvars_jaxpr(jaxpr.with_consts(()) if hasattr(jaxpr, "with_consts")
                                       else jaxpr)
    return jaxpr, consts
