"""JAX's GPU queries, re-exported: the same objects, usable to pick the target
of this backend's device-less compiles."""

import jax
import jax.numpy as jnp
import pytest

import pallas_frontend as pl
import pallas_triton as pt
from pallas_triton import _jax_compat
from jax_window import GPU_QUERIES

NAMES = ("GpuInfo", "GpuVersion", "get_gpu_info", "get_gpu_info_from_version", "is_gpu_device")


@GPU_QUERIES
@pytest.mark.parametrize("name", NAMES)
def test_same_objects_as_jax(name):
    from jax.experimental.pallas import triton as jax_triton
    assert getattr(pt, name) is getattr(jax_triton, name)
    assert name in pt.__all__


@GPU_QUERIES
def test_no_gpu_here():
    if jax.default_backend() == "gpu":
        pytest.skip("a GPU is attached")
    assert pt.is_gpu_device() is False


def _add(x, y):
    def body(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + y_ref[...]
    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(x.shape[0] // 128,),
                          in_specs=[pl.BlockSpec((128,), lambda i: (i,))] * 2,
                          out_specs=pl.BlockSpec((128,), lambda i: (i,)),
                          interpret=pt.InterpretParams())(x, y)


@GPU_QUERIES
@pytest.mark.parametrize("version, sm", [("A100", 80), ("H100", 90)])
def test_gpu_info_names_the_compile_target(version, sm):
    info = pt.get_gpu_info_from_version(pt.GpuVersion[version])
    assert isinstance(info, pt.GpuInfo) and info.compute_capability == sm
    a = jax.ShapeDtypeStruct((512,), jnp.float32)
    asm = pt.compile_for_target(_add, a, a, target=("cuda", info.compute_capability))
    assert f".target sm_{sm}" in asm["ptx"]


def test_an_older_jax_says_which_release_has_them():
    """Under JAX 0.10 (no GPU queries in JAX) ours says so in one line, naming 0.11."""
    from jax.experimental.pallas import triton as jax_triton
    if all(hasattr(jax_triton, n) for n in _jax_compat.GPU_QUERIES):
        pytest.skip("this JAX has the GPU queries")
    with pytest.raises(NotImplementedError, match=r"needs JAX 0\.11 or newer; this is JAX") as e:
        pt.GpuInfo
    assert "\n" not in str(e.value)
