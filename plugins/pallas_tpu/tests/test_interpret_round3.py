"""TPU interpret mode (``InterpretParams``), issue 32: each test failed before
its fix. References: NumPy in float64, XLA on CPU, JAX's own TPU interpret mode."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as jpl
from jax.experimental.pallas import tpu as jax_pltpu

import pallas_frontend as pl
import pallas_tpu


def _rand(seed, shape=(32, 128)):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("fn", [jax.nn.softplus, jax.nn.log_sigmoid], ids=lambda f: f.__name__)
def test_custom_jvp_functions_run_in_the_kernel(fn):
    # custom_jvp calls: re-bound with their bind params (was KeyError 'subfuns')
    x = _rand(1) * 30.0
    x[0, :4] = [0.0, -0.0, 88.0, -104.0]

    def k(x_ref, o_ref):
        o_ref[...] = fn(x_ref[...])
    shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
    got = pl.pallas_call(k, out_shape=shape, interpret=pallas_tpu.InterpretParams())(x)
    jax_tpu = jpl.pallas_call(k, out_shape=shape, interpret=jax_pltpu.InterpretParams())(x)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(jax_tpu))
    np.testing.assert_allclose(np.asarray(got), np.asarray(jax.jit(fn)(x)), rtol=2e-6, atol=1e-6)


def test_custom_jvp_with_a_kernel_primitive_inside():
    x = _rand(2, (4, 8, 128))

    @jax.custom_jvp
    def scaled(v):
        return v * (pl.program_id(0) + 1).astype(v.dtype)
    scaled.defjvp(lambda p, t: (scaled(*p), t[0]))

    def k(x_ref, o_ref):
        o_ref[...] = scaled(x_ref[...])
    spec = pl.BlockSpec((None, 8, 128), lambda i: (i, 0, 0))
    got = pl.pallas_call(k, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
                         in_specs=[spec], out_specs=spec,
                         interpret=pallas_tpu.InterpretParams())(x)
    want = x.astype(np.float64) * np.arange(1, 5)[:, None, None]
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)


class _PlainMesh:
    """A mesh as the API docs allow: any object with a ``shape`` mapping."""
    def __init__(self, **axes):
        self.shape = dict(axes)


def test_kernel_on_a_plain_mesh_updates_a_ref_in_place():
    x = _rand(3, (16, 128))

    def body(r):
        r[...] = r[...] * 0.5 + 1.0
    ref = jax.new_ref(jnp.asarray(x))
    pl.kernel(body, mesh=_PlainMesh(x=3), interpret=pallas_tpu.InterpretParams())(ref)
    want = x.astype(np.float64)
    for _ in range(3):
        want = want * 0.5 + 1.0
    np.testing.assert_allclose(np.asarray(ref[...]), want, rtol=1e-6)


def _half_writer(mod, interpret, x):
    def k(x_ref, o_ref):
        @mod.when(mod.program_id(0) % 2 == 0)
        def _():
            o_ref[...] = x_ref[...] * 2.0

        @mod.when(mod.program_id(0) == 1)       # block 1 is written in part
        def _():
            o_ref[0:4, :] = x_ref[0:4, :] - 1.0
    spec = mod.BlockSpec((8, 128), lambda i: (i, 0))
    return mod.pallas_call(k, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
                           in_specs=[spec], out_specs=spec, input_output_aliases={0: 0},
                           interpret=interpret)(x)


def test_aliased_blocks_not_written_keep_the_input():
    x = _rand(4)
    want = x.astype(np.float64).copy()
    want[0:8] *= 2.0
    want[8:12] -= 1.0
    want[16:24] *= 2.0
    got = _half_writer(pl, pallas_tpu.InterpretParams(), x)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
    # the built-in interpreter agrees bit for bit
    np.testing.assert_array_equal(np.asarray(got), np.asarray(_half_writer(pl, True, x)))


def test_aliased_blocks_revisited_keep_earlier_writes():
    # k axis revisits each output block: the input seeds it once, on the first visit
    x = _rand(5, (16, 128))

    def k(x_ref, o_ref):
        @pl.when(pl.program_id(1) == 1)
        def _():
            o_ref[...] += 3.0
    spec = pl.BlockSpec((8, 128), lambda i, j: (i, 0))
    got = pl.pallas_call(k, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2, 3),
                         in_specs=[spec], out_specs=spec, input_output_aliases={0: 0},
                         interpret=pallas_tpu.InterpretParams())(x)
    np.testing.assert_allclose(np.asarray(got), x.astype(np.float64) + 3.0, rtol=1e-6)


def _failing_check_call():
    def k(x_ref, o_ref):
        pl.debug_check(jnp.all(x_ref[...] < 10.0), "block holds a value >= 10")
        o_ref[...] = x_ref[...] * 2.0
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    return pl.pallas_call(k, out_shape=jax.ShapeDtypeStruct((32, 128), jnp.float32), grid=(4,),
                          in_specs=[spec], out_specs=spec,
                          interpret=pallas_tpu.InterpretParams())


def test_a_valid_call_after_a_failed_debug_check_runs():
    x = _rand(6)
    bad = x.copy()
    bad[20, 3] = 50.0                           # fails at grid point 2, after 0 and 1 ran
    f = _failing_check_call()
    with pl.enable_debug_checks(True):
        with pytest.raises(Exception, match="block holds a value >= 10"):
            jax.block_until_ready(f(bad))
        got = f(x)                              # was: "Revisited block" from the failed run
    np.testing.assert_allclose(np.asarray(got), 2.0 * x.astype(np.float64), rtol=1e-6)


def test_revisit_check_is_ours_and_still_refuses_revisits(monkeypatch):
    from pallas_tpu import _jax_private
    ipc = _jax_private.interpreter_module()

    def quadratic(*a, **k):
        raise AssertionError("JAX's quadratic revisit check was staged")
    monkeypatch.setattr(ipc, "_check_for_revisiting", quadratic)
    x = _rand(7, (24, 128))

    def k(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0
    in_spec = pl.BlockSpec((8, 128), lambda i: (i, 0))

    def call(out_map):
        return pl.pallas_call(
            k, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(3,), in_specs=[in_spec],
            out_specs=pl.BlockSpec((8, 128), out_map),
            interpret=pallas_tpu.InterpretParams())(x)
    np.testing.assert_allclose(np.asarray(call(lambda i: (i, 0))), x + 1.0, rtol=1e-6)
    # blocks 0, 1, 0: the same refusal as JAX's interpreter
    monkeypatch.undo()

    def jax_call():
        return jpl.pallas_call(
            k, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(3,),
            in_specs=[jpl.BlockSpec((8, 128), lambda i: (i, 0))],
            out_specs=jpl.BlockSpec((8, 128), lambda i: (i % 2, 0)),
            interpret=jax_pltpu.InterpretParams())(x)
    for run in (lambda: call(lambda i: (i % 2, 0)), jax_call):
        with pytest.raises(Exception, match=r"Revisited block .* of output 0 in iteration \(2,\)"):
            jax.block_until_ready(run())
        jax_pltpu.reset_tpu_interpret_mode_state()


def test_linear_revisit_check_scales():
    # 20000 grid points through the check alone: JAX's takes ~90 s here (it
    # scans every earlier point), ours well under a second per 10k points.
    import collections
    import time
    import types

    from pallas_tpu import _jax_private
    ipc = _jax_private.interpreter_module()
    with _jax_private.linear_revisit_check():
        check = ipc._check_for_revisiting
    saved = ipc._shared_memory
    ipc._shared_memory = types.SimpleNamespace(
        output_ranges=collections.defaultdict(list), check_failed=lambda: None)
    try:
        n, start = 20000, time.perf_counter()
        for i in range(n):
            block = _jax_private.output_block(8 * i, 8, 128, (8 * n, 128))
            check(np.int32(0), np.int32(0), np.int32(0), (np.int32(i),), block)
        assert time.perf_counter() - start < 30.0
    finally:
        ipc._shared_memory = saved


def _prefetch_gather(rows):
    def k(idx_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...] + idx_ref[pl.program_id(0)].astype(jnp.float32)
    gs = pallas_tpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(2,),
        in_specs=[pl.BlockSpec((rows, 128), lambda i, idx: (idx[i], 0))],
        out_specs=pl.BlockSpec((rows, 128), lambda i, idx: (i, 0)))
    return pl.pallas_call(k, out_shape=jax.ShapeDtypeStruct((2 * rows, 128), jnp.float32),
                          grid_spec=gs, interpret=pallas_tpu.InterpretParams())


def test_prefetched_block_index_whose_offset_wraps_is_refused():
    # (2**25 + 1) * 128 rows wraps in int32 to row 128, block 1: JAX's
    # interpreter reads it; refused here, naming the operand and the index
    x = _rand(8, (512, 128))
    with pytest.raises(Exception, match=r"args\[0\].*returned block index 33554433.*int32"):
        jax.block_until_ready(_prefetch_gather(128)(np.array([0, 2 ** 25 + 1], np.int32), x))
    idx = np.random.default_rng(9).permutation(4)[:2].astype(np.int32)
    got = _prefetch_gather(128)(idx, x)
    want = np.concatenate([x[128 * b:128 * (b + 1)].astype(np.float64) + b for b in idx])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)


def test_aliased_block_seeding_compiles_for_v5e(aot_compile):
    # the copy of the input block on each new output block lowers through Mosaic
    def k(x_ref, o_ref):
        @pl.when(pl.program_id(1) == 1)
        def _():
            o_ref[...] += 3.0
    spec = pl.BlockSpec((8, 128), lambda i, j: (i, 0))
    f = pl.pallas_call(k, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32), grid=(2, 3),
                       in_specs=[spec], out_specs=spec, input_output_aliases={0: 0},
                       compiler_params=pallas_tpu.CompilerParams())
    compiled, text = aot_compile(jax.jit(f), jnp.asarray(_rand(10, (16, 128))))
    assert compiled is not None and "tpu_custom_call" in text
