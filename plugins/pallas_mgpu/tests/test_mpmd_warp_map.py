"""JAX's ``mpmd_map([(WarpMesh(...), fn)])()`` inside a ``pallas_mgpu.kernel``
(JAX's Mosaic GPU interpret tests call it): each of the 4 warps runs ``fn``
on the kernel's Refs. GPU interpret mode against NumPy (and against the same
kernel on JAX's API), lowering for cuda, and the nesting refusal."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax_window import jplgpu as jax_plgpu  # JAX's plgpu (with 0.10's GPU interpret API)

import pallas_frontend as pl
import pallas_mgpu as plgpu
from pallas_mgpu import _jax_private, aot

APIS = {"jax": jax_plgpu, "ours": plgpu}


def _per_warp_kernel(gpu, n):
    """Warp w writes o[w::4] = x[w::4] * (w + 1) through a shared SMEM buffer
    handed over with a barrier from warp 0 (who fills it) to the others."""

    @functools.partial(
        gpu.kernel, out_type=jax.ShapeDtypeStruct((n,), jnp.float32),
        scratch_types=dict(smem=gpu.SMEM((n,), jnp.float32), ready=gpu.Barrier(num_arrivals=1)),
        interpret=gpu.InterpretGPUParams(detect_races=True))
    def k(x_ref, o_ref, *, smem, ready):
        def per_warp():
            w = jax.lax.axis_index("warp")

            @pl.when(w == 0)
            def _():
                smem[...] = x_ref[...]
                gpu.barrier_arrive(ready)

            @pl.when(w != 0)
            def _():
                gpu.barrier_wait(ready)
            for i in range(n):
                @pl.when(w == i % 4)
                def _():
                    o_ref[i] = smem[i] * (w + 1).astype(jnp.float32)

        _jax_private.mpmd_map([(gpu.WarpMesh(axis_name="warp"), per_warp)])()
    return k


@pytest.mark.parametrize("api", APIS)
def test_warps_split_the_work_and_share_smem(api, rng):
    n = 10
    x = rng.standard_normal(n).astype(np.float32)
    with jax.enable_checks(True):
        got = jax.jit(_per_warp_kernel(APIS[api], n))(x)
    np.testing.assert_allclose(got, x.astype(np.float64) * (np.arange(n) % 4 + 1), rtol=1e-6)


def test_mpmd_map_inside_mpmd_map_is_refused():
    @functools.partial(plgpu.kernel, out_type=jax.ShapeDtypeStruct((), jnp.int32),
                       interpret=plgpu.InterpretGPUParams())
    def k(o_ref):
        def outer():
            def inner():
                o_ref[...] = 1
            _jax_private.mpmd_map([(plgpu.WarpMesh(axis_name="w1"), inner)])()
        _jax_private.mpmd_map([(plgpu.WarpMesh(axis_name="w0"), outer)])()
    with pytest.raises(Exception, match="Cannot mpmd_map over WarpMesh while already mpmd_mapped"):
        k()


def test_warp_map_lowers_for_cuda():
    k = plgpu.kernel(
        lambda x_ref, o_ref: _jax_private.mpmd_map(
            [(plgpu.WarpMesh(axis_name="warp"), lambda: _store_one_per_warp(x_ref, o_ref))])(),
        out_type=jax.ShapeDtypeStruct((4,), jnp.float32))
    lowered = aot.lower_for_cuda(k, jax.ShapeDtypeStruct((4,), jnp.float32))
    (module,) = _jax_private.mosaic_gpu_modules(lowered)
    assert "gpu.launch" in module


def _store_one_per_warp(x_ref, o_ref):
    w = jax.lax.axis_index("warp")
    o_ref[w] = x_ref[w] + 1.0
