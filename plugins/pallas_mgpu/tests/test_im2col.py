"""``im2col_ref``: a TMA copy of one pixel of every window (padded input) from
the im2col view of a channels-last GMEM Ref lowers for an H100 to JAX's Mosaic
GPU operations (2 more memref.subview in ours: views of the buffers, no data
moved); JAX's GPU interpreter refuses the copy, for ours as for JAX's kernel."""

from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as jax_pl
from jax_window import jplgpu as jax_plgpu  # JAX's plgpu (with 0.10's GPU interpret API)
from jax_window import plgpu_op

import pallas_frontend as pl
import pallas_mgpu as plgpu
from test_plain_ops import _lowered_ops

APIS = {"jax": (jax_pl, jax_plgpu), "ours": (pl, plgpu)}
JAX_IM2COL = plgpu_op("im2col_ref")
X_SHAPE, ROWS, C = (1, 6, 6, 16), 16, 16


def _body(api):
    P, gpu = APIS[api]

    def body(x_ref, o_ref, smem, barrier):
        view = gpu.im2col_ref(x_ref, window_shape=(3, 3), padding=((1, 1), (0, 2)))
        gpu.copy_gmem_to_smem(view.at[P.ds(0, ROWS), 1, 2, P.ds(0, C)], smem, barrier)
        gpu.barrier_wait(barrier)
        o_ref[...] = smem[...]
    return body


def _scratch(lib):
    return [lib.SMEM((ROWS, C), jnp.float32), lib.Barrier()]


@JAX_IM2COL
def test_lowers_for_h100_as_jaxs():
    got = {}
    for api, (_, gpu) in APIS.items():
        params = gpu.CompilerParams(lowering_semantics=gpu.LoweringSemantics.Lane)
        got[api] = _lowered_ops(gpu, lambda _, api=api: _body(api), X_SHAPE, jnp.float32,
                                _scratch, out_shape=(ROWS, C), compiler_params=params)
    assert got["ours"] - got["jax"] == Counter({"memref.subview": 2})
    assert not got["jax"] - got["ours"]


@JAX_IM2COL
@pytest.mark.parametrize("api", APIS)
def test_interpret_mode_refuses_as_jax(api):
    _, gpu = APIS[api]
    k = gpu.kernel(_body(api), out_type=jax.ShapeDtypeStruct((ROWS, C), jnp.float32),
                   scratch_types=_scratch(gpu), interpret=gpu.InterpretGPUParams())
    with pytest.raises(NotImplementedError, match="does not support im2col copies"):
        jax.jit(k)(np.ones(X_SHAPE, np.float32))


def test_an_older_jax_refuses_in_one_line():
    if plgpu_op("im2col_ref").args[0] is False:
        pytest.skip("this JAX has im2col_ref")
    k = plgpu.kernel(_body("ours"), out_type=jax.ShapeDtypeStruct((ROWS, C), jnp.float32),
                     scratch_types=_scratch(plgpu), interpret=plgpu.InterpretParams())
    with pytest.raises(NotImplementedError, match=r"im2col_ref needs JAX 0\.12 or newer"):
        jax.jit(k)(np.ones(X_SHAPE, np.float32))
