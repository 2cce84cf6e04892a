"""Kernels that write their input Refs (issue 24): a grid point sees an input
block as the earlier points left it, as in JAX's interpret mode. Compared with
JAX's own ``pallas_call(interpret=True)`` on fresh random data."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as jpl

import pallas_frontend as pl
import pallas_mgpu as plgpu

IP = {"interpret": plgpu.InterpretParams()}


def _add_one_and_copy(P, n_blocks, block, in_map, **call):
    def body(a, o):
        a[...] = a[...] + 1
        o[...] = a[...]
    return P.pallas_call(body, jax.ShapeDtypeStruct((n_blocks * block,), jnp.float32),
                         grid=(n_blocks,), in_specs=[P.BlockSpec((block,), in_map)],
                         out_specs=P.BlockSpec((block,), lambda i: (i,)), **call)


@pytest.mark.parametrize("in_map", [lambda i: (0,), lambda i: (i // 2,)],
                         ids=["one_block", "each_block_twice"])
def test_written_input_block_is_kept_while_unmoved(rng, in_map):
    a = rng.standard_normal(2 * 128).astype(np.float32)
    want = _add_one_and_copy(jpl, 4, 128, in_map, interpret=True)(a)
    got = _add_one_and_copy(pl, 4, 128, in_map, **IP)(a)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_written_input_shared_across_a_parallel_output_axis(rng):
    # Output blocks differ along i (a CTA axis for the outputs alone); the
    # written input block depends on j only, so i must run in one CTA too.
    def body(a, o):
        a[...] = a[...] * 2 + 1
        o[...] = a[...]

    def call(P, **kw):
        return P.pallas_call(body, jax.ShapeDtypeStruct((3, 8, 128), jnp.float32), grid=(3, 1),
                             in_specs=[P.BlockSpec((None, 8, 128), lambda i, j: (j, 0, 0))],
                             out_specs=P.BlockSpec((None, 8, 128), lambda i, j: (i, 0, 0)), **kw)
    a = rng.standard_normal((1, 8, 128)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(call(pl, **IP)(a)),
                               np.asarray(call(jpl, interpret=True)(a)), rtol=1e-6)


def test_written_input_revisited_along_an_outer_axis_runs_per_cta(rng):
    # Grid (2, 3), the input block follows j: i revisits each block, so j runs
    # as CTAs and each CTA walks i over one block (JAX's order gives the same).
    def body(a, o):
        a[...] = a[...] * 3 - 1
        o[...] = a[...]

    def call(P, **kw):
        return P.pallas_call(body, jax.ShapeDtypeStruct((2, 384), jnp.float32), grid=(2, 3),
                             in_specs=[P.BlockSpec((None, 128), lambda i, j: (0, j))],
                             out_specs=P.BlockSpec((None, 128), lambda i, j: (i, j)), **kw)
    a = rng.standard_normal((1, 384)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(call(pl, **IP)(a)),
                               np.asarray(call(jpl, interpret=True)(a)), rtol=1e-6)


def test_coming_back_to_a_written_input_block_is_refused(rng):
    # Blocks 0, 1, 0, 1: step 2 would need step 0's update, which the
    # pipeline dropped when it moved to block 1.
    f = _add_one_and_copy(pl, 4, 128, lambda i: (i % 2,), name="revisits_input", **IP)
    with pytest.raises(pl.backend_api.BackendCapabilityError,
                       match=r"(?s)revisits_input.*writes.*comes back to its block.*consecutive"):
        f(rng.standard_normal(256).astype(np.float32))


def test_written_input_kernel_lowers_for_cuda():
    from pallas_mgpu import _jax_private, aot
    fn = _add_one_and_copy(pl, 4, 128, lambda i: (i // 2,),
                           compiler_params=plgpu.CompilerParams())
    lowered = aot.lower_for_cuda(fn, jax.ShapeDtypeStruct((256,), jnp.float32))
    (module,) = _jax_private.mosaic_gpu_modules(lowered)
    assert "cp.async.bulk" in module or "async_load" in module      # the block's TMA fetch
