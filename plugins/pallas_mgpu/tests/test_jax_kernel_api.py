"""``pallas_mgpu.kernel`` / ``Mesh`` take what JAX's ``plgpu.kernel`` / ``plgpu.Mesh``
take (the forms JAX's Mosaic GPU interpret tests use); each kernel runs once
with JAX's API and once with ours, in GPU interpret mode, against NumPy."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as jax_pl
from jax_window import jplgpu as jax_plgpu  # JAX's plgpu (with 0.10's GPU interpret API)

import pallas_frontend as pl
import pallas_mgpu as plgpu

APIS = {"jax": (jax_pl, jax_plgpu), "ours": (pl, plgpu)}


def _scaled_copy(api, n):
    """x -> 2 * x + 1 through two SMEM buffers given as keyword scratch Refs."""
    _, gpu = APIS[api]

    @functools.partial(
        gpu.kernel, out_type=jax.ShapeDtypeStruct((n,), jnp.float32),
        scratch_types=dict(tmp=gpu.SMEM((n,), jnp.float32), twice=gpu.SMEM((n,), jnp.float32)),
        interpret=gpu.InterpretGPUParams())
    def k(x_ref, o_ref, *, twice, tmp):
        tmp[...] = x_ref[...]
        twice[...] = tmp[...] * 2
        o_ref[...] = twice[...] + 1
    return k


@pytest.mark.parametrize("api", APIS)
def test_dict_scratch_types_reach_the_body_as_keywords(api, rng):
    x = rng.standard_normal(128).astype(np.float32)
    got = jax.jit(_scaled_copy(api, 128))(x)
    np.testing.assert_allclose(got, 2 * x.astype(np.float64) + 1, rtol=1e-6)


def _thread_ids(api, num_threads, grid):
    """Each (CTA, warpgroup) writes grid_index * 100 + thread_index + x."""
    _, gpu = APIS[api]

    @functools.partial(
        gpu.kernel, out_type=jax.ShapeDtypeStruct((grid, num_threads), jnp.int32),
        grid=(grid,), grid_names=("g",), num_threads=num_threads, thread_name="t",
        interpret=gpu.InterpretGPUParams(detect_races=True))
    def k(x_ref, o_ref):
        g, t = jax.lax.axis_index("g"), jax.lax.axis_index("t")
        o_ref[g, t] = g * 100 + t + x_ref[g, t]
    return k


@pytest.mark.parametrize("num_threads", [1, 5, 16])
def test_axis_index_under_enable_checks_and_up_to_16_threads(num_threads, rng):
    grid = 2
    x = rng.integers(-1000, 1000, (grid, num_threads)).astype(np.int32)
    want = np.arange(grid)[:, None] * 100 + np.arange(num_threads)[None, :] + x
    with jax.enable_checks(True):
        got = {api: np.asarray(jax.jit(_thread_ids(api, num_threads, grid))(x)) for api in APIS}
    for api in APIS:
        np.testing.assert_array_equal(got[api], want, err_msg=api)


def test_more_than_16_threads_is_refused_like_jax():
    for api in APIS:
        with pytest.raises(ValueError, match="16"):
            _thread_ids(api, 17, 1)(np.zeros((1, 17), np.int32))


@pytest.mark.parametrize("num_threads", [1, 3, 8])
def test_core_map_over_a_mesh_updates_closed_over_refs(num_threads, rng):
    x = rng.integers(-1000, 1000, num_threads).astype(np.int32)
    results = {}
    for api, (pal, gpu) in APIS.items():
        @pal.run_state
        def kernel(o_ref):
            mesh = gpu.Mesh(num_threads=num_threads, thread_name="x")

            @pal.core_map(mesh, interpret=gpu.InterpretGPUParams(detect_races=True))
            def _():
                t = jax.lax.axis_index("x")
                o_ref[t] = o_ref[t] * 3 + t     # reads what was in the Ref before
        with jax.enable_checks(True):
            results[api] = np.asarray(kernel(jnp.asarray(x)))
    for api, got in results.items():
        np.testing.assert_array_equal(got, x * 3 + np.arange(num_threads), err_msg=api)


def test_mesh_with_grid_and_threads_through_pl_kernel(rng):
    x = rng.standard_normal((2, 4, 128)).astype(np.float32)
    results = {}
    for api, (pal, gpu) in APIS.items():
        mesh = gpu.Mesh(grid=(2,), grid_names=("g",), num_threads=4, thread_name="t")

        @functools.partial(pal.kernel, out_type=jax.ShapeDtypeStruct(x.shape, jnp.float32),
                           mesh=mesh, interpret=gpu.InterpretGPUParams())
        def k(x_ref, o_ref):
            g, t = jax.lax.axis_index("g"), jax.lax.axis_index("t")
            o_ref[g, t] = x_ref[g, t] * (g + 1).astype(jnp.float32) - t.astype(jnp.float32)
        results[api] = np.asarray(jax.jit(k)(x))
    want = x * (np.arange(2)[:, None, None] + 1) - np.arange(4)[None, :, None]
    for api, got in results.items():
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=api)


def test_mesh_fields_are_validated_like_jax():
    with pytest.raises(ValueError):
        plgpu.Mesh(num_threads=2)                 # thread_name missing
    with pytest.raises(ValueError):
        plgpu.Mesh(grid=(2,), grid_names=())
    with pytest.raises(ValueError):
        plgpu.Mesh(cluster=(1, 1, 1, 1), cluster_names=("a", "b", "c", "d"))
    assert dict(plgpu.Mesh(grid=(2, 3), grid_names=("a", "b"), num_threads=2,
                           thread_name="t").shape) == dict(
        jax_plgpu.Mesh(grid=(2, 3), grid_names=("a", "b"), num_threads=2, thread_name="t").shape)


def test_jax_interpret_params_are_taken_as_ours(rng):
    """JAX's Mosaic GPU tests pass JAX's own InterpretGPUParams (and its race
    detector's state is JAX's, which our kernels run through)."""
    from jax._src.pallas.mosaic_gpu.interpret import interpret_pallas_call as jax_interp
    x = rng.standard_normal(128).astype(np.float32)

    @functools.partial(plgpu.kernel, out_type=jax.ShapeDtypeStruct((2,), jnp.float32),
                       num_threads=2, thread_name="t",
                       interpret=jax_plgpu.InterpretGPUParams(detect_races=True, on_race="warn"))
    def racy(x_ref, o_ref):
        o_ref[...] = x_ref[:2] + jax.lax.axis_index("t").astype(jnp.float32)
    jax_interp.gpu_callbacks.reset_gpu_interpret_mode_state()
    racy(x)
    assert jax_interp.get_races().races_found

    k = _scaled_copy("ours", 128)
    with plgpu.force_gpu_interpret_mode(jax_plgpu.InterpretGPUParams()):
        np.testing.assert_allclose(k(x), 2 * x.astype(np.float64) + 1, rtol=1e-6)


def test_core_map_over_warps_inside_a_kernel(rng):
    x = rng.integers(-1000, 1000, 5).astype(np.int32)
    results = {}
    for api, (pal, gpu) in APIS.items():
        @functools.partial(gpu.kernel, out_type=jax.ShapeDtypeStruct((5,), jnp.int32),
                           interpret=gpu.InterpretGPUParams(detect_races=True))
        def k(x_ref, o_ref):
            o_ref[...] = jnp.zeros((5,), jnp.int32)

            @pal.core_map(gpu.WarpMesh(axis_name="warp"))
            def _():
                w = jax.lax.axis_index("warp")
                for i in range(5):              # warp 4 does not exist: o[4] stays 0
                    @pal.when(w == i)
                    def _():
                        o_ref[i] = x_ref[i] * 2 + i
        with jax.enable_checks(True):
            results[api] = np.asarray(k(x))
    want = x * 2 + np.arange(5)
    want[4] = 0
    for api, got in results.items():
        np.testing.assert_array_equal(got, want, err_msg=api)


@pytest.mark.parametrize("api", APIS)
def test_smem_to_tmem_copy_and_broadcasted_iota(api, rng):
    """x -> SMEM -> TMEM (async_copy_smem_to_tmem) -> registers, plus a row iota."""
    _, gpu = APIS[api]
    shape = (128, 128)

    @functools.partial(
        gpu.kernel, out_type=jax.ShapeDtypeStruct(shape, jnp.float32),
        scratch_types=dict(src=gpu.SMEM(shape, jnp.float32), tmem=gpu.TMEM(shape, jnp.float32),
                           bar=gpu.Barrier(), mma_bar=gpu.Barrier(orders_tensor_core=True)),
        interpret=gpu.InterpretGPUParams(detect_races=True))
    def k(x_ref, o_ref, src, tmem, bar, mma_bar):
        gpu.copy_gmem_to_smem(x_ref, src, bar)
        gpu.barrier_wait(bar)
        gpu.async_copy_smem_to_tmem(src, tmem)
        gpu.tcgen05_commit_arrive(mma_bar)
        gpu.barrier_wait(mma_bar)
        v = gpu.async_load_tmem(tmem)
        gpu.wait_load_tmem()
        o_ref[...] = v + gpu.broadcasted_iota(jnp.int32, shape, 0).astype(jnp.float32)
    x = rng.standard_normal(shape).astype(np.float32)
    got = k(x)
    np.testing.assert_allclose(got, x.astype(np.float64) + np.arange(128)[:, None], rtol=1e-6)


def test_transform_is_the_base_of_smem_transforms():
    assert isinstance(plgpu.TilingTransform((8, 64)), plgpu.Transform)
    assert isinstance(plgpu.SwizzleTransform(128), plgpu.Transform)
    with pytest.raises(TypeError, match="SMEM transform"):
        plgpu.SMEM((8, 64), jnp.float16, transforms=(object(),))


@pytest.mark.parametrize("api", APIS)
def test_pallas_call_takes_mgpu_block_specs_and_dict_scratch(api, rng):
    """JAX's test_tiling_and_swizzle_transforms_with_pallas_call, on random data."""
    pal, gpu = APIS[api]
    x = rng.standard_normal((128, 128)).astype(np.float16)

    def body(x_ref, o_ref, smem_ref1, smem_ref2, smem_ref3):
        smem_ref1[...] = jnp.full_like(smem_ref1, 2.0)
        smem_ref2[...] = x_ref[...].reshape(smem_ref2.shape)
        smem_ref3[...] = jnp.full_like(smem_ref3, 1.0)
        o_ref[...] = (smem_ref1[0, ...] * smem_ref2[...].reshape((128, 128)) + smem_ref3[:128])

    f = pal.pallas_call(
        body, out_shape=jax.ShapeDtypeStruct((128, 128), jnp.float16),
        in_specs=[gpu.BlockSpec((128, 128), lambda: (0, 0), memory_space=gpu.SMEM)],
        out_specs=gpu.BlockSpec((128, 128), memory_space=gpu.SMEM),
        scratch_shapes=dict(
            smem_ref1=gpu.SMEM((2, 128, 128), jnp.float16, transforms=(
                gpu.TilingTransform((8, 64)), gpu.SwizzleTransform(128))),
            smem_ref2=gpu.SMEM((4, 128, 32), jnp.float16, transforms=(gpu.SwizzleTransform(64),)),
            smem_ref3=gpu.SMEM((256, 128), jnp.float16, transforms=(gpu.TilingTransform((16, 32)),)),
        ),
        interpret=gpu.InterpretGPUParams())
    got = np.asarray(jax.jit(f)(x), np.float64)
    np.testing.assert_allclose(got, 2 * x.astype(np.float64) + 1, rtol=2e-3, atol=2e-3)


