"""backend_api.replay_equations: the equation loop backends re-emit kernels with
(API 1.6), checked against NumPy in float64 on fresh random data."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pallas_frontend import backend_api


def _bind(eqn, invals):
    return eqn.primitive.bind(*invals, **eqn.params)


def _run(closed, *args, rule=_bind, **kw):
    env = dict(zip(closed.jaxpr.constvars, closed.consts))
    env.update(zip(closed.jaxpr.invars, args))
    return backend_api.replay_equations(closed.jaxpr, env, rule, **kw)


def test_rebinding_every_equation_matches_numpy(rng):
    x = rng.standard_normal((5, 7)).astype(np.float32)
    w = rng.standard_normal((7, 3)).astype(np.float32)
    const = rng.standard_normal(3).astype(np.float32)

    def f(x, w):
        y = jnp.tanh(x @ w) + const          # a captured constant: a constvar
        return y * 2.0, jnp.argmax(y, axis=1), jnp.linalg.norm(x)
    closed = jax.make_jaxpr(f)(x, w)
    y, idx, norm = _run(closed, x, w)
    want = np.tanh(x.astype(np.float64) @ w.astype(np.float64)) + const
    np.testing.assert_allclose(np.asarray(y), want * 2.0, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(idx), np.argmax(want, axis=1))
    np.testing.assert_allclose(float(norm), np.linalg.norm(x.astype(np.float64)), rtol=1e-5)


def test_the_rule_decides_each_equation(rng):
    x = rng.standard_normal(9).astype(np.float32)
    closed = jax.make_jaxpr(lambda x: jnp.sin(x) + 1.0)(x)
    seen = []

    def rule(eqn, invals):
        seen.append(eqn.primitive.name)
        if eqn.primitive.name == "sin":
            return jnp.cos(invals[0])         # substituted
        return _bind(eqn, invals)
    (out,) = _run(closed, x, rule=rule)
    np.testing.assert_allclose(np.asarray(out), np.cos(x.astype(np.float64)) + 1.0, rtol=1e-6)
    assert seen == [e.primitive.name for e in closed.jaxpr.eqns]


def test_start_skips_the_equations_before_it(rng):
    x = rng.standard_normal(4).astype(np.float32)
    closed = jax.make_jaxpr(lambda x: jnp.exp(x) * 3.0)(x)
    jaxpr = closed.jaxpr
    exp_out = jaxpr.eqns[0].outvars[0]
    given = rng.standard_normal(4).astype(np.float32)
    env = {jaxpr.invars[0]: x, exp_out: given}
    (out,) = backend_api.replay_equations(jaxpr, env, _bind, start=1)
    np.testing.assert_allclose(np.asarray(out), given.astype(np.float64) * 3.0, rtol=1e-6)


class _FakePrimitive:
    def __init__(self, name):
        self.name, self.multiple_results = name, False


class _FakeEqn:
    def __init__(self, name):
        self.primitive, self.invars, self.outvars, self.params = _FakePrimitive(name), [], [], {}


class _FakeJaxpr:
    def __init__(self, *names):
        self.eqns, self.outvars = [_FakeEqn(n) for n in names], []


def test_a_scoped_allocation_hands_over_to_open_scope():
    jaxpr = _FakeJaxpr("free_ref", "empty_ref", "never_reached")
    calls = []

    def open_scope(j, k, env):
        calls.append(k)
        return ["scoped"]
    out = backend_api.replay_equations(jaxpr, {}, lambda e, v: pytest.fail(e.primitive.name),
                                       open_scope=open_scope)
    assert out == ["scoped"] and calls == [1]


def test_a_scoped_allocation_without_open_scope_raises():
    with pytest.raises(NotImplementedError, match="open_scope"):
        backend_api.replay_equations(_FakeJaxpr("empty_ref"), {}, _bind)


def test_results_bound_to_a_dropvar_are_not_kept(rng):
    from pallas_frontend import _jax_compat as jc
    value = rng.standard_normal(3)
    eqn = _FakeEqn("pair")
    eqn.primitive.multiple_results = True
    dropped = jc.DropVar(jax.core.ShapedArray((3,), jnp.float32))
    eqn.outvars = [dropped, "kept"]
    jaxpr = _FakeJaxpr()
    jaxpr.eqns, jaxpr.outvars = [eqn], ["kept"]
    env = {}
    (out,) = backend_api.replay_equations(jaxpr, env, lambda e, v: [-value, value])
    np.testing.assert_array_equal(out, value)
    assert dropped not in env and list(env) == ["kept"]
