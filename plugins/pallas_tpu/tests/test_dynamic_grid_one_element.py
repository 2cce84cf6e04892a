"""A dynamic grid size given as a one-element integer array (``int32[1]``,
e.g. the SMEM operand that also carries it), as JAX takes it (JAX's
test_dynamic_grid_with_smem_output: 'A dynamic grid size must be an integer
scalar, got int32[1]'): the grid runs that many steps on both interpreters
and compiles for a v5e; a larger array is still refused, naming the rule."""

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import pallas_frontend as pl
import pallas_tpu as pltpu

SMEM = pl.BlockSpec(memory_space=pltpu.SMEM)


def _counting(n, interpret):
    """o[0] = 1 at step 0, +1 at each later step: the number of grid steps. The
    grid size is ``n`` itself (any one-element shape); the kernel also gets it."""
    def body(_, o_ref):
        o_ref[0] = lax.cond(pl.program_id(0) == 0, lambda: 1, lambda: o_ref[0] + 1)
    return pl.pallas_call(
        body, out_shape=pltpu.SMEM((1,), jnp.int32),
        grid_spec=pl.GridSpec(grid=(n,), in_specs=[SMEM], out_specs=SMEM),
        interpret=interpret)(n.reshape(-1))


@pytest.mark.parametrize("interpret", [True, pltpu.InterpretParams()], ids=["builtin", "tpu"])
@pytest.mark.parametrize("shape", [(1,), (1, 1), ()])
def test_the_grid_runs_the_arrays_one_element_many_steps(interpret, shape):
    want = int(np.random.default_rng().integers(1, 10))
    n = jnp.full(shape, want, jnp.int32)
    counted = jax.jit(lambda n: _counting(n, interpret))(n)
    assert int(np.asarray(counted)[0]) == want


def test_a_concrete_one_element_array_is_a_static_size():
    def body(o_ref):
        o_ref[0] = lax.cond(pl.program_id(0) == 0, lambda: 1, lambda: o_ref[0] + 1)
    want = int(np.random.default_rng().integers(1, 10))
    got = pl.pallas_call(body, out_shape=pltpu.SMEM((1,), jnp.int32), out_specs=SMEM,
                         grid=(np.array([want], np.int32),), interpret=True)()
    assert int(np.asarray(got)[0]) == want


def test_a_larger_array_is_refused_naming_the_rule():
    with pytest.raises(TypeError, match=r"dynamic grid size must be an integer scalar "
                                        r"\(or a one-element integer array\), got int32\[2\]"):
        jax.jit(lambda n: _counting(n, True))(jnp.array([3, 4], jnp.int32))


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                    reason="compiling for a TPU topology needs libtpu")
def test_it_compiles_for_v5e(aot_compile):
    compiled, text = aot_compile(lambda n: _counting(n, False), jnp.array([5], jnp.int32))
    assert compiled is not None and "tpu_custom_call" in text