def test_core_map_over_a_mesh_takes_jax_interpret_params(rng):
    x = rng.integers(-1000, 1000, 4).astype(np.int32)

    @pl.run_state
    def kernel(o_ref):
        @pl.core_map(plgpu.Mesh(num_threads=4, thread_name="x"),
                     interpret=jax_plgpu.InterpretGPUParams(detect_races=True))
        def _():
            t = jax.lax.axis_index("x")
            o_ref[t] = o_ref[t] - t
    np.testing.assert_array_equal(kernel(jnp.asarray(x)), x - np.arange(4))


def _small_matmul(api, interpret):
    """A (4, 8) @ (8, 2) matmul of whole GMEM operands: no WGMMA tile fits."""
    _, gpu = APIS[api]

    @functools.partial(gpu.kernel, out_type=jax.ShapeDtypeStruct((4, 2), jnp.float32),
                       interpret=gpu.InterpretGPUParams() if interpret else None)
    def k(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] @ y_ref[...]
    return k


def test_any_matmul_shape_runs_in_interpret_mode_and_is_refused_when_compiling(rng):
    from pallas_frontend.backend_api import BackendCapabilityError
    from pallas_mgpu import aot
    x = rng.standard_normal((4, 8)).astype(np.float32)
    y = rng.standard_normal((8, 2)).astype(np.float32)
    for api in APIS:
        np.testing.assert_allclose(_small_matmul(api, True)(x, y), x.astype(np.float64) @ y,
                                   rtol=1e-5, atol=1e-5, err_msg=api)
    s = [jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(y.shape, y.dtype)]
    with pytest.raises(BackendCapabilityError, match="WGMMA tiles are 64 rows"):
        aot.lower_for_cuda(_small_matmul("ours", False), *s)


