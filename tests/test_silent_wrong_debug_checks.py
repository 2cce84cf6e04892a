"""``pl.enable_debug_checks`` is part of the trace context, and is JAX's own
``jax_pallas_enable_debug_checks`` switch (issue 24, defect 8): a function
jitted with checks off is traced again when they are turned on."""

import jax
import jax.experimental.pallas as jpl   # its pl.enable_debug_checks is the same switch
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
from conftest import rand


def _jitted():
    def kernel(x_ref, o_ref):
        pl.debug_check(jnp.all(x_ref[...] < 0), "values must be negative")
        o_ref[...] = x_ref[...]

    return jax.jit(lambda x: pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x))


@pytest.mark.parametrize("switch", ["pl", "jpl", "config"])
def test_checks_turned_on_after_an_outer_jit_traced(rng, switch):
    x = jnp.asarray(np.abs(rand(rng, 8)) + 1.0)
    f = _jitted()
    np.testing.assert_array_equal(f(x), x)            # traced with checks off
    if switch == "config":
        jax.config.update("jax_pallas_enable_debug_checks", True)
        try:
            with pytest.raises(Exception, match="values must be negative"):
                jax.block_until_ready(f(x))
        finally:
            jax.config.update("jax_pallas_enable_debug_checks", False)
    else:
        with (pl if switch == "pl" else jpl).enable_debug_checks(True):
            with pytest.raises(Exception, match="values must be negative"):
                jax.block_until_ready(f(x))
    np.testing.assert_array_equal(f(x), x)            # off again: the first trace is reused


def test_bare_call_sets_jax_switch_and_restores():
    assert not jax.config.jax_pallas_enable_debug_checks
    try:
        pl.enable_debug_checks(True)
        assert jax.config.jax_pallas_enable_debug_checks
        with pl.enable_debug_checks(False):
            assert not jax.config.jax_pallas_enable_debug_checks
            assert pl.enable_debug_checks.value is False
        assert pl.enable_debug_checks.value is True
    finally:
        pl.enable_debug_checks(False)
    assert pl.enable_debug_checks.value is False
