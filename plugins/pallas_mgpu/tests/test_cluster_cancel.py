"""Cluster launch control: ``try_cluster_cancel``, ``query_cluster_cancel``
and the ``TryClusterCancelResult`` scratch, recorded and replayed as JAX's.
A kernel asking for another cluster's work gives JAX's result in GPU
interpret mode (where, as in JAX, the request never succeeds, so every block
runs its own work) and NumPy's; it lowers for an H100 to the same Mosaic GPU
operations as JAX's kernel; the scratch type is JAX's."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax_window import jplgpu as jax_plgpu  # JAX's plgpu (with 0.10's GPU interpret API)
from jax_window import JAX_INTERPRETS_CLUSTER_CANCEL

import pallas_mgpu as plgpu
from h100_ops import mosaic_ops, sharded_lowered_module

LIBS = {"jax": jax_plgpu, "ours": plgpu}
BLOCKS = 3


def _claiming_kernel(gpu, interpret=True):
    """o[i] = 2 x[i] + (10 + j where the claim of block j succeeded)."""
    @functools.partial(
        gpu.kernel, out_type=jax.ShapeDtypeStruct((BLOCKS, 128), jnp.float32), grid=(BLOCKS,),
        grid_names=("x",), scratch_types=[gpu.TryClusterCancelResult(2), gpu.Barrier()],
        interpret=gpu.InterpretGPUParams() if interpret else None)
    def k(x_ref, o_ref, results, barrier):
        i = jax.lax.axis_index("x")
        gpu.try_cluster_cancel(results.at[1], barrier)
        gpu.barrier_wait(barrier)
        (j,), claimed = gpu.query_cluster_cancel(results.at[1], grid_names=("x",))
        o_ref[i] = x_ref[i] * 2 + jnp.where(claimed, 10.0 + j.astype(jnp.float32), 0.0)
    return k


@JAX_INTERPRETS_CLUSTER_CANCEL
def test_interpret_mode_matches_jax_and_numpy(rng):
    x = rng.standard_normal((BLOCKS, 128)).astype(np.float32)
    got = {name: np.asarray(jax.jit(_claiming_kernel(lib))(x)) for name, lib in LIBS.items()}
    np.testing.assert_array_equal(got["ours"], got["jax"])
    np.testing.assert_allclose(got["ours"], 2 * x.astype(np.float64), rtol=1e-7)


def _h100_ops(lib):
    # a mesh axis of another name than the kernel's grid axis "x"
    module = sharded_lowered_module(_claiming_kernel(lib, interpret=False),
                                    jax.ShapeDtypeStruct((BLOCKS, 128), jnp.float32), axis="d")
    return mosaic_ops(module), module


def test_lowers_for_h100_as_jaxs():
    (ours, module), (jaxs, _) = _h100_ops(plgpu), _h100_ops(jax_plgpu)
    assert ours == jaxs, (ours - jaxs, jaxs - ours)
    assert "clusterlaunchcontrol" in module          # the PTX of the request and the query


@pytest.mark.parametrize("num_buffers", [None, 4])
def test_result_scratch_is_jaxs(num_buffers):
    ours = plgpu.TryClusterCancelResult(num_buffers)
    assert ours.to_jax() == jax_plgpu.TryClusterCancelResult(num_buffers)


def _peer_store(lib):
    """Each CTA of a 2-CTA cluster stores a register array into its peer's SMEM."""
    tiled = (lib.TilingTransform((8, 64)), lib.SwizzleTransform(128))

    def body(x_ref, o_ref, smem, barrier):
        c = jax.lax.axis_index("c")
        value = lib.broadcasted_iota(jnp.float16, (64, 64), 1, layout=lib.Layout.WGMMA)
        lib.async_store_smem(value, smem, barrier, cluster_idx=1 - c, cluster_dim="c")
        lib.barrier_wait(barrier)
        lib.commit_smem()
        lib.copy_smem_to_gmem(smem, o_ref)
        lib.wait_smem_to_gmem(0)
    scratch = [lib.SMEM((64, 64), jnp.float16, transforms=tiled), lib.Barrier()]
    return body, scratch


def test_async_store_smem_lowers_for_h100_as_jaxs():
    from test_plain_ops import _lowered_ops
    got = {}
    for name, lib in LIBS.items():
        body, scratch = _peer_store(lib)
        got[name] = _lowered_ops(lib, lambda _: body, (64, 64), jnp.float16,
                                 lambda _: scratch, cluster=(2,), cluster_names=("c",))
    assert got["ours"] == got["jax"], (got["ours"] - got["jax"], got["jax"] - got["ours"])


def test_async_store_smem_refuses_an_unknown_atomic():
    with pytest.raises(ValueError, match="atomic must be one of"):
        plgpu.async_store_smem(jnp.zeros((64, 64)), None, None, cluster_idx=0, cluster_dim="c",
                               atomic="mul")
