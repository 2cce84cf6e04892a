"""The interpreters' limit of 2**31 - 1 grid points (tests/test_interpreted_grid_limit.py
holds every interpreter to it, pallas_tpu's included) does not apply to the
compiled path: such a grid still lowers for a TPU."""

import jax
import jax.numpy as jnp

import pallas_frontend as pl
import pallas_tpu
from pallas_tpu import aot


def test_the_compiled_path_is_not_limited_by_the_interpreters_count():
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1
    spec = pl.BlockSpec((8, 128), lambda *ids: (0, 0))
    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                       grid=(2**16, 2**15), in_specs=[spec], out_specs=spec,
                       compiler_params=pallas_tpu.CompilerParams())
    text = aot.lower_for_tpu(f, jax.ShapeDtypeStruct((8, 128), jnp.float32),
                             topology="v5e:2x2").as_text()
    assert "tpu_custom_call" in text
