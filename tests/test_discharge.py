"""The direct discharge of whole-Ref kernels (``discharge.discharge_state``)
against JAX's own ``discharge_state``: the same values on fresh random
operands, and JAX's path for every kernel outside the whole-Ref subset."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
from pallas_frontend import _jax_compat as jc
from pallas_frontend import discharge

jax_discharge = jc.state_discharge     # JAX's own


def _kernel_jaxpr(call, *args):
    outer = jax.make_jaxpr(call)(*args)
    eqns = list(outer.eqns)
    while eqns:
        eqn = eqns.pop()
        if eqn.primitive.name == "pallas_call":
            return eqn.params["kernel"]
        eqns += [e for j in jc.sub_jaxprs(eqn) for e in j.eqns]
    raise AssertionError("no pallas_call")


def _matmul_when():                   # a cond (pl.when) writing the output
    def body(a_ref, b_ref, o_ref):
        @pl.when(pl.program_id(2) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
        o_ref[...] += jnp.dot(a_ref[...], b_ref[...])
    spec = pl.BlockSpec((8, 8), lambda i, j, k: (i, j))
    return pl.pallas_call(body, jax.ShapeDtypeStruct((16, 16), jnp.float32), grid=(2, 2, 2),
                          in_specs=[spec, spec], out_specs=spec), 3, [(16, 16), (16, 16)]


def _cond_on_two_refs_with_scratch():  # a value read before the cond, two Refs written in it
    def body(x_ref, o_ref, acc_ref):
        old = acc_ref[...]

        @pl.when(pl.program_id(0) % 2 == 1)
        def _():
            acc_ref[...] = old * 2.0 + x_ref[...]
            o_ref[...] = acc_ref[...] - 1.0
        o_ref[...] = o_ref[...] + acc_ref[...]
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    return pl.pallas_call(body, jax.ShapeDtypeStruct((32, 128), jnp.float32), grid=(4,),
                          in_specs=[spec], out_specs=spec,
                          scratch_shapes=[pl.MemorySpace.ANY((8, 128), jnp.float32)]), \
        1, [(32, 128)]


def _sliced_reads():                   # partial reads and writes: JAX's discharge
    def body(x_ref, o_ref):
        o_ref[0:4, :] = x_ref[4:8, :] * 3.0
        o_ref[4:8, :] = x_ref[0:4, :]
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    return pl.pallas_call(body, jax.ShapeDtypeStruct((16, 128), jnp.float32), grid=(2,),
                          in_specs=[spec], out_specs=spec), 1, [(16, 128)]


@pytest.mark.parametrize("make, direct", [(_matmul_when, True),
                                          (_cond_on_two_refs_with_scratch, True),
                                          (_sliced_reads, False)])
def test_discharge_equals_jax(rng, monkeypatch, make, direct):
    call, n_grid, shapes = make()
    jaxpr = _kernel_jaxpr(call, *[jnp.zeros(s, jnp.float32) for s in shapes]).jaxpr
    should = [False] * n_grid + [True] * (len(jaxpr.invars) - n_grid)
    fell_back = []
    real = jax_discharge.discharge_state
    monkeypatch.setattr(jax_discharge, "discharge_state",
                        lambda *a, **k: fell_back.append(1) or real(*a, **k))
    ours = discharge.discharge_state(jaxpr, should_discharge=should, strip_memory_space=True)
    assert bool(fell_back) != direct
    if discharge.DISCHARGE_STRIPS_MEMORY_SPACE:
        theirs = real(jaxpr, should_discharge=should, strip_memory_space=True)
    else:    # JAX 0.10: a ClosedJaxpr in, Refs always become device arrays
        theirs = real(jc.with_consts(jaxpr, []), should_discharge=should)
    assert [v.aval for v in ours.invars] == [v.aval for v in theirs.invars]
    assert [v.aval for v in ours.outvars] == [v.aval for v in theirs.outvars]
    for _ in range(3):
        idx = [np.int32(rng.integers(0, 4)) for _ in range(n_grid)]
        vals = [jnp.asarray(rng.standard_normal(v.aval.shape), v.aval.dtype)
                for v in ours.invars[n_grid:]]
        for a, b in zip(jc.eval_jaxpr(ours, *idx, *vals), jc.eval_jaxpr(theirs, *idx, *vals)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

