"""Issue 39 round 4 probe: a grid with a 0-sized axis under TPU interpret mode.

JAX's TPU interpreter divides by the size of the parallel part of the grid, so a
``vmap`` over a 0-sized batch (which adds a parallel grid axis of size 0), or a
``grid=(0,)`` marked parallel, crashed with a ZeroDivisionError. Nothing runs
now: an aliased output keeps its input.
"""

import jax
import jax.numpy as jnp
import numpy as np

import pallas_frontend as pl
import pallas_tpu


def _kernel(a_ref, b_ref, o_ref):
    o_ref[...] = a_ref[...] * 2 - b_ref[...]


def test_vmap_over_an_empty_batch(rng):
    a = rng.standard_normal((0, 8, 128)).astype(np.float32)
    b = rng.standard_normal((8, 128)).astype(np.float32)
    f = pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                       interpret=pallas_tpu.InterpretParams())
    got = jax.vmap(f, in_axes=(0, None))(a, b)
    assert got.shape == (0, 8, 128) and got.dtype == jnp.float32
    # a non-empty batch still runs: NumPy float64 reference
    a3 = rng.standard_normal((3, 8, 128)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(jax.vmap(f, in_axes=(0, None))(a3, b)),
                               a3.astype(np.float64) * 2 - b, rtol=1e-6)


def test_parallel_zero_grid_leaves_an_aliased_output_as_its_input(rng):
    x = rng.standard_normal((16, 128)).astype(np.float32)
    y = rng.standard_normal((16, 128)).astype(np.float32)
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    f = pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
                       grid=(0,), in_specs=[spec, spec], out_specs=spec,
                       input_output_aliases={0: 0},
                       compiler_params=pallas_tpu.CompilerParams(
                           dimension_semantics=("parallel",)),
                       interpret=pallas_tpu.InterpretParams())
    np.testing.assert_array_equal(np.asarray(jax.jit(f)(x, y)), x)
