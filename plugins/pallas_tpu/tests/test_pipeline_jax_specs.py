"""``emit_pipeline`` given JAX's own BlockSpecs (``jax.experimental.pallas``),
as JAX's fuser hands them (``fuser.pull_block_spec`` builds JAX's from ours):
JAX 0.10.2's tpu_fusible_matmul_test core_map cases recursed without end
(RecursionError). Checked in TPU interpret mode against NumPy (float64), on
the traced schedule (no core axis) and the recorded one (``core_axis_name``),
with the specs flat and in a pytree."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as jpl
from jax.experimental.pallas import tpu as jpltpu

import pallas_frontend as pl
import pallas_tpu as pltpu
from tpu_window import tensorcore_mesh

R, C = 8, 128


def _scaled_sum(core_axis: bool, as_tree: bool):
    """o = 2 x + y over (n, 2) blocks, every BlockSpec JAX's own."""
    mesh = tensorcore_mesh(pltpu, "core", 1)

    def f(x, y):
        grid = (x.shape[0] // R, x.shape[1] // C)

        @pl.kernel(mesh=mesh, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                   interpret=pltpu.InterpretParams())
        def k(x_hbm, y_hbm, o_hbm):
            spec = jpl.BlockSpec((R, C), lambda i, j: (i, j), memory_space=jpltpu.VMEM)
            if as_tree:
                def body(ins, o_blk):
                    o_blk[...] = 2 * ins["x"][...] + ins["y"][...]
                in_specs, operands = [{"x": spec, "y": spec}], ({"x": x_hbm, "y": y_hbm},)
            else:
                def body(x_blk, y_blk, o_blk):
                    o_blk[...] = 2 * x_blk[...] + y_blk[...]
                in_specs, operands = [spec, spec], (x_hbm, y_hbm)
            extra = dict(core_axis_name="core",
                         dimension_semantics=(pltpu.PARALLEL, pltpu.ARBITRARY)) if core_axis \
                else {}
            pltpu.emit_pipeline(body, grid=grid, in_specs=in_specs, out_specs=[spec],
                                **extra)(*operands, o_hbm)
        return k(x, y)
    return f


@pytest.mark.parametrize("core_axis", [False, True])
@pytest.mark.parametrize("as_tree", [False, True])
def test_jax_block_specs(core_axis, as_tree):
    rng = np.random.default_rng()
    x = rng.standard_normal((3 * R, 2 * C)).astype(np.float32)
    y = rng.standard_normal((3 * R, 2 * C)).astype(np.float32)
    out = _scaled_sum(core_axis, as_tree)(x, y)
    np.testing.assert_allclose(np.asarray(out), 2 * x.astype(np.float64) + y,
                               rtol=1e-6, atol=1e-6)
