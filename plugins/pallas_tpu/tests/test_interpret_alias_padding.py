"""TPU interpret mode: an output aliased to an input whose blocks do not tile
it. JAX's interpreter returns such an output padded to whole blocks (its
lowering then fails); megablox gmm's ``existing_out`` (a 128x128 block of a
128x16 output) met it in JAX's tpu_gmm_test.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu


def _accumulate(shape, block, grid, dtype, **params):
    """o = prev + 2 * x, with ``prev`` aliased to the output."""
    def kernel(x_ref, prev_ref, o_ref):
        o_ref[...] = prev_ref[...] + x_ref[...] * 2
    spec = pl.BlockSpec(block, lambda i, j: (i, j))
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(shape, dtype), grid=grid,
                          in_specs=[spec, spec], out_specs=spec, input_output_aliases={1: 0},
                          interpret=pltpu.InterpretParams(**params))


@pytest.mark.parametrize("shape, block, grid", [
    ((128, 16), (128, 128), (1, 1)),    # a block wider than the array (gmm's case)
    ((200, 24), (128, 128), (2, 1)),    # the last block runs past both dims
])
def test_an_aliased_output_comes_back_at_its_own_shape(shape, block, grid):
    rng = np.random.default_rng(7)
    x, prev = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    got = jax.jit(_accumulate(shape, block, grid, jnp.float32))(x, prev)
    assert got.shape == shape
    want = prev.astype(np.float64) + 2 * x.astype(np.float64)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)


def test_integer_operands_with_zeroed_uninitialized_memory():
    rng = np.random.default_rng(8)
    shape = (40, 130)
    x, prev = (rng.integers(-1000, 1000, shape, dtype=np.int32) for _ in range(2))
    f = _accumulate(shape, (32, 128), (2, 2), jnp.int32, uninitialized_memory="zero")
    got = f(x, prev)
    np.testing.assert_array_equal(np.asarray(got), prev.astype(np.int64) + 2 * x)


def test_the_alias_index_counts_the_prefetched_scalars():
    # as gmm: scalar-prefetch operands come first in input_output_aliases
    def kernel(offset_ref, x_ref, prev_ref, o_ref):
        o_ref[...] = prev_ref[...] + x_ref[...] * offset_ref[0].astype(jnp.float32)
    spec = pl.BlockSpec((128, 128), lambda i, offset: (0, 0))
    f = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((128, 16), jnp.float32),
        grid_spec=pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=1, grid=(1,),
                                               in_specs=[spec, spec], out_specs=spec),
        input_output_aliases={2: 0}, interpret=pltpu.InterpretParams())
    rng = np.random.default_rng(9)
    x, prev = (rng.standard_normal((128, 16)).astype(np.float32) for _ in range(2))
    got = f(jnp.array([3], jnp.int32), x, prev)
    want = prev.astype(np.float64) + 3 * x.astype(np.float64)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)


SHARD_MAP_KERNEL = '''
import sys
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P
import pallas_frontend as pl, pallas_tpu as pltpu
block = tuple(int(n) for n in sys.argv[1].split("x"))
def kernel(x_ref, prev_ref, o_ref):
    o_ref[...] = prev_ref[...] + x_ref[...] * 2
spec = pl.BlockSpec(block, lambda i: (0, 0))
varying = jax.sharding.ManualAxisType(varying={"x"})
f = pl.pallas_call(kernel, grid=(1,), in_specs=[spec, spec], out_specs=spec,
                   out_shape=jax.ShapeDtypeStruct((128, 16), jnp.float32, manual_axis_type=varying),
                   input_output_aliases={1: 0}, interpret=pltpu.InterpretParams())
mesh = jax.make_mesh((1,), ("x",))
g = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=(P("x"), P("x")), out_specs=P("x")))
rng = np.random.default_rng(int(sys.argv[2]))
x, prev = (rng.standard_normal((128, 16)).astype(np.float32) for _ in range(2))
got = g(*(jax.device_put(a, NamedSharding(mesh, P("x"))) for a in (x, prev)))
np.testing.assert_allclose(np.asarray(got), prev.astype(np.float64) + 2 * x.astype(np.float64),
                           rtol=1e-6, atol=1e-6)
print("ok")
'''


@pytest.mark.skipif(not hasattr(jax.sharding, "ManualAxisType"),
                    reason="this JAX has no jax.sharding.ManualAxisType")
@pytest.mark.parametrize("block", ["128x16", "128x128"])
def test_a_first_kernel_inside_shard_map_with_check_vma(tmp_path, block):
    # a process of its own: the first TPU-interpreted kernel, traced inside a
    # shard_map whose check_vma is on, once made pallas_tpu's probe of JAX's
    # interpreter effects fail (its out_shape has no manual axes); the padded
    # aliased output keeps the user's manual axes
    import os
    import subprocess
    import sys
    script = tmp_path / "shard_map_kernel.py"
    script.write_text(SHARD_MAP_KERNEL)
    run = subprocess.run([sys.executable, str(script), block, "11"], capture_output=True,
                         text=True, timeout=300, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-2000:]
