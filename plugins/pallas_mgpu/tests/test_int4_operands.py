"""int4 operands (quantized weights, as tokamax's Blackwell ragged dot takes
its rhs): copied to SMEM by TMA and widened in registers, as under JAX; ours'
check() refused the dtype before anything ran."""

import functools
import jax
import jax.numpy as jnp
import numpy as np
from jax_window import jplgpu as jax_plgpu  # JAX's plgpu (with 0.10's GPU interpret API)

import pallas_mgpu as plgpu
from h100_ops import h100_ops

APIS = {"jax": jax_plgpu, "ours": plgpu}
SHAPE = (64, 128)


def _dequantize(gpu, interpret: bool):
    """o = float(w) * scale, w int4 in GMEM brought to SMEM by TMA."""
    @functools.partial(
        gpu.kernel, out_type=jax.ShapeDtypeStruct(SHAPE, jnp.float32),
        scratch_types=[gpu.SMEM(SHAPE, jnp.int4), gpu.Barrier()],
        interpret=gpu.InterpretGPUParams() if interpret else False)
    def k(w_ref, scale_ref, o_ref, w_smem, barrier):
        gpu.copy_gmem_to_smem(w_ref, w_smem, barrier)
        gpu.barrier_wait(barrier)
        o_ref[...] = w_smem[...].astype(jnp.float32) * scale_ref[...]
    return k


def test_int4_weights_dequantized_as_numpy(rng):
    w = rng.integers(-8, 8, SHAPE)                 # the whole int4 range
    scale = rng.standard_normal(SHAPE).astype(np.float32)
    want = w.astype(np.float64) * scale
    for gpu in APIS.values():
        got = np.asarray(jax.jit(_dequantize(gpu, True))(w.astype(jnp.int4), scale))
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_int4_kernel_lowers_for_cuda_as_jax():
    args = (jax.ShapeDtypeStruct(SHAPE, jnp.int4), jax.ShapeDtypeStruct(SHAPE, jnp.float32))
    ops = h100_ops(lambda gpu: _dequantize(gpu, False), *args)
    assert ops["ours"]["arith.sitofp"] > 0, ops["ours"]          # the widening
    assert set(ops["ours"] - ops["jax"]) <= {"memref.subview"}, ops["ours"] - ops["jax"]
    assert not ops["jax"] - ops["ours"], ops["jax"] - ops["ours"]
