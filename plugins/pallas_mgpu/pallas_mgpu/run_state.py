"""``pl.run_state`` in Mosaic GPU kernels, as JAX's kernels use it:
``pl.run_state(f)(plgpu.ACC.init(acc))`` runs ``f`` on a WGMMA accumulator
that starts as ``acc`` and returns its final value.

The frontend traces ``run_state`` into JAX's ``run_state`` equation over
this plugin's Refs; the backend replays it with ``pl.run_state`` over JAX's
types (``plgpu.ACC.init``), its body replaying the traced one.
"""

from __future__ import annotations

from pallas_mgpu import _jax_private, evaluate
from pallas_mgpu.memory import WGMMAAccumulatorRef


def _replay(eqn, invals):
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import mosaic_gpu as plgpu
    jaxpr = eqn.params["jaxpr"]
    values = iter(invals)
    start, closed = [], {}
    for k, (var, given) in enumerate(zip(jaxpr.invars, eqn.params["is_initialized"])):
        space = var.aval.memory_space
        value = next(values) if given else None
        if isinstance(space, WGMMAAccumulatorRef):
            start.append(plgpu.ACC.init(value) if given else space.to_jax())
        elif evaluate._is_ref(value):
            # a kernel Ref the body closed over: closed over again (handing it to
            # run_state would make a Ref holding a Ref)
            closed[k] = value
        elif given:
            start.append(value)
        else:
            raise NotImplementedError(
                "pallas_mgpu: pl.run_state with an uninitialized Ref other than a WGMMA "
                f"accumulator ({var.aval}); pass its initial value.")

    def body(refs):
        it = iter(refs)
        evaluate.eval_jaxpr(jaxpr, (), *[closed[k] if k in closed else next(it)
                                         for k in range(len(jaxpr.invars))])
    finals = iter(pl.run_state(body)(start))
    return [closed[k] if k in closed else next(finals) for k in range(len(jaxpr.invars))]


evaluate.register_rule(_jax_private.run_state_primitive(), _replay)
