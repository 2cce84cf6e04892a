"""The SparseCore CPU model's machinery beyond single ops: its NumPy fast
path for elementwise primitives (against JAX's own results), pipelines,
semaphores and indirect DMAs inside SparseCore kernels (against NumPy)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu
import pallas_tpu.tpu_sc as plsc
from pallas_tpu import sc_host_ops

INFO = plsc.get_sparse_core_info()
L, NS = INFO.num_lanes, INFO.num_subcores
RNG = np.random.default_rng()


def _operand(dtype, shape):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return RNG.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return RNG.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    x = np.asarray(RNG.standard_normal(shape) * 1e3).astype(dtype)
    if x.size > 1:
        x.flat[0], x.flat[1] = np.nan, -0.0
    return x


_BINARY = {"add": jax.lax.add, "sub": jax.lax.sub, "mul": jax.lax.mul, "max": jax.lax.max,
           "min": jax.lax.min, "and": jax.lax.bitwise_and, "or": jax.lax.bitwise_or,
           "eq": jax.lax.eq, "ne": jax.lax.ne, "lt": jax.lax.lt, "ge": jax.lax.ge,
           "rem": jax.lax.rem, "div": jax.lax.div}


@pytest.mark.parametrize("dtype", ["int32", "uint32", "int8", "float32", "bool"])
@pytest.mark.parametrize("op", sorted(_BINARY))
def test_fast_path_equals_jax(op, dtype):
    """Each op the fast path takes gives XLA's bits (wrap-around, C division,
    NaN and -0.0 included); the ops it must not take are left to JAX."""
    if dtype == "bool" and op in ("add", "sub", "mul", "rem", "div"):
        pytest.skip("not a bool op in lax")
    if dtype == "float32" and op in ("and", "or"):
        pytest.skip("not a float op in lax")
    fn = _BINARY[op]
    for shape in ((), (L,)):
        a, b = _operand(dtype, shape), _operand(dtype, shape)
        if op in ("rem", "div"):
            b = np.where(b == 0, 1, b).astype(dtype)
        eqn = jax.make_jaxpr(fn)(a, b).eqns[0]
        got = sc_host_ops.evaluate(eqn, [a, b])
        want = np.asarray(fn(a, b))
        if dtype == "float32" and op in ("rem", "div"):
            assert got is None
            continue
        assert got is not None, (op, dtype)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got.reshape(-1).view(np.uint8), want.reshape(-1).view(np.uint8))


def test_fast_path_leaves_zero_divisors_and_conversions_to_jax():
    a = np.array([7, -7], np.int32)
    b = np.array([0, 2], np.int32)
    assert sc_host_ops.evaluate(jax.make_jaxpr(jax.lax.rem)(a, b).eqns[0], [a, b]) is None
    f = np.array([1e10, np.nan], np.float32)
    eqn = jax.make_jaxpr(lambda x: x.astype(jnp.int32))(f).eqns[0]
    assert sc_host_ops.evaluate(eqn, [f]) is None


@pytest.mark.parametrize("case", [0, 1, 2])
def test_fast_path_select_and_convert(case):
    p = RNG.random(L) < 0.5
    x, y = _operand("int32", (L,)), _operand("int32", (L,))
    fns = [lambda p, x, y: jax.lax.select(p, x, y),
           lambda p, x, y: p.astype(jnp.int32) + x.astype(jnp.float32).astype(jnp.int32) * 0,
           lambda p, x, y: jnp.where(x > y, x.astype(jnp.uint8), y.astype(jnp.uint8))]
    jaxpr = jax.make_jaxpr(fns[case])(p, x, y)
    env = dict(zip(jaxpr.jaxpr.invars, [p, x, y]))
    for eqn in jaxpr.eqns:
        vals = [env[v] if not hasattr(v, "val") else v.val for v in eqn.invars]
        out = sc_host_ops.evaluate(eqn, vals)
        if out is None:
            out = eqn.primitive.bind(*vals, **eqn.params)
            out = out[0] if eqn.primitive.multiple_results else out
        env[eqn.outvars[0]] = np.asarray(out)
    np.testing.assert_array_equal(env[jaxpr.jaxpr.outvars[0]], np.asarray(fns[case](p, x, y)))
