"""Block-index range checks see the int32 values index maps really compute.

Index maps run on int32 grid indices, so their arithmetic wraps on overflow.
The trace-time evaluator (``block_indices.evaluate_index_map``) is compared
with an independent model written with Python integers wrapped to int32
after every operation, and that model with JAX itself on the host.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jax import lax

import pallas_frontend as pl
from pallas_frontend import _jax_compat as jc
from pallas_frontend import block_indices as bi

INT_MIN, INT_MAX = -2**31, 2**31 - 1


def wrap32(x: int) -> int:
    return (x - INT_MIN) % 2**32 + INT_MIN


# --- the independent model: one Python function per operation -----------------

def _div(a, b):
    if b == 0:
        return -1
    q = abs(a) // abs(b)
    return wrap32(-q if (a < 0) != (b < 0) else q)


def _rem(a, b):
    return a if b == 0 else wrap32(a - _div(a, b) * b)


def _shl(a, s):
    return wrap32(a << s) if 0 <= s < 32 else 0


def _sar(a, s):
    return a >> s if 0 <= s < 32 else (-1 if a < 0 else 0)


MODEL = {
    "add": lambda a, b: wrap32(a + b), "sub": lambda a, b: wrap32(a - b),
    "mul": lambda a, b: wrap32(a * b), "div": _div, "rem": _rem, "shl": _shl, "sar": _sar,
    "max": max, "min": min, "neg": lambda a: wrap32(-a), "abs": lambda a: wrap32(abs(a)),
    "where_lt": lambda a, b: a if a < b else b,
}
TRACED = {
    "add": lax.add, "sub": lax.sub, "mul": lax.mul, "div": lax.div, "rem": lax.rem,
    "shl": lax.shift_left, "sar": lax.shift_right_arithmetic, "max": lax.max, "min": lax.min,
    "neg": lax.neg, "abs": lax.abs, "where_lt": lambda a, b: jnp.where(a < b, a, b),
}
UNARY = ("neg", "abs")

interesting = st.one_of(
    st.integers(-8, 40), st.sampled_from([INT_MIN, INT_MIN + 1, INT_MAX, INT_MAX - 1, 2**30, -2**30]),
    st.integers(INT_MIN, INT_MAX))


def expressions(num_axes):
    leaf = st.one_of(st.tuples(st.just("axis"), st.integers(0, num_axes - 1)),
                     st.tuples(st.just("const"), interesting))

    def node(children):
        return st.one_of(
            st.tuples(st.sampled_from(UNARY), children),
            st.tuples(st.sampled_from(sorted(set(MODEL) - set(UNARY))), children, children))
    return st.recursive(leaf, node, max_leaves=6)


def evaluate_model(expr, point):
    kind = expr[0]
    if kind == "axis":
        return point[expr[1]]
    if kind == "const":
        return expr[1]
    return MODEL[kind](*(evaluate_model(e, point) for e in expr[1:]))


def evaluate_traced(expr, idx):
    kind = expr[0]
    if kind == "axis":
        return idx[expr[1]]
    if kind == "const":
        return np.int32(expr[1])
    return TRACED[kind](*(evaluate_traced(e, idx) for e in expr[1:]))


def index_map_jaxpr(exprs, num_axes):
    def fn(*idx):
        return [jnp.asarray(evaluate_traced(e, idx), jnp.int32) for e in exprs]
    jaxpr, _ = jc.trace_kernel_jaxpr(fn, [jc.ShapedArray((), jnp.int32)] * num_axes,
                                     traced_for="test index_map")
    return jaxpr


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_evaluator_matches_wrapping_int32_model(data):
    grid = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=2), label="grid"))
    exprs = data.draw(st.lists(expressions(len(grid)), min_size=1, max_size=2), label="exprs")
    jaxpr = index_map_jaxpr(exprs, len(grid))
    got = bi.evaluate_index_map(jaxpr, bi.grid_coordinates(grid), grid)
    for point in np.ndindex(*grid):
        for k, e in enumerate(exprs):
            assert int(got[k][point]) == evaluate_model(e, point), (e, point)


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(expr=expressions(1), n=st.integers(1, 5))
def test_model_matches_jax_on_the_host(expr, n):
    # The model is the semantics that run: check it against XLA itself.
    ran = jax.jit(jax.vmap(lambda i: jnp.asarray(evaluate_traced(expr, (i,)), jnp.int32)))(
        jnp.arange(n, dtype=jnp.int32))
    assert [int(v) for v in np.asarray(ran)] == [evaluate_model(expr, (p,)) for p in range(n)]


def test_wrapping_index_map_is_refused_not_misread(rng):
    # In int64 this is block 2048 (in range: the array has 4096 blocks); with the
    # int32 arithmetic that runs it is -2048, which must be refused.
    x = rng.standard_normal(4096 * 8).astype(np.float32)

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    call = pl.pallas_call(
        kernel, jax.ShapeDtypeStruct((8,), jnp.float32), grid=(1,),
        in_specs=[pl.BlockSpec((8,), lambda i: (((i + 2) << 30) >> 20,))],
        out_specs=pl.BlockSpec((8,), lambda i: (0,)), interpret=True)
    with pytest.raises(pl.BlockIndexError, match=r"returned block index -2048 for dim 0"):
        call(x)


def test_in_range_wrapping_index_map_reads_the_block_that_runs(rng):
    # (i + 2**31 - 1) + 1 wraps to i - 2**31; adding 2**31 back wraps to i again.
    x = rng.standard_normal((4, 8)).astype(np.float32)

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    def index_map(i):
        j = (i + np.int32(INT_MAX)) + 1
        return (j - np.int32(INT_MIN), 0)

    out = pl.pallas_call(
        kernel, jax.ShapeDtypeStruct((4, 8), jnp.float32), grid=(4,),
        in_specs=[pl.BlockSpec((1, 8), index_map)],
        out_specs=pl.BlockSpec((1, 8), lambda i: (i, 0)), interpret=True)(x)
    np.testing.assert_allclose(np.asarray(out, np.float64), 2 * x.astype(np.float64))
