"""``Layout.to_mgpu()``: the Mosaic GPU layout an ``inline_mgpu`` function
builds its FragmentedArrays with, read from the ``plgpu.Layout`` the kernel
author holds (tokamax's int4 -> biased fp8 encoding in its Blackwell fp8
ragged dot does ``layout.to_mgpu()`` on a ``Layout.TCGEN05_TMEM_NATIVE(8)``;
ours' layouts had no such method)."""

import functools

import jax
import jax.numpy as jnp
import pytest
from jax.experimental.mosaic import gpu as mgpu
from jax.experimental.pallas import mosaic_gpu as jax_plgpu

import pallas_mgpu as plgpu
from h100_ops import h100_ops

LAYOUTS = {
    "plain": lambda gpu: gpu.Layout.WGMMA,
    "parameterized": lambda gpu: gpu.Layout.TCGEN05_TMEM_NATIVE(8),
    "strided": lambda gpu: gpu.Layout.WG_STRIDED((64, 64), vec_size=2),
    "reduced": lambda gpu: gpu.Layout.WGMMA.reduce(1),
}


@pytest.mark.parametrize("which", LAYOUTS)
def test_to_mgpu_is_jaxs(which):
    ours, theirs = (LAYOUTS[which](gpu).to_mgpu() for gpu in (plgpu, jax_plgpu))
    assert ours == theirs


def _relayout(gpu):
    """An ``inline_mgpu`` function that rebuilds its argument's FragmentedArray
    with ``layout.to_mgpu()``, as tokamax's encoders do."""
    layout = gpu.Layout.WG_STRIDED((64, 64), vec_size=2)

    @functools.partial(
        gpu.kernel, out_type=jax.ShapeDtypeStruct((64, 64), jnp.float32),
        compiler_params=gpu.CompilerParams(lowering_semantics=gpu.LoweringSemantics.Lane))
    def k(x_ref, o_ref):
        x = gpu.load(x_ref, layout=layout, optimized=False)

        @gpu.inline_mgpu(arg_types=(layout,),
                         return_type=gpu.ShapeDtypeStruct(x.shape, x.dtype, layout))
        def rebuild(_, fa):
            return mgpu.FragmentedArray(_registers=fa.registers, _layout=layout.to_mgpu(),
                                        _is_signed=None)
        o_ref[...] = rebuild(x)
    return k


def test_inline_mgpu_using_to_mgpu_lowers_for_cuda_as_jax():
    """GPU interpret mode cannot run inline_mgpu (JAX's refusal): lowered for
    cuda, the same Mosaic GPU operations as JAX's, as often."""
    ops = h100_ops(_relayout, jax.ShapeDtypeStruct((64, 64), jnp.float32))
    assert ops["ours"]["vector.load"] > 0, ops["ours"]
    assert set(ops["ours"] - ops["jax"]) <= {"memref.subview"}, ops["ours"] - ops["jax"]
    assert not ops["jax"] - ops["ours"], ops["jax"] - ops["ours"]
