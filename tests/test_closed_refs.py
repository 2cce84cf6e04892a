"""A kernel that closes over Refs of the surrounding program (``run_state``'s,
or ``jax.new_ref``) reads and updates them in place, as under JAX: they become
aliased operands (``closed_refs.py``). Checked against NumPy in the built-in
interpreter; the TPU compile is in plugins/pallas_tpu/tests/test_semaphore_operands.py."""

import jax
import jax.numpy as jnp
import numpy as np
from jax._src.state import discharge as state_discharge   # run_state, as JAX's tests use

import pallas_frontend as pl


def _update(x_ref, y_ref):
    """A call that reads ``x_ref`` and writes ``y_ref`` without being passed them."""
    def kernel(o_ref):
        y_ref[...] = x_ref[...] * 2.0
        o_ref[...] = x_ref[...] + 1.0
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x_ref.shape, x_ref.dtype))()


X = np.arange(8 * 128, dtype=np.float32).reshape(8, 128)


def test_run_state_refs_are_updated_in_place():
    @jax.jit
    def f(x):
        def body(refs):
            x_ref, y_ref = refs
            out = _update(x_ref, y_ref)
            y_ref[...] = y_ref[...] + out
        return state_discharge.run_state(body)((x, jnp.zeros_like(x)))[1]
    np.testing.assert_array_equal(f(X), X * 3 + 1)


def test_new_refs_are_updated_in_place():
    x_ref, y_ref = jax.new_ref(jnp.asarray(X)), jax.new_ref(jnp.zeros_like(X))
    out = _update(x_ref, y_ref)
    np.testing.assert_array_equal(out, X + 1)
    np.testing.assert_array_equal(y_ref[...], X * 2)
    np.testing.assert_array_equal(x_ref[...], X)


def test_closed_over_refs_come_first_as_aliased_pairs():
    def f(x):
        def body(refs):
            _update(*refs)
        return state_discharge.run_state(body)((x, jnp.zeros_like(x)))
    jaxpr = jax.make_jaxpr(f)(X)

    def kernels(j):
        for e in j.eqns:
            if "kernel" in e.params:
                yield e.params["kernel"]
            for sub in jax.extend.core.jaxprs_in_params(e.params):
                yield from kernels(sub)
    (ir,) = kernels(jaxpr.jaxpr)
    assert not ir.jaxpr.consts
    assert ir.input_output_aliases == ((0, 0), (1, 1))
    assert [m.array_shape for m in ir.in_mappings] == [(8, 128)] * 2
    assert len(ir.out_mappings) == 3 and ir.out_mappings[2].memory_space is None
    assert all(m.memory_space is pl.ANY for m in (*ir.in_mappings, *ir.out_mappings[:2]))
