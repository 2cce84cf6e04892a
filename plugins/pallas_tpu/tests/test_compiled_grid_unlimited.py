"""pallas_tpu's interpreter runs at most 2**31 - 1 grid points, like every
interpreter: a larger grid is refused when lowered, before anything runs, naming
the grid, the limit and the fix (issue 39). The compiled path is not limited here."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu


def _add_one(grid, **kw):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1
    spec = pl.BlockSpec((8, 128), lambda *ids: (0, 0))
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                          grid=grid, in_specs=[spec], out_specs=spec, **kw)


@pytest.mark.parametrize("grid", [(2**16, 2**15), (5, 2**29, 1)], ids=str)
def test_more_points_than_int32_are_refused_before_running(grid):
    points = int(np.prod(grid, dtype=np.int64))
    assert points > np.iinfo(np.int32).max
    f = _add_one(grid, interpret=pallas_tpu.InterpretParams())
    words = (rf"Kernel kernel at .*test_interpreted_grid_limit.py:\d+: the grid "
             rf"{re.escape(str(grid))} has {points:,} points, more than backend 'tpu' in "
             rf"interpret mode runs.*2\*\*31 - 1 = 2,147,483,647 grid points.*fewer, larger blocks")
    with pytest.raises(ValueError, match=words):
        jax.jit(f).lower(jax.ShapeDtypeStruct((8, 128), jnp.float32))


def test_a_grid_under_the_limit_runs():
    x = np.random.default_rng(39).standard_normal((8, 128)).astype(np.float32)
    out = _add_one((2, 3), interpret=pallas_tpu.InterpretParams())(x)
    np.testing.assert_allclose(np.asarray(out), x.astype(np.float64) + 1, rtol=1e-6)


def test_the_compiled_path_is_not_limited_by_the_interpreters_count():
    from pallas_tpu import aot
    f = _add_one((2**16, 2**15), compiler_params=pallas_tpu.CompilerParams())
    text = aot.lower_for_tpu(f, jax.ShapeDtypeStruct((8, 128), jnp.float32),
                             topology="v5e:2x2").as_text()
    assert "tpu_custom_call" in text
