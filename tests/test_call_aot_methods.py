"""``pallas_call(...)`` returns what JAX's returns, a jitted function: code
written for JAX calls ``.lower(*args)`` (then ``.compile()``), ``.trace(*args)``
or ``.eval_shape(*args)`` on it (JAX's TPU test_automatic_single_buffering
compiles kernels with ``pallas_call(...).lower().compile()``)."""

import jax
import jax.numpy as jnp
import numpy as np

import pallas_frontend as pl


def _scaled_add(rows):
    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = 3.0 * x_ref[...] - y_ref[...]
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((rows, 128), jnp.float32),
                          grid=(rows // 8,), in_specs=[spec, spec], out_specs=spec,
                          interpret=True)


def _operands(rng, rows):
    return [jnp.asarray(rng.standard_normal((rows, 128)), jnp.float32) for _ in range(2)]


def test_lower_then_compile_runs_the_kernel(rng):
    rows = 8 * int(rng.integers(1, 5))
    x, y = _operands(rng, rows)
    call = _scaled_add(rows)
    compiled = call.lower(x, y).compile()
    want = 3.0 * np.asarray(x, np.float64) - np.asarray(y, np.float64)
    np.testing.assert_allclose(np.asarray(compiled(x, y)), want, rtol=1e-6, atol=1e-6)
    # the same program jax.jit lowers
    assert call.lower(x, y).as_text() == jax.jit(call).lower(x, y).as_text()


def test_lower_of_an_operandless_kernel(rng):
    n = 128 * int(rng.integers(1, 4))
    value = float(rng.standard_normal())

    def fill(o_ref):
        o_ref[...] = jnp.full(o_ref.shape, value, o_ref.dtype)
    call = pl.pallas_call(fill, out_shape=jax.ShapeDtypeStruct((8, n), jnp.float32),
                          interpret=True)
    out = call.lower().compile()()
    np.testing.assert_array_equal(np.asarray(out), np.full((8, n), np.float32(value)))


def test_trace_and_eval_shape(rng):
    rows = 8 * int(rng.integers(1, 5))
    x, y = _operands(rng, rows)
    call = _scaled_add(rows)
    traced = call.trace(x, y)
    assert str(traced.jaxpr).count("pallas_call[") == 1
    out = call.eval_shape(x, y)
    assert (out.shape, out.dtype) == ((rows, 128), jnp.float32)


def test_wrappers_of_the_call_are_traced_through_the_wrapper(rng):
    # jax.vmap's wrapper copies a function's attributes (functools.wraps), and
    # jax.make_jaxpr traces anything with a `trace` attribute through it: the
    # methods must not travel, or the vmapped call would be traced unbatched
    rows, batch = 8, int(rng.integers(2, 5))
    x, y = (jnp.asarray(rng.standard_normal((batch, rows, 128)), jnp.float32) for _ in range(2))
    batched = jax.vmap(_scaled_add(rows))
    assert not hasattr(batched, "trace")
    jaxpr = jax.make_jaxpr(batched)(x, y)
    assert str(jaxpr).count("pallas_call[") == 1
    want = 3.0 * np.asarray(x, np.float64) - np.asarray(y, np.float64)
    np.testing.assert_allclose(np.asarray(batched(x, y)), want, rtol=1e-6, atol=1e-6)