def test_jax_force_gpu_interpret_mode_runs_our_kernels(rng):
    from jax._src.pallas.mosaic_gpu.interpret.params import force_gpu_interpret_mode
    x = rng.standard_normal(128).astype(np.float32)

    @functools.partial(plgpu.kernel, out_type=jax.ShapeDtypeStruct((128,), jnp.float32))
    def k(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 3
    with force_gpu_interpret_mode(jax_plgpu.InterpretGPUParams()):
        np.testing.assert_allclose(jax.jit(k)(x), 3 * x.astype(np.float64), rtol=1e-6)


@pytest.mark.parametrize("with_bias", [False, True])
def test_none_operand_reaches_the_body_as_none(with_bias, rng):
    """JAX's kernels pass optional operands as None (hopper_matmul_mgpu's c)."""
    x = rng.standard_normal(128).astype(np.float32)
    bias = rng.standard_normal(128).astype(np.float32) if with_bias else None
    results = {}
    for api, (_, gpu) in APIS.items():
        @functools.partial(gpu.kernel, out_type=jax.ShapeDtypeStruct((128,), jnp.float32),
                           interpret=gpu.InterpretGPUParams())
        def k(x_ref, b_ref, o_ref):
            o_ref[...] = x_ref[...] * 2 + (0 if b_ref is None else b_ref[...])
        results[api] = np.asarray(k(x, bias))
    want = 2 * x.astype(np.float64) + (0 if bias is None else bias)
    for api, got in results.items():
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=api)


