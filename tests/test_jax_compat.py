"""Pallas code written for JAX runs unchanged: each test runs one kernel under
JAX's Pallas (interpret mode) and under ours, on the same fresh random inputs."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from jax.experimental import pallas as jpl


def both(build, *args):
    """``build(pallas_module, **call_kw)`` -> a function; runs it under JAX's
    Pallas interpret mode and under ours, returns (jax_result, our_result)."""
    theirs = build(jpl, interpret=True)(*args)
    ours = build(pl)(*args)
    return theirs, ours


def assert_same(theirs, ours, rtol=1e-6, atol=1e-6):
    t_leaves, t_tree = jax.tree.flatten(theirs)
    o_leaves, o_tree = jax.tree.flatten(ours)
    assert t_tree == o_tree
    for a, b in zip(t_leaves, o_leaves):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=rtol, atol=atol)


@pytest.fixture
def rng():
    return np.random.default_rng()


# --- 1. optional operands -----------------------------------------------------

def _masked_add(P, seg_given, **kw):
    def kernel(x_ref, y_ref, seg_ref, o_ref):
        v = x_ref[...] + y_ref[...]
        if seg_ref is not None:
            v = jnp.where(seg_ref[...] > 0, v, -v)
        o_ref[...] = v

    spec = P.BlockSpec((8, 128), lambda i: (i, 0))
    return P.pallas_call(
        kernel, jax.ShapeDtypeStruct((32, 128), jnp.float32), grid=(4,),
        in_specs=[spec, spec, spec if seg_given else None], out_specs=spec, **kw)


@pytest.mark.parametrize("seg_given", [False, True])
def test_optional_operand_none_drops_with_its_spec(rng, seg_given):
    x, y = (jnp.asarray(rng.standard_normal((32, 128)), jnp.float32) for _ in range(2))
    seg = jnp.asarray(rng.integers(0, 2, (32, 128)), jnp.int32) if seg_given else None
    theirs, ours = both(lambda P, **kw: _masked_add(P, seg_given, **kw), x, y, seg)
    assert_same(theirs, ours)
    want = np.asarray(x, np.float64) + np.asarray(y, np.float64)
    if seg_given:
        want = np.where(np.asarray(seg) > 0, want, -want)
    np.testing.assert_allclose(np.asarray(ours), want, rtol=1e-6)


def test_optional_operand_in_a_nested_tree(rng):
    x = jnp.asarray(rng.standard_normal((16, 128)), jnp.float32)

    def build(P, **kw):
        def kernel(refs, o_ref):
            a_ref, b_ref = refs["a"], refs["b"]
            assert b_ref is None
            o_ref[...] = a_ref[...] * 3
        spec = P.BlockSpec((8, 128), lambda i: (i, 0))
        return P.pallas_call(kernel, jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
                             in_specs=[{"a": spec, "b": None}], out_specs=spec, **kw)

    theirs, ours = both(lambda P, **kw: lambda v: build(P, **kw)({"a": v, "b": None}), x)
    assert_same(theirs, ours)
    np.testing.assert_allclose(np.asarray(ours), 3 * np.asarray(x, np.float64), rtol=1e-6)


def test_none_spec_for_an_array_is_still_the_whole_array(rng):
    x = jnp.asarray(rng.standard_normal((8, 128)), jnp.float32)
    y = jnp.asarray(rng.standard_normal((8, 128)), jnp.float32)

    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] - y_ref[...]

    out = pl.pallas_call(kernel, jax.ShapeDtypeStruct(x.shape, x.dtype),
                         in_specs=[None, pl.BlockSpec((8, 128), lambda: (0, 0))])(x, y)
    np.testing.assert_allclose(np.asarray(out), np.asarray(x, np.float64) - np.asarray(y),
                               rtol=1e-6)
