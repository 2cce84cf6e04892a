"""emit_pipeline traced into the kernel (pipeline_schedule.py): the pipeline's
own grid in ``pl.program_id``, the built-in interpreter, TPU interpret mode
and AOT for v5e, against NumPy on fresh random data."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu

ANY_SPEC = pl.BlockSpec(memory_space=pltpu.ANY)
MODES = [pytest.param(True, id="builtin"), pytest.param("tpu", id="tpu_interpret")]


def _interpret(mode):
    return pltpu.InterpretParams() if mode == "tpu" else mode


def _matmul(x, y, blk=128, no_pipelining=False, interpret=False, compiler_params=None):
    """JAX's test_pipeline_matmul: the body zeroes its output block when the
    pipeline's k index (pl.program_id(2)) is 0, then accumulates into it."""
    (m, k), n = x.shape, y.shape[1]

    def body(x_ref, y_ref, z_ref):
        @pl.when(pl.program_id(2) == 0)
        def _():
            z_ref[...] = jnp.zeros(z_ref.shape, jnp.float32)
        z_ref[...] += x_ref[...] @ y_ref[...]

    def kernel(x_ref, y_ref, z_ref):
        pltpu.emit_pipeline(
            body, grid=(m // blk, n // blk, k // blk),
            in_specs=[pl.BlockSpec((blk, blk), lambda i, j, l: (i, l)),
                      pl.BlockSpec((blk, blk), lambda i, j, l: (l, j))],
            out_specs=pl.BlockSpec((blk, blk), lambda i, j, l: (i, j)),
            no_pipelining=no_pipelining)(x_ref, y_ref, z_ref)

    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
        in_specs=[ANY_SPEC, ANY_SPEC], out_specs=ANY_SPEC,
        interpret=interpret, compiler_params=compiler_params)(x, y)


@pytest.mark.parametrize("no_pipelining", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_matmul_program_id_is_the_pipelines(mode, no_pipelining):
    rng = np.random.default_rng()
    x = rng.standard_normal((256, 384)).astype(np.float32)
    y = rng.standard_normal((384, 256)).astype(np.float32)
    out = _matmul(jnp.asarray(x), jnp.asarray(y), no_pipelining=no_pipelining,
                  interpret=_interpret(mode))
    np.testing.assert_allclose(np.asarray(out), x.astype(np.float64) @ y, rtol=1e-4, atol=1e-4)


def test_matmul_aot(aot_compile):
    z = jnp.zeros((256, 256), jnp.float32)
    _, text = aot_compile(functools.partial(_matmul, compiler_params=pltpu.CompilerParams()),
                          z, z)
    assert "tpu_custom_call" in text


def test_num_programs_and_traced_grid_builtin():
    """A grid size read from SMEM; pl.num_programs in the body is the pipeline's."""
    rng = np.random.default_rng()
    x = rng.standard_normal((48, 128)).astype(np.float32)
    rows = int(rng.integers(1, 6))          # blocks of 8 rows to process

    def kernel(n_ref, x_hbm, o_hbm):
        def body(x_ref, o_ref):
            o_ref[...] = x_ref[...] * pl.num_programs(0).astype(jnp.float32) \
                + pl.program_id(0).astype(jnp.float32)
        pltpu.emit_pipeline(body, grid=(n_ref[0],),
                            in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                            out_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))])(x_hbm, o_hbm)

    out = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), ANY_SPEC], out_specs=ANY_SPEC,
        input_output_aliases={1: 0}, interpret=True)(jnp.array([rows], jnp.int32),
                                                      jnp.asarray(x))
    want = x.astype(np.float64).copy()
    for i in range(rows):
        want[8 * i:8 * (i + 1)] = x[8 * i:8 * (i + 1)] * rows + i
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_whole_array_spec_and_revisited_input(mode):
    """A spec without block_shape (the whole operand, fetched once) next to a
    blocked one whose block repeats along the inner axis."""
    rng = np.random.default_rng()
    x = rng.standard_normal((16, 256)).astype(np.float32)
    b = rng.standard_normal((8, 128)).astype(np.float32)

    def kernel(x_hbm, b_hbm, o_hbm):
        def body(x_ref, b_ref, o_ref):
            o_ref[...] = x_ref[...] + b_ref[...] * 2.0
        pltpu.emit_pipeline(body, grid=(2, 2),
                            in_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, 0)),
                                      pl.BlockSpec()],
                            out_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, j))])(
            x_hbm, b_hbm, o_hbm)

    out = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        in_specs=[ANY_SPEC, ANY_SPEC], out_specs=ANY_SPEC,
        interpret=_interpret(mode))(jnp.asarray(x), jnp.asarray(b))
    want = np.concatenate([x[:, :128], x[:, :128]], axis=1).astype(np.float64) \
        + np.tile(b, (2, 2)) * 2.0
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_bounded_slice_over_vmem_operands(mode):
    """JAX's test_compute_slice_bounded_slice_vmem: sliding windows of a VMEM
    operand; the body sees the static BoundedSlice size."""
    rng = np.random.default_rng()
    x = rng.integers(-1000, 1000, size=(16, 8, 512)).astype(np.int32)
    seen = []

    def body(x_ref, o_ref):
        seen.append((x_ref.shape, o_ref.shape))
        o_ref[...] = x_ref[...] + 10

    spec = pl.BlockSpec((pl.BoundedSlice(6), 8, 256), lambda i, j: (pl.ds(i * 2, i + 3), 0, j),
                        memory_space=pltpu.VMEM)

    def kernel(x_hbm, o_hbm, x_vmem, o_vmem):
        pltpu.sync_copy(x_hbm, x_vmem)
        pltpu.sync_copy(x_hbm, o_vmem)
        pltpu.emit_pipeline(body, grid=(3, 2), in_specs=spec, out_specs=spec)(x_vmem, o_vmem)
        pltpu.sync_copy(o_vmem, o_hbm)

    out = np.asarray(pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), in_specs=[ANY_SPEC],
        out_specs=ANY_SPEC, scratch_shapes=[pltpu.VMEM(x.shape, jnp.int32)] * 2,
        interpret=_interpret(mode))(jnp.asarray(x)))
    assert set(seen) == {((6, 8, 256), (6, 8, 256))}
    for i in range(3):
        rows = slice(2 * i, 2 * i + i + 3)
        np.testing.assert_array_equal(out[rows], x[rows] + 10)