def test_parameterized_layouts_oob_fill_mode_and_tiling_are_jax_s():
    assert plgpu.Layout.WG_STRIDED((128,), vec_size=1).to_jax() == \
        jax_plgpu.Layout.WG_STRIDED((128,), vec_size=1)
    tiled = plgpu.Layout.TILED(plgpu.Tiling(((64, 8), (16, 8), (8, 8), (2,))), warp_dims=(-7,),
                               lane_dims=(-3, -2), vector_dim=-1)
    assert tiled.to_jax() == jax_plgpu.Layout.TILED(
        jax_plgpu.Tiling(((64, 8), (16, 8), (8, 8), (2,))), warp_dims=(-7,), lane_dims=(-3, -2),
        vector_dim=-1)
    for mode in plgpu.OOBFillMode:
        assert mode.to_jax() == getattr(jax_plgpu.OOBFillMode, mode.name)
    spec = plgpu.BlockSpec((64, 64), lambda i: (i, 0), None, (), 0, (),
                           plgpu.OOBFillMode.UNDEFINED)
    assert spec.oob_fill_mode is plgpu.OOBFillMode.UNDEFINED     # JAX's positional order


def test_ref_swap_returns_the_old_value_and_plain_writes_do_not_read(rng):
    """A swap whose old value is used reads it; ``o[i] = v`` replays as a
    write only (the kernel jaxpr keeps the swap's unused result)."""
    from pallas_mgpu import evaluate
    x = rng.standard_normal(8).astype(np.float32)
    reads = []
    real = evaluate._has_uses
    try:
        evaluate._has_uses = lambda eqn: reads.append(real(eqn)) or reads[-1]

        @functools.partial(plgpu.kernel, out_type=(jax.ShapeDtypeStruct((8,), jnp.float32),) * 2,
                           interpret=plgpu.InterpretGPUParams())
        def k(x_ref, o_ref, old_ref):
            o_ref[...] = x_ref[...]                       # a write nobody reads back
            old_ref[...] = jax.ref.swap(o_ref, (), x_ref[...] * 2)
        o, old = k(x)
    finally:
        evaluate._has_uses = real
    np.testing.assert_allclose(o, 2 * x.astype(np.float64), rtol=1e-6)
    np.testing.assert_allclose(old, x, rtol=0)
    assert reads.count(False) >= 2 and reads.count(True) == 1, reads
