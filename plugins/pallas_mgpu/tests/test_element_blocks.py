"""``pl.Element`` blocks (a window of fixed size at the element offset the
index map returns; windows may overlap) on inputs the kernel reads: fetched by
TMA at that offset, in a CTA or through the pipeline of a sequential axis. Each
runs in Mosaic GPU interpret mode against NumPy (float64) on fresh random data
and lowers for cuda. What Element cannot do here, and ``pl.BoundedSlice``, is
refused before lowering with the operand, the line and what to use instead."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_mgpu as plgpu
from pallas_frontend.backend_api import BackendCapabilityError
from pallas_mgpu import aot

CP = {"compiler_params": plgpu.CompilerParams()}
S = jax.ShapeDtypeStruct


def _double(x, o):
    o[...] = x[...] * 2.0


def windows_1d(**call):
    """Block i of the output is twice x[96 i : 96 i + 128] (overlapping windows)."""
    return pl.pallas_call(_double, S((512,), jnp.float32), grid=(4,),
                          in_specs=[pl.BlockSpec((pl.Element(128),), lambda i: (i * 96,))],
                          out_specs=pl.BlockSpec((128,), lambda i: (i,)), **call)


def windows_1d_ref(x):
    return np.concatenate([x[96 * i:96 * i + 128] for i in range(4)]) * 2.0


def window_rows(**call):
    """Row block i is twice rows 64 i .. 64 i + 127 of x (x has 448 rows)."""
    return pl.pallas_call(_double, S((512, 128), jnp.float32), grid=(4,),
                          in_specs=[pl.BlockSpec((pl.Element(128), 128), lambda i: (i * 64, 0))],
                          out_specs=pl.BlockSpec((128, 128), lambda i: (i, 0)), **call)


def window_rows_ref(x):
    return np.concatenate([x[64 * i:64 * i + 128] for i in range(4)]) * 2.0


def sum_of_shifted_windows(**call):
    """o[i] = sum over j of x[256 i + 16 j : + 64] (rows): j is a sequential
    axis (the output block stays), so the windows go through the pipeline."""
    def body(x, o):
        @pl.when(pl.program_id(1) == 0)
        def _():
            o[...] = jnp.zeros_like(o)
        o[...] += x[...]
    return pl.pallas_call(body, S((128, 128), jnp.float32), grid=(2, 8),
                          in_specs=[pl.BlockSpec((pl.Element(64), 128),
                                                 lambda i, j: (256 * i + 16 * j, 0))],
                          out_specs=pl.BlockSpec((64, 128), lambda i, j: (i, 0)), **call)


def sum_of_shifted_windows_ref(x):
    return np.concatenate([sum(x[256 * i + 16 * j:256 * i + 16 * j + 64] for j in range(8))
                           for i in range(2)])


CASES = {   # name -> (builder(**call), operand shape, reference)
    "windows_1d": (windows_1d, (512,), windows_1d_ref),
    "window_rows": (window_rows, (448, 128), window_rows_ref),
    "sum_of_shifted_windows": (sum_of_shifted_windows, (640, 128), sum_of_shifted_windows_ref),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_interpret_mode_matches_numpy(case, rng):
    build, shape, ref = CASES[case]
    x = rng.standard_normal(shape).astype(np.float32)
    got = np.asarray(build(interpret=plgpu.InterpretParams())(x), np.float64)
    np.testing.assert_allclose(got, ref(x.astype(np.float64)), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("case", sorted(CASES))
def test_lowers_for_cuda(case):
    build, shape, _ = CASES[case]
    aot.lower_for_cuda(build(**CP), S(shape, jnp.float32))


def test_element_on_an_output_is_refused():
    f = pl.pallas_call(_double, S((512,), jnp.float32), grid=(4,),
                       in_specs=[pl.BlockSpec((128,), lambda i: (i,))],
                       out_specs=pl.BlockSpec((pl.Element(128),), lambda i: (i * 128,)), **CP)
    with pytest.raises(BackendCapabilityError,
                       match=r"pl\.Element block dims of outputs\S*, which the kernel writes "
                             r"\(at .*test_element_blocks.py:\d+\).*use Blocked dims"):
        aot.lower_for_cuda(f, S((512,), jnp.float32))


def test_element_on_an_input_the_kernel_writes_is_refused():
    def body(x, o):
        x[...] = x[...] + 1.0
        o[...] = x[...]
    f = pl.pallas_call(body, S((512,), jnp.float32), grid=(4,),
                       in_specs=[pl.BlockSpec((pl.Element(128),), lambda i: (i * 128,))],
                       out_specs=pl.BlockSpec((128,), lambda i: (i,)), **CP)
    with pytest.raises(BackendCapabilityError, match=r"args\[0\], which the kernel writes"):
        aot.lower_for_cuda(f, S((512,), jnp.float32))


def test_element_padding_is_refused_naming_jnp_pad():
    f = pl.pallas_call(_double, S((512,), jnp.float32), grid=(4,),
                       in_specs=[pl.BlockSpec((pl.Element(128, (8, 8)),), lambda i: (i * 128,))],
                       out_specs=pl.BlockSpec((128,), lambda i: (i,)),
                       interpret=plgpu.InterpretParams())
    with pytest.raises(BackendCapabilityError,
                       match=r"pl\.Element padding \(8, 8\) of args\[0\].*jnp\.pad"):
        f(np.zeros(512, np.float32))


def test_bounded_slice_is_refused_naming_the_alternatives():
    spec = pl.BlockSpec((pl.BoundedSlice(128),), lambda i: (pl.ds(i * 128, 128),))
    f = pl.pallas_call(_double, S((512,), jnp.float32), grid=(4,), in_specs=[spec],
                       out_specs=pl.BlockSpec((128,), lambda i: (i,)),
                       interpret=plgpu.InterpretParams())
    with pytest.raises(BackendCapabilityError,
                       match=r"BoundedSlice block dims of args\[0\].*pl\.Element\(n\).*GMEM"):
        f(np.zeros(512, np.float32))


def test_element_block_past_the_tma_box_is_refused_when_compiling():
    # one bulk copy moves a block wider than a TMA box; it needs 16-byte-aligned starts
    f = pl.pallas_call(_double, S((1024,), jnp.float32), grid=(2,),
                       in_specs=[pl.BlockSpec((pl.Element(512),), lambda i: (i * 500,))],
                       out_specs=pl.BlockSpec((512,), lambda i: (i,)), **CP)
    with pytest.raises(BackendCapabilityError,
                       match=r"pl\.Element block \(512,\) of args\[0\].*at most 256"):
        aot.lower_for_cuda(f, S((1012,), jnp.float32))
    x = np.random.default_rng().standard_normal(1012).astype(np.float32)
    got = pl.pallas_call(_double, S((1024,), jnp.float32), grid=(2,),
                         in_specs=[pl.BlockSpec((pl.Element(512),), lambda i: (i * 500,))],
                         out_specs=pl.BlockSpec((512,), lambda i: (i,)),
                         interpret=plgpu.InterpretParams())(x)
    want = np.concatenate([x[:512], x[500:1012]]).astype(np.float64) * 2
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-6)
