"""JAX Pallas's own params objects are refused before tracing, naming ours."""

import jax
import numpy as np
import pytest

import pallas_frontend as pl

jpltpu = pytest.importorskip("jax.experimental.pallas.tpu")
jpltriton = pytest.importorskip("jax.experimental.pallas.triton")
jplmgpu = pytest.importorskip("jax.experimental.pallas.mosaic_gpu")


def _add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


@pytest.mark.parametrize("argument, value, ours", [
    ("compiler_params", lambda: jpltpu.CompilerParams(), "pallas_tpu.CompilerParams"),
    ("compiler_params", lambda: jpltriton.CompilerParams(), "pallas_triton.CompilerParams"),
    ("compiler_params", lambda: jplmgpu.CompilerParams(), "pallas_mgpu.CompilerParams"),
    ("interpret", lambda: jpltpu.InterpretParams(), "pallas_tpu.InterpretParams"),
])
def test_jax_params_point_at_ours(argument, value, ours, rng):
    x = rng.standard_normal(8).astype(np.float32)
    with pytest.raises(TypeError, match=rf"{argument}=jax\.experimental\.pallas\..*{ours}\(") as err:
        pl.pallas_call(_add_one, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                       **{argument: value()})
    assert "docs/migration.md" in str(err.value)


def test_our_params_still_pass_the_check(rng):
    x = rng.standard_normal(8).astype(np.float32)
    out = pl.pallas_call(_add_one, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                         interpret=True)(x)
    np.testing.assert_allclose(out, x.astype(np.float64) + 1.0)
