"""Kernels that exercise what a TPU compiles (tiled blocks, VMEM and SMEM
scratch, scalar prefetch, aliasing, manual DMAs with semaphores, nested
pipelines, the hardware PRNG), each written once against the Pallas API and
run under ours (pallas_frontend + pallas_tpu) and under JAX's Pallas on the
same device arrays: ours must equal JAX's bit for bit, and both must lie within
tolerance of NumPy in float64.

On a TPU host (``tools/tpu_native.py run``) the kernels are compiled for the
chip; elsewhere both sides run in their TPU interpret modes, so the file is
checked on every CI run before it is spent on chip time."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend
import pallas_tpu

from jax.experimental import pallas as jax_pl
from jax.experimental.pallas import tpu as jax_pltpu

ON_CHIP = jax.default_backend() == "tpu"
SIDES = {"ours": (pallas_frontend, pallas_tpu), "jax": (jax_pl, jax_pltpu)}


def _chip_context():
    """Off the chip, JAX's TPU lowering (emit_pipeline's tiling) is told which chip
    to assume, as a v5e host would tell it."""
    if ON_CHIP:
        return contextlib.nullcontext()
    v5e = jax.sharding.AbstractDevice("TPU v5 lite", 1, "tpu")
    return jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((), (), abstract_device=v5e))


def run_both(build, *arrays, sides=tuple(SIDES)):
    """``build(pl, pltpu, **launch) -> fn`` run under each side on the same device
    arrays; returns {side: list of NumPy outputs}."""
    device_arrays = [jax.device_put(a) for a in arrays]
    results = {}
    for side in sides:
        pl, pltpu = SIDES[side]
        launch = {} if ON_CHIP else {"interpret": pltpu.InterpretParams()}
        with _chip_context():
            out = jax.jit(build(pl, pltpu, **launch))(*device_arrays)
        results[side] = [np.asarray(o) for o in jax.tree.leaves(out)]
    return results


def check(results, expected, rtol, atol=0.0):
    ours, theirs = results["ours"], results["jax"]
    assert len(ours) == len(theirs) == len(expected)
    for o, t, e in zip(ours, theirs, expected):
        assert o.dtype == t.dtype and o.shape == t.shape
        np.testing.assert_array_equal(o, t, err_msg="ours differs from JAX's Pallas")
        np.testing.assert_allclose(o.astype(np.float64), e, rtol=rtol, atol=atol)


@pytest.fixture
def rng(request):
    return np.random.default_rng(abs(hash(request.node.name)) % 2**32)


def _add(pl, pltpu, **launch):
    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + y_ref[...]
    spec = pl.BlockSpec((128, 256), lambda i, j: (i, j))
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((512, 1024), jnp.float32),
                          grid=(4, 4), in_specs=[spec, spec], out_specs=spec, **launch)


def test_blocked_add(rng):
    x, y = (rng.standard_normal((512, 1024), np.float32) for _ in range(2))
    check(run_both(_add, x, y), [x.astype(np.float64) + y], rtol=1e-6)


def _matmul(pl, pltpu, *, bm=256, bn=256, bk=512, **launch):
    def kernel(x_ref, y_ref, o_ref, acc_ref):
        @pl.when(pl.program_id(2) == 0)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)
        acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

        @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
        def _():
            o_ref[...] = acc_ref[...]

    def call(x, y):
        m, k = x.shape
        n = y.shape[1]
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
            grid=(m // bm, n // bn, k // bk),
            in_specs=[pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
                      pl.BlockSpec((bk, bn), lambda i, j, k: (k, j))],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
            scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
            compiler_params=pltpu.CompilerParams(
                dimension_semantics=("parallel", "parallel", "arbitrary")),
            **launch)(x, y)
    return call


def test_bf16_matmul_accumulating_over_k(rng):
    x = rng.standard_normal((512, 1024)).astype(jnp.bfloat16)
    y = rng.standard_normal((1024, 512)).astype(jnp.bfloat16)
    want = np.asarray(x, np.float64) @ np.asarray(y, np.float64)
    check(run_both(_matmul, x, y), [want], rtol=2e-2, atol=2e-2 * np.abs(want).max())


def _softmax(pl, pltpu, **launch):
    def kernel(x_ref, o_ref):
        x = x_ref[...]
        e = jnp.exp(x - jnp.max(x, axis=1, keepdims=True))
        o_ref[...] = e / jnp.sum(e, axis=1, keepdims=True)
    spec = pl.BlockSpec((64, 512), lambda i: (i, 0))
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((256, 512), jnp.float32),
                          grid=(4,), in_specs=[spec], out_specs=spec, **launch)


def test_row_softmax(rng):
    x = rng.standard_normal((256, 512), np.float32) * 4
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    check(run_both(_softmax, x), [e / e.sum(axis=1, keepdims=True)], rtol=1e-5, atol=1e-7)


def _gather_rows(pl, pltpu, **launch):
    def kernel(idx_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(6,),
        in_specs=[pl.BlockSpec((8, 256), lambda i, idx: (idx[i], 0))],
        out_specs=pl.BlockSpec((8, 256), lambda i, idx: (i, 0)))
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((48, 256), jnp.float32),
                          grid_spec=grid_spec, **launch)


def test_scalar_prefetch_gathers_blocks(rng):
    idx = rng.integers(0, 16, 6).astype(np.int32)
    x = rng.standard_normal((128, 256), np.float32)
    want = np.concatenate([x[8 * i:8 * i + 8] for i in idx]).astype(np.float64) * 2
    check(run_both(_gather_rows, idx, x), [want], rtol=0)


def _scale_in_place(pl, pltpu, **launch):
    def kernel(s_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...] * s_ref[0] + 1.0
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((256, 512), jnp.float32), grid=(2,),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM),
                  pl.BlockSpec((128, 512), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((128, 512), lambda i: (i, 0)),
        input_output_aliases={1: 0}, **launch)


def test_smem_scalar_and_aliased_output(rng):
    s = rng.standard_normal(1).astype(np.float32)
    x = rng.standard_normal((256, 512), np.float32)
    want = x.astype(np.float64) * s[0].astype(np.float64) + 1
    # x * s + 1 rounds once or twice (a TPU fuses it): half an ulp of the product's size
    atol = 2 ** -23 * float(np.abs(x * s[0]).max())
    check(run_both(_scale_in_place, s, x), [want], rtol=1e-6, atol=atol)


def _float8(dtype):
    def build(pl, pltpu, **launch):
        def kernel(x_ref, w_ref, a_ref, x8_ref, w32_ref, dot_ref):
            x8_ref[...] = x_ref[...].astype(dtype)
            w32_ref[...] = w_ref[...].astype(jnp.float32)
            dot_ref[...] = jax.lax.dot_general(a_ref[...], w_ref[...], (((1,), (0,)), ((), ())),
                                               preferred_element_type=jnp.float32)
        out = (jax.ShapeDtypeStruct((64, 128), dtype), jax.ShapeDtypeStruct((128, 128), jnp.float32),
               jax.ShapeDtypeStruct((64, 128), jnp.float32))
        return pl.pallas_call(kernel, out_shape=out, **launch)
    return build


NAN_COLUMN = 5


@pytest.mark.parametrize("name", ["float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e5m2"])
def test_float8_casts_and_mixed_dot(rng, name):
    """float32 -> float8 rounds to nearest even as ml_dtypes does (a value that
    rounds to zero is +0 in the fnuz type, whose 0x80 is NaN); the widening is
    exact; a bfloat16 x float8 dot carries the weights' NaN column under ours.

    JAX's Pallas is held to ours' bits outside that column only: on the chip
    (a v5e, libtpu 0.0.42.1, 2026-12-06) its bf16 x e4m3fn dot gives finite
    values there, where XLA's dot gives NaN; ours widens that operand first
    (``pallas_tpu.float8_dot``)."""
    import ml_dtypes
    ml = getattr(ml_dtypes, name)
    info = ml_dtypes.finfo(ml)
    x = rng.uniform(-float(info.max) / 2, float(info.max) / 2, (64, 128)).astype(np.float32)
    x[0, :6] = (0.0, -0.0, float(info.smallest_subnormal) / 4,
                -float(info.smallest_subnormal) / 4, float(info.smallest_subnormal), -float(info.max))
    w = (rng.standard_normal((128, 128)) * 4).astype(ml)
    w[:, NAN_COLUMN] = np.nan
    a = rng.standard_normal((64, 128)).astype(jnp.bfloat16)
    results = run_both(_float8(jnp.dtype(name)), x, w, a)
    check({s: r[:2] for s, r in results.items()},
          [x.astype(ml).astype(np.float64), w.astype(np.float64)], rtol=0)
    assert (np.asarray(results["ours"][0]).view(np.uint8) == x.astype(ml).view(np.uint8)).all()
    want = np.asarray(a, np.float64) @ w.astype(np.float64)
    scale = np.abs(np.asarray(a, np.float64)) @ np.nan_to_num(np.abs(w.astype(np.float64)))
    dots = {s: r[2:] for s, r in results.items()}
    finite = np.arange(want.shape[1]) != NAN_COLUMN
    # the products are exact in float32; only the order of the float32 sums may differ
    check({s: [d[0][:, finite]] for s, d in dots.items()}, [want[:, finite]], rtol=1e-5,
          atol=2 ** -16 * scale.max())
    assert np.isnan(dots["ours"][0][:, NAN_COLUMN]).all()


def _manual_dma(pl, pltpu, **launch):
    def kernel(x_hbm, o_ref, buf, sem):
        for half in range(2):
            copy = pltpu.make_async_copy(x_hbm.at[pl.ds(half * 64, 64)], buf, sem)
            copy.start()
            copy.wait()
            o_ref[pl.ds(half * 64, 64), :] = jnp.tanh(buf[...])
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((128, 256), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec((128, 256), lambda: (0, 0)),
        scratch_shapes=[pltpu.VMEM((64, 256), jnp.float32), pltpu.SemaphoreType.DMA],
        **launch)


def test_manual_dma_with_a_semaphore(rng):
    x = rng.standard_normal((128, 256), np.float32)
    # a TPU's tanh is an approximation (measured on a v5e: 8e-5 relative at most)
    rtol = 2e-4 if ON_CHIP else 2e-6
    check(run_both(_manual_dma, x), [np.tanh(x.astype(np.float64))], rtol=rtol, atol=1e-6)


def _nested_pipeline(pl, pltpu, **launch):
    def inner(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 3.0 - 1.0

    def kernel(x_hbm, o_hbm):
        spec = pl.BlockSpec((64, 256), lambda i: (i, 0))
        pltpu.emit_pipeline(inner, grid=(4,), in_specs=[spec], out_specs=[spec])(x_hbm, o_hbm)
    any_spec = pl.BlockSpec(memory_space=pl.ANY)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((256, 256), jnp.float32),
                          in_specs=[any_spec], out_specs=any_spec, **launch)


def test_emit_pipeline_over_hbm_operands(rng):
    x = rng.standard_normal((256, 256), np.float32)
    atol = 2 ** -23 * 3 * float(np.abs(x).max())     # x * 3 - 1 may round once or twice
    check(run_both(_nested_pipeline, x), [x.astype(np.float64) * 3 - 1], rtol=1e-6, atol=atol)


def _random_bits(pl, pltpu, **launch):
    def kernel(seed_ref, o_ref):
        pltpu.prng_seed(seed_ref[0], pl.program_id(0))
        o_ref[...] = pltpu.prng_random_bits(o_ref.shape)
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((32, 256), jnp.int32), grid=(4,),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
        out_specs=pl.BlockSpec((8, 256), lambda i: (i, 0)), **launch)


def test_hardware_prng_bits_equal_jaxs():
    seed = np.array([1234], np.int32)
    # JAX's TPU interpreter draws no bits (zeros): only the chip has JAX's to compare
    results = run_both(_random_bits, seed, sides=tuple(SIDES) if ON_CHIP else ("ours",))
    ours = results["ours"][0]
    if ON_CHIP:
        np.testing.assert_array_equal(ours, results["jax"][0])
    # independent of the code under test: bits spread over the whole word, blocks differ
    as_bits = np.unpackbits(ours.view(np.uint8))
    assert 0.45 < as_bits.mean() < 0.55
    assert len({ours[8 * i:8 * i + 8].tobytes() for i in range(4)}) == 4


def _stateful_samples(pl, pltpu, **launch):
    def kernel(seed_ref, u_ref, n_ref):
        pltpu.prng_seed(seed_ref[0], pl.program_id(0))
        u_ref[...] = pltpu.stateful_uniform(u_ref.shape, minval=-2.0, maxval=3.0)
        n_ref[...] = pltpu.stateful_normal(n_ref.shape)
    spec = pl.BlockSpec((8, 256), lambda i: (i, 0))
    shape = jax.ShapeDtypeStruct((32, 256), jnp.float32)
    return pl.pallas_call(kernel, out_shape=(shape, shape), grid=(4,),
                          in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM)],
                          out_specs=(spec, spec), **launch)


def test_stateful_uniform_and_normal_equal_jaxs():
    # issue 38: ours turns the chip's bits into samples as JAX does, to the bit;
    # off the chip JAX's interpreter draws no bits, so only ours runs there
    seed = np.array([np.random.default_rng().integers(1 << 30)], np.int32)
    results = run_both(_stateful_samples, seed, sides=tuple(SIDES) if ON_CHIP else ("ours",))
    uniform, normal = results["ours"]
    if ON_CHIP:
        for o, t in zip(results["ours"], results["jax"]):
            np.testing.assert_array_equal(o, t, err_msg="ours differs from JAX's Pallas")
        # independent of both: the samples' range and moments (8192 each)
        assert uniform.min() >= -2.0 and uniform.max() < 3.0
        assert abs(uniform.mean() - 0.5) < 0.1 and abs(normal.mean()) < 0.05
        assert abs(normal.std() - 1.0) < 0.05
    assert np.isfinite(normal).all() and uniform.shape == normal.shape == (32, 256)


def _uniform_from_a_key_in_core_map(pl, pltpu, **launch):
    # JAX's tpu_pallas_random_test::test_key_in_core_map, as a builder
    def main(refs):
        key_hbm, o_ref = refs

        @pl.core_map(pltpu.create_tensorcore_mesh("core"), **launch)
        def _():
            def scoped(key_smem, o_vmem):
                pltpu.sync_copy(key_hbm, key_smem)
                o_vmem[...] = jax.random.uniform(key_smem[...], shape=o_ref.shape)
                pltpu.sync_copy(o_vmem, o_ref)
            pl.run_scoped(scoped, pltpu.SMEM((), key_hbm.dtype),
                          pltpu.VMEM(o_ref.shape, o_ref.dtype))

    def f(key):
        _, y = pl.run_state(main)((key, jnp.zeros((8, 128), jnp.float32)))
        return y
    return f


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_pallas_key_copied_to_smem_in_core_map(rng):
    seed = int(rng.integers(2**31))
    sides = tuple(SIDES) if ON_CHIP else ("ours",)   # JAX's TPU interpreter holds no keys
    results = {}
    for side in sides:
        key = SIDES[side][1].to_pallas_key(jax.random.key(seed, impl="rbg"))
        results[side] = run_both(_uniform_from_a_key_in_core_map, key, sides=(side,))[side][0]
    ours = results["ours"]
    if ON_CHIP:
        np.testing.assert_array_equal(ours, results["jax"], err_msg="ours differs from JAX's")
    else:      # both sides lower for a v5e without one
        for pl, pltpu in SIDES.values():
            key = pltpu.to_pallas_key(jax.random.key(seed, impl="rbg"))
            with _chip_context():
                jax.jit(_uniform_from_a_key_in_core_map(pl, pltpu)).trace(key).lower(
                    lowering_platforms=("tpu",))
    # independent of the code under test: uniform on [0, 1), mean 1/2 within 6 sigma
    assert ours.shape == (8, 128) and 0.0 <= ours.min() and ours.max() < 1.0
    assert abs(ours.mean() - 0.5) < 6 * np.sqrt(1 / 12 / ours.size)
    assert len(np.unique(ours)) > ours.size // 2