def test_bounded_slice_index_map_must_return_ds():
    spec = pl.BlockSpec((pl.BoundedSlice(8), 128), lambda i: (i * 8, 0), memory_space=pltpu.VMEM)

    def kernel(x_hbm, o_hbm, x_vmem):
        pltpu.emit_pipeline(lambda x, o: None, grid=(2,), in_specs=spec, out_specs=spec)(
            x_vmem, x_vmem)

    with pytest.raises(ValueError, match=r"Must return a pl.ds from the index_map"):
        pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
                       in_specs=[ANY_SPEC], out_specs=ANY_SPEC,
                       scratch_shapes=[pltpu.VMEM((16, 128), jnp.float32)],
                       interpret=True)(jnp.ones((16, 128), jnp.float32))


@pytest.mark.parametrize("case", ["bounded_slice_hbm", "ragged_block"])
def test_program_id_in_recorded_pipelines(case, aot_compile):
    """The pipelines kept as a recorded equation (JAX's emit_pipeline at
    lowering) also see the pipeline's grid in pl.program_id: TPU interpret
    mode against NumPy, and AOT for v5e."""
    rng = np.random.default_rng()
    rows = 40 if case == "bounded_slice_hbm" else 36
    x = rng.standard_normal((rows, 128)).astype(np.float32)
    if case == "bounded_slice_hbm":
        in_spec = pl.BlockSpec((pl.BoundedSlice(8), 128), lambda i: (pl.ds(5 * i + 2, 8), 0))
        window = lambda i: x[5 * i + 2:5 * i + 10]
    else:             # 8 does not divide 36: the operand has a ragged edge (not visited)
        in_spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        window = lambda i: x[8 * i:8 * i + 8]

    def call(x, interpret=False, compiler_params=None):
        def kernel(x_hbm, o_hbm):
            def body(x_ref, o_ref):
                o_ref[...] = x_ref[...] + pl.program_id(0).astype(jnp.float32) * 10.0
            pltpu.emit_pipeline(body, grid=(4,), in_specs=[in_spec],
                                out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)))(x_hbm, o_hbm)
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct((32, 128), jnp.float32),
            in_specs=[ANY_SPEC], out_specs=ANY_SPEC, interpret=interpret,
            compiler_params=compiler_params)(x)

    out = np.asarray(call(jnp.asarray(x), interpret=pltpu.InterpretParams()))
    for i in range(4):
        np.testing.assert_allclose(out[8 * i:8 * i + 8], window(i).astype(np.float64) + 10.0 * i,
                                   rtol=1e-6, atol=1e-6)
    _, text = aot_compile(functools.partial(call, compiler_params=pltpu.CompilerParams()),
                          jnp.zeros(x.shape, jnp.float32))
    assert "tpu_custom_call" in text


@pytest.mark.parametrize("mode", MODES)
def test_pytree_specs_and_explicit_indices(mode):
    """JAX's non-flat args: specs and operands as matching pytrees; and a body
    that takes a PipelineStep first (``_explicit_indices``)."""
    rng = np.random.default_rng()
    x, y, z = (rng.standard_normal((512,)).astype(np.float32) for _ in range(3))
    spec = pl.BlockSpec((256,), lambda i: (i,))

    def body(step, ins, outs):
        (xb,), (yb, zb) = ins[0], ins[2]
        scale = (step.index[0] + 1).astype(jnp.float32) + step.local_index.astype(jnp.float32)
        outs[0][...] = (xb[...] + yb[...]) * scale
        outs[1][...] = zb[...]

    def kernel(x_ref, y_ref, z_ref, o1, o2):
        pltpu.emit_pipeline(body, grid=(2,), in_specs=([(spec,), (), (spec, spec)],),
                            out_specs=([spec, spec],), _explicit_indices=True)(
            [(x_ref,), (), (y_ref, z_ref)], [o1, o2])

    o1, o2 = pl.pallas_call(
        kernel, out_shape=[jax.ShapeDtypeStruct((512,), jnp.float32)] * 2,
        in_specs=[ANY_SPEC] * 3, out_specs=[ANY_SPEC] * 2,
        interpret=_interpret(mode))(*map(jnp.asarray, (x, y, z)))
    want = (x.astype(np.float64) + y) * np.repeat([1.0, 3.0], 256)   # index + 1 + step
    np.testing.assert_allclose(np.asarray(o1), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(o2), z)


def test_empty_grid_is_refused_with_jaxs_words():
    with pytest.raises(ValueError, match="All elements in the grid must be strictly positive"):
        pltpu.emit_pipeline(lambda o: None, grid=(0,), out_specs=[pl.BlockSpec((8, 128))])
