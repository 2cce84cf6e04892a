"""emit_pipeline inside a kernel over HBM operands: AOT for v5e and TPU interpret."""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu


def pipelined_kernel(x_hbm, y_hbm, o_hbm, scale_ref):
    scale = scale_ref[0, 0]

    def inner(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] * scale + y_ref[...]

    pltpu.emit_pipeline(
        inner, grid=(x_hbm.shape[0] // 128, x_hbm.shape[1] // 128),
        in_specs=[pl.BlockSpec((128, 128), lambda i, j: (i, j))] * 2,
        out_specs=pl.BlockSpec((128, 128), lambda i, j: (i, j)))(x_hbm, y_hbm, o_hbm)


def scaled_add(x, y, scale, interpret=False):
    def kernel(x_hbm, y_hbm, scale_ref, o_hbm):
        pipelined_kernel(x_hbm, y_hbm, o_hbm, scale_ref)
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pltpu.ANY)] * 2
        + [pl.BlockSpec(memory_space=pltpu.SMEM)],
        out_specs=pl.BlockSpec(memory_space=pltpu.ANY),
        compiler_params=pltpu.CompilerParams(),
        interpret=interpret)(x, y, scale)


def test_emit_pipeline_aot(aot_compile):
    z = jnp.zeros((256, 384), jnp.float32)
    compiled, text = aot_compile(scaled_add, z, z, jnp.zeros((1, 1), jnp.float32))
    assert "tpu_custom_call" in text


def test_emit_pipeline_interpret():
    rng = np.random.default_rng()
    x, y = (rng.standard_normal((256, 384)).astype(np.float32) for _ in range(2))
    s = np.float32(rng.uniform(0.5, 2.0))
    out = scaled_add(jnp.asarray(x), jnp.asarray(y), jnp.full((1, 1), s),
                     interpret=pltpu.InterpretParams())
    want = x.astype(np.float64) * float(s) + y.astype(np.float64)
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-6, atol=1e-6)


# --- non-int block dims: Squeezed, Element, BoundedSlice ------------------------------------

def _windowed(Pl, T, dims, index_map, grid, out_rows, interpret):
    """Pipelines a (rows, 128) window of x, picked by ``dims``/``index_map``,
    into consecutive (8, 128) blocks of the output, adding 1."""
    def kernel(x_hbm, o_hbm):
        def inner(x_ref, o_ref):
            o_ref[...] = x_ref[...].reshape(o_ref.shape)[...] + 1.0
        T.emit_pipeline(inner, grid=grid,
                        in_specs=[Pl.BlockSpec(dims, index_map)],
                        out_specs=Pl.BlockSpec((8, 128), lambda i: (i, 0)))(x_hbm, o_hbm)
    return Pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((out_rows, 128), jnp.float32),
        in_specs=[Pl.BlockSpec(memory_space=Pl.ANY)], out_specs=Pl.BlockSpec(memory_space=Pl.ANY),
        interpret=interpret)


def _cases(Pl):
    return {   # name: (x shape, block dims, index map, grid, NumPy window of block i)
        "squeezed": ((4, 8, 128), (None, 8, 128), lambda i: (i, 0, 0), (4,),
                     lambda x, i: x[i]),
        "element": ((40, 128), (Pl.Element(8), 128), lambda i: (3 * i + 1, 0), (4,),
                    lambda x, i: x[3 * i + 1:3 * i + 9]),
        "bounded_slice": ((40, 128), (Pl.BoundedSlice(8), 128),
                          lambda i: (Pl.ds(5 * i + 2, 8), 0), (4,),
                          lambda x, i: x[5 * i + 2:5 * i + 10]),
    }


@pytest.mark.parametrize("case", ["squeezed", "element", "bounded_slice"])
def test_emit_pipeline_non_int_block_dims_match_jax(case):
    from jax.experimental import pallas as jpl
    from jax.experimental.pallas import tpu as jpltpu
    shape, _, _, grid, window = _cases(pl)[case]
    x = np.random.default_rng().standard_normal(shape).astype(np.float32)
    outs = []
    # JAX's emit_pipeline reads the chip from the context mesh (ours names a v5e itself)
    v5e = jax.sharding.AbstractMesh(
        (), (), abstract_device=jax.sharding.AbstractDevice("TPU v5 lite", 1, "tpu"))
    for Pl, T in ((pl, pltpu), (jpl, jpltpu)):
        _, dims, index_map, _, _ = _cases(Pl)[case]
        call = _windowed(Pl, T, dims, index_map, grid, 8 * grid[0], T.InterpretParams())
        with jax.sharding.use_abstract_mesh(v5e) if T is jpltpu else contextlib.nullcontext():
            outs.append(np.asarray(call(jnp.asarray(x))))
    want = np.concatenate([window(x, i) for i in range(grid[0])]).astype(np.float64) + 1.0
    np.testing.assert_allclose(outs[0], want, rtol=1e-6)
    np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.parametrize("case", ["squeezed", "element", "bounded_slice"])
def test_emit_pipeline_non_int_block_dims_aot(aot_compile, case):
    shape, dims, index_map, grid, _ = _cases(pl)[case]
    call = _windowed(pl, pltpu, dims, index_map, grid, 8 * grid[0], False)
    compiled, text = aot_compile(lambda x: call(x), jnp.zeros(shape, jnp.float32))
    assert "tpu_custom_call" in text
