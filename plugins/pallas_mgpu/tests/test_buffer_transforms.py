"""``ref.transforms`` of an SMEM buffer allocated with transforms, as JAX's
kernel body sees it: the transforms that undo the buffer's (tokamax's sm80
gated linear unit reads ``out_smem.transforms[0].swizzle`` to build the
layout of its epilogue's copy to GMEM; under ours that was an AttributeError
on the traced Ref). JAX 0.12.1 keeps a buffer's transforms in its type and hands
the body a plain Ref; ours still gives ``.transforms``, which there are checked
against the transforms the buffer was allocated with."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_mgpu as plgpu
from h100_ops import APIS, h100_ops

TRANSFORMS = {
    "tiled": lambda gpu: (gpu.TilingTransform((8, 64)),),
    "swizzled": lambda gpu: (gpu.SwizzleTransform(128),),
    "tiled_swizzled": lambda gpu: (gpu.TilingTransform((8, 64)), gpu.SwizzleTransform(128)),
}


def _scaled_copy(gpu, transforms, seen):
    """o = 2 * x through an SMEM buffer with ``transforms``; records what the
    body reads as the buffer's ``.transforms``."""
    @functools.partial(gpu.kernel, out_type=jax.ShapeDtypeStruct((64, 64), jnp.float16),
                       scratch_types=[gpu.SMEM((64, 64), jnp.float16, transforms=transforms)],
                       interpret=gpu.InterpretGPUParams())
    def k(x_ref, o_ref, buf):
        seen.append(getattr(buf, "transforms", None))
        buf[...] = x_ref[...] * 2
        o_ref[...] = buf[...]
    return k


@pytest.mark.parametrize("which", TRANSFORMS)
def test_buffer_transforms_are_jaxs(which, rng):
    x = rng.standard_normal((64, 64)).astype(np.float16)
    seen = {}
    for api, gpu in APIS.items():
        seen[api] = []
        got = np.asarray(_scaled_copy(gpu, TRANSFORMS[which](gpu), seen[api])(x))
        np.testing.assert_array_equal(got, (2 * x.astype(np.float64)).astype(np.float16))
    if seen["jax"][0] is not None:
        assert seen["ours"][0] == seen["jax"][0], (seen["ours"], seen["jax"])
    else:     # JAX 0.12.1: what each undoes, the last applied first
        undone = [getattr(t, "swizzle", None) or getattr(t, "tiling") for t in seen["ours"][0]]
        given = [getattr(t, "swizzle", None) or getattr(t, "tiling")
                 for t in reversed(TRANSFORMS[which](plgpu))]
        assert undone == given, (seen["ours"], given)


def test_a_buffer_without_transforms_has_no_transforms_attribute():
    """As in JAX: a plain buffer's Ref is a Ref, not a transformed view."""
    for gpu in APIS.values():
        seen = []
        _scaled_copy(gpu, (), seen)(np.ones((64, 64), np.float16))
        assert seen == [None], seen


def _epilogue(gpu, interpret: bool):
    """The epilogue of tokamax's sm80 GLU (Lane semantics): a result stored in
    a tiled, swizzled SMEM buffer, read back in the SMEM->GMEM copy layout
    built from the buffer's own swizzle, and stored to GMEM."""
    dtype = jnp.float16
    transforms = (gpu.TilingTransform((8, 64)), gpu.SwizzleTransform(128))

    @functools.partial(
        gpu.kernel, out_type=jax.ShapeDtypeStruct((64, 64), dtype),
        scratch_types=[gpu.SMEM((64, 64), dtype, transforms=transforms)],
        compiler_params=gpu.CompilerParams(lowering_semantics=gpu.LoweringSemantics.Lane),
        interpret=gpu.InterpretGPUParams() if interpret else False)
    def k(x_ref, o_ref, out_smem):
        # JAX 0.12.1's body sees no .transforms: the swizzle allocated, there
        swizzle = out_smem.transforms[0].swizzle if hasattr(out_smem, "transforms") else \
            transforms[1].swizzle
        layout = gpu.Layout.SMEM_GMEM_COPY(out_smem.shape, dtype, swizzle=swizzle)
        x = gpu.load(x_ref, layout=gpu.Layout.WGMMA, optimized=False)
        out_smem[...] = (x * 3).astype(dtype)
        o_ref[...] = gpu.layout_cast(out_smem[...], layout)
    return k


def test_epilogue_layout_from_the_buffer_swizzle_runs_as_numpy(rng):
    x = rng.standard_normal((64, 64)).astype(np.float16)
    got = np.asarray(_epilogue(plgpu, True)(x))
    np.testing.assert_array_equal(got, (3 * x.astype(np.float64)).astype(np.float16))


def test_epilogue_lowers_for_cuda_as_jax():
    ops = h100_ops(lambda gpu: _epilogue(gpu, False), jax.ShapeDtypeStruct((64, 64), jnp.float16))
    assert ops["ours"]["nvvm.stmatrix"] > 0, ops["ours"]     # into the swizzled buffer
    # the same operations, as often; ours' Ref views add a few memref.subview
    # (views: no data moved)
    assert set(ops["ours"] - ops["jax"]) <= {"memref.subview"}, ops["ours"] - ops["jax"]
    assert not ops["jax"] - ops["ours"], ops["jax"] - ops["ours"]
