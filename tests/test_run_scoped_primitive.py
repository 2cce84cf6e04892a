"""``pl.run_scoped`` binds one ``run_scoped`` equation holding the body's
jaxpr, as JAX's does: the allocated Refs are that jaxpr's inputs, so their
effects stay inside it, and the kernel's jaxpr shows the scope as one line
(JAX's tests print it). Before a backend sees the kernel the scope is in its
flat form (``empty_ref`` ... ``free_ref``), nested bodies included; results
are compared with NumPy in float64 on fresh random data."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
from pallas_frontend import _jax_compat as jc
from pallas_frontend.backend_api import _iter_equations

from fast_interp_helpers import kernel_ir


def _trace(fun, avals):
    jaxpr, _ = jc.trace_kernel_jaxpr(fun, avals, traced_for="test")
    return getattr(jaxpr, "jaxpr", jaxpr)


def _ref(shape=(8,)):
    return jc.AbstractRef(jc.kernel_aval(shape, jnp.float32))


def test_one_equation_whose_effects_leave_out_the_allocated_refs():
    def kernel(x_ref, y_ref):
        def body(tmp):
            tmp[...] = jnp.ones_like(tmp)
            x_ref[...] = 4 * y_ref[...] + tmp[...]
        pl.run_scoped(body, pl.ANY((8,), jnp.float32))
        return []
    jaxpr = _trace(kernel, [_ref(), _ref()])
    assert [e.primitive.name for e in jaxpr.eqns] == ["run_scoped"]
    (eqn,) = jaxpr.eqns
    body = eqn.params["jaxpr"]
    assert eqn.params["num_consts"] == 2 and len(body.invars) == 3   # x, y, then tmp
    assert {type(e).__name__ for e in body.effects} >= {"ReadEffect", "WriteEffect"}
    x, y = jaxpr.invars
    assert jaxpr.effects == {jc.state_types.ReadEffect(y), jc.state_types.WriteEffect(x)}
    assert "run_scoped[" in str(jaxpr) and "empty_ref" not in str(jaxpr)


def test_a_scope_that_allocates_nothing_reads_and_writes_through():
    def kernel(a_ref, b_ref):
        pl.run_scoped(lambda: b_ref.__setitem__(..., a_ref[...] * 2))
        return []
    jaxpr = _trace(kernel, [_ref(), _ref()])
    assert [e.primitive.name for e in jaxpr.eqns] == ["run_scoped"]
    a, b = jaxpr.invars
    assert jaxpr.effects == {jc.state_types.ReadEffect(a), jc.state_types.WriteEffect(b)}


def _nested(x_ref, o_ref):
    def outer(a):
        a[...] = x_ref[...] * 3.0

        def step(i, carry):
            def inner(b):
                b[...] = a[...] - x_ref[...] * i.astype(jnp.float32)
                return b[...].sum()
            return carry + pl.run_scoped(inner, pl.ANY(x_ref.shape, jnp.float32))
        total = jax.lax.fori_loop(0, 3, step, jnp.float32(0))
        o_ref[...] = a[...] + total
    pl.run_scoped(outer, pl.ANY(x_ref.shape, jnp.float32))


def _call(x):
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    return pl.pallas_call(_nested, jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(x.shape[0] // 8,),
                          in_specs=[spec], out_specs=spec, interpret=True)(x)


@pytest.mark.parametrize("checks", [False, True], ids=["plain", "jax_enable_checks"])
def test_backends_see_the_flat_form_in_loop_bodies_too(checks):
    # the free_ref marks a scoped buffer (a body's own jax.empty_ref has none)
    x = jnp.zeros((16, 128), jnp.float32)
    with jax.enable_checks(checks):
        names = [e.primitive.name for e in _iter_equations(kernel_ir(_call, x).jaxpr.jaxpr)]
    assert "run_scoped" not in names
    assert names.count("empty_ref") == 2
    assert names.count("free_ref") == 2


def test_nested_scopes_in_a_loop_compute_as_numpy(rng):
    x = rng.standard_normal((16, 128)).astype(np.float32)
    got = np.asarray(_call(x))
    xb = x.astype(np.float64).reshape(2, 8, 128)
    # per block: 3x + sum over i of sum(3x - i x) = 3x + sum(9x - 3x) = 3x + 6 sum(x)
    want = 3 * xb + 6 * xb.sum(axis=(1, 2), keepdims=True)
    np.testing.assert_allclose(got, want.reshape(16, 128), rtol=1e-4, atol=1e-3)


def test_partial_discharge_keeps_the_refs_not_asked_for(rng):
    def f(a_ref, b_ref):
        def scope(tmp):
            tmp[...] = b_ref[...] + 1
            a_ref[...] = tmp[...] * 2
            b_ref[...] = tmp[...] * 3
        pl.run_scoped(scope, pl.ANY((4,), jnp.float32))
        return []
    jaxpr = _trace(f, [_ref((4,)), _ref((4,))])
    from pallas_frontend.discharge import discharge_state
    out = discharge_state(jc.with_consts(jaxpr, []), should_discharge=[False, True])
    plain = getattr(out, "jaxpr", out)
    assert isinstance(plain.invars[0].aval, jc.AbstractRef)
    assert not isinstance(plain.invars[1].aval, jc.AbstractRef)
    assert plain.effects == {jc.state_types.WriteEffect(plain.invars[0])}
    b = rng.standard_normal(4).astype(np.float32)

    def run(b):
        a_ref = jax.new_ref(jnp.zeros(4, jnp.float32))
        (b_final,) = jc.eval_jaxpr(out, a_ref, b)
        return a_ref[...], b_final
    a_got, b_got = jax.jit(run)(b)
    np.testing.assert_allclose(a_got, (b.astype(np.float64) + 1) * 2, rtol=1e-6)
    np.testing.assert_allclose(b_got, (b.astype(np.float64) + 1) * 3, rtol=1e-6)

