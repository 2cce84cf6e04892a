"""BufferedRef / BufferType / emit_pipeline_with_allocations: pipelines over
allocations made by the user, in the built-in interpreter, TPU interpret
mode and AOT for v5e, against NumPy on fresh random data."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu

MODES = [pytest.param(True, id="builtin"), pytest.param("tpu", id="tpu_interpret")]
ANY_SPEC = pl.BlockSpec(memory_space=pltpu.ANY)


def _interpret(mode):
    return pltpu.InterpretParams() if mode == "tpu" else mode


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# --- JAX's test_matmul_with_input_output: BufferedRefs as scratch_shapes ----------------

def _matmul(x, y, blk=128, interpret=False, compiler_params=None):
    (m, k), n = x.shape, y.shape[1]
    allocs = [
        pltpu.BufferedRef.input(pl.BlockSpec((blk, blk), lambda i, j, l: (i, l)), jnp.float32),
        pltpu.BufferedRef.input(pl.BlockSpec((blk, blk), lambda i, j, l: (l, j)), jnp.float32),
        pltpu.BufferedRef.input_output(pl.BlockSpec((blk, blk), lambda i, j, l: (i, j)),
                                       jnp.float32)]

    def kernel(x_hbm, y_hbm, o_hbm, x_bref, y_bref, o_bref):
        def inner(x_ref, y_ref, o_ref):
            @pl.when(pl.program_id(2) == 0)     # the pipeline's own grid, as in JAX
            def _():
                o_ref[...] = jnp.zeros_like(o_ref)
            o_ref[...] += x_ref[...] @ y_ref[...]
        pltpu.emit_pipeline(inner, grid=(m // blk, n // blk, k // blk))(
            x_hbm, y_hbm, o_hbm, allocations=[x_bref, y_bref, o_bref])

    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
        in_specs=[ANY_SPEC, ANY_SPEC], out_specs=ANY_SPEC, scratch_shapes=allocs,
        interpret=interpret, compiler_params=compiler_params)(x, y)


@pytest.mark.parametrize("mode", MODES)
def test_matmul_input_output_scratch(mode):
    rng = np.random.default_rng()
    x, y = _rand(rng, 256, 384), _rand(rng, 384, 256)
    out = _matmul(jnp.asarray(x), jnp.asarray(y), interpret=_interpret(mode))
    np.testing.assert_allclose(np.asarray(out), x.astype(np.float64) @ y, rtol=1e-4, atol=1e-4)


def test_matmul_input_output_aot(aot_compile):
    z = jnp.zeros((256, 256), jnp.float32)
    _, text = aot_compile(
        functools.partial(_matmul, compiler_params=pltpu.CompilerParams()), z, z)
    assert "tpu_custom_call" in text


# --- emit_pipeline_with_allocations + run_scoped, buffer counts, revisited outputs --------

def _row_sums(x, counts, interpret=False, compiler_params=None):
    """o[i] = sum over j of x's (8, 128) blocks (i, j): the output block is
    revisited along j (written back only when i changes)."""
    rows, cols = x.shape
    in_count, out_count = counts

    def kernel(x_hbm, o_hbm):
        def body(x_ref, o_ref):
            @pl.when(pl.program_id(1) == 0)
            def _():
                o_ref[...] = jnp.zeros_like(o_ref)
            o_ref[...] += x_ref[...] * 2.0
        pipeline, make = pltpu.emit_pipeline_with_allocations(
            body, grid=(rows // 8, cols // 128),
            in_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, j),
                                   pipeline_mode=pl.Buffered(in_count))],
            out_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, 0),
                                    pipeline_mode=pl.Buffered(out_count))])
        pl.run_scoped(lambda allocs: pipeline(x_hbm, o_hbm, allocations=allocs),
                      make(x_hbm, o_hbm))

    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((rows, 128), jnp.float32),
        in_specs=[ANY_SPEC], out_specs=ANY_SPEC,
        interpret=interpret, compiler_params=compiler_params)(x)


@pytest.mark.parametrize("counts", [(2, 2), (3, 1), (1, 3)])
@pytest.mark.parametrize("mode", MODES)
def test_with_allocations_buffer_counts(mode, counts):
    rng = np.random.default_rng()
    x = _rand(rng, 32, 384)
    out = _row_sums(jnp.asarray(x), counts, interpret=_interpret(mode))
    want = 2.0 * x.astype(np.float64).reshape(32, 3, 128).sum(axis=1)
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5, atol=1e-5)


def test_with_allocations_aot(aot_compile):
    z = jnp.zeros((32, 384), jnp.float32)
    _, text = aot_compile(functools.partial(_row_sums, counts=(3, 2),
                                            compiler_params=pltpu.CompilerParams()), z)
    assert "tpu_custom_call" in text


# --- a BufferedRef subclass that fetches its blocks itself (vLLM's pattern) ---------------

@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True, kw_only=True)
class GatherRows(pltpu.BufferedRef):
    """Gathers ``tile`` rows of a table, picked by an SMEM index array, per block."""
    tile: int = dataclasses.field(metadata=dict(static=True))

    @classmethod
    def make(cls, spec, dtype, tile):
        base = pltpu.BufferedRef.create(spec=spec, dtype_or_type=dtype,
                                        buffer_type=pltpu.BufferType.INPUT, buffer_count=2,
                                        grid_rank=1, use_lookahead=False)
        return cls(tile=tile, **{f.name: getattr(base, f.name)
                                 for f in dataclasses.fields(pltpu.BufferedRef)})

    def copy_in(self, src_ref, grid_indices):
        table, idx = src_ref
        slot = self.current_copy_in_slot
        for r in range(self.tile):
            row = idx[grid_indices[0] * self.tile + r]
            pltpu.make_async_copy(table.at[pl.ds(row, 1)], self.window_ref.at[slot, pl.ds(r, 1)],
                                  self.sem_recvs.at[slot]).start()

    def wait_in(self, src_ref, grid_indices):
        slot = self.current_wait_in_slot
        for r in range(self.tile):   # one wait per row copy started on this semaphore
            dst = self.window_ref.at[slot, pl.ds(r, 1)]
            pltpu.make_async_copy(dst, dst, self.sem_recvs.at[slot]).wait()


def _gather_scale(table, idx, tile=8, interpret=False, compiler_params=None):
    n = idx.shape[0]
    width = table.shape[1]
    spec = pl.BlockSpec((tile, width), lambda i: (i, 0))

    def kernel(table_hbm, idx_smem, o_hbm):
        def body(rows_ref, o_ref):
            o_ref[...] = rows_ref[...] * 3.0 + 1.0
        pipeline = pltpu.emit_pipeline(body, grid=(n // tile,), in_specs=[spec],
                                       out_specs=[spec])
        allocs = (GatherRows.make(spec, table.dtype, tile),
                  pltpu.BufferedRef.output(spec, table.dtype))
        pl.run_scoped(lambda a: pipeline((table_hbm, idx_smem), o_hbm, allocations=a), allocs)

    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((n, width), table.dtype),
        in_specs=[ANY_SPEC, pl.BlockSpec(memory_space=pltpu.SMEM)], out_specs=ANY_SPEC,
        interpret=interpret, compiler_params=compiler_params)(table, idx)


@pytest.mark.parametrize("mode", MODES)
def test_subclass_overrides_copy_in(mode):
    rng = np.random.default_rng()
    table = _rand(rng, 64, 128)
    idx = rng.integers(0, 64, size=24).astype(np.int32)
    out = _gather_scale(jnp.asarray(table), jnp.asarray(idx), interpret=_interpret(mode))
    np.testing.assert_allclose(np.asarray(out), table.astype(np.float64)[idx] * 3.0 + 1.0,
                               rtol=1e-6, atol=1e-6)


def test_subclass_aot(aot_compile):
    _, text = aot_compile(functools.partial(_gather_scale, compiler_params=pltpu.CompilerParams()),
                          jnp.zeros((64, 128), jnp.float32), jnp.zeros((24,), jnp.int32))
    assert "tpu_custom_call" in text


# --- operands already in VMEM (views, no DMA) and non-int block dims ---------------------

@pytest.mark.parametrize("mode", MODES)
def test_vmem_operands_squeezed_element(mode):
    """JAX's test_compute_slice_mixed_block_dims_vmem, through allocations."""
    rng = np.random.default_rng()
    x = rng.integers(-1000, 1000, size=(2, 16, 512)).astype(np.int32)
    in_spec = pl.BlockSpec((None, pl.Blocked(8), 256), lambda i, j, k: (i, j, k),
                           memory_space=pltpu.VMEM)
    out_spec = pl.BlockSpec((pl.Squeezed(), pl.Element(8), 256), lambda i, j, k: (i, j * 8, k),
                            memory_space=pltpu.VMEM)

    def kernel(x_hbm, o_hbm, x_vmem, o_vmem):
        pltpu.sync_copy(x_hbm, x_vmem)
        pipeline, make = pltpu.emit_pipeline_with_allocations(
            lambda a, b: b.__setitem__(..., a[...] * 2 + 1), grid=(2, 2, 2),
            in_specs=in_spec, out_specs=out_spec)
        allocs = make(x_vmem, o_vmem)
        assert all(not b.is_buffered for b in allocs)      # views of the VMEM operands
        pipeline(x_vmem, o_vmem, allocations=allocs)
        pltpu.sync_copy(o_vmem, o_hbm)

    out = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), in_specs=[ANY_SPEC],
        out_specs=ANY_SPEC, scratch_shapes=[pltpu.VMEM(x.shape, jnp.int32)] * 2,
        interpret=_interpret(mode))(jnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(out), x.astype(np.int64) * 2 + 1)


# --- no_pipelining and scratches ---------------------------------------------------------

@pytest.mark.parametrize("no_pipelining", [False, True])
def test_scratches_and_no_pipelining(no_pipelining):
    rng = np.random.default_rng()
    x = _rand(rng, 16, 256)

    def kernel(x_hbm, o_hbm, acc):
        def body(x_ref, o_ref, acc_ref):
            acc_ref[...] = x_ref[...] - 0.5
            o_ref[...] = acc_ref[...] * acc_ref[...]
        pltpu.emit_pipeline(body, grid=(2, 2), in_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, j))],
                            out_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, j))],
                            no_pipelining=no_pipelining)(x_hbm, o_hbm, scratches=[acc])

    out = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), in_specs=[ANY_SPEC],
        out_specs=ANY_SPEC, scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)],
        interpret=True)(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(out), (x.astype(np.float64) - 0.5) ** 2,
                               rtol=1e-6, atol=1e-6)


# --- the types themselves and bad input --------------------------------------------------

def test_buffer_type_and_slots():
    assert pltpu.BufferType.INPUT_OUTPUT.is_input and pltpu.BufferType.INPUT_OUTPUT.is_output
    assert not pltpu.BufferType.OUTPUT.is_input
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    b = pltpu.BufferedRef.input_output(spec, jnp.float32, buffer_count=(3, 2))
    assert (b.in_buffer_count, b.out_buffer_count, b.buffer_count) == (3, 2, 4)
    assert b.window_ref.shape == (4, 8, 128) and b.sem_recvs.shape == (4,)
    one_d = pltpu.BufferedRef.output(pl.BlockSpec((256,), lambda i: (i,)), jnp.float32, 3)
    assert one_d.window_ref.shape == (768,) and one_d.sem_recvs is None
    vmem = pltpu.BufferedRef.input(spec, jnp.float32, source_memory_space=pltpu.VMEM)
    assert not vmem.is_buffered and vmem.window_ref is None
    with pytest.raises(ValueError, match="at least 1"):
        pltpu.BufferedRef.output(spec, jnp.float32, buffer_count=0)
    with pytest.raises(ValueError, match=r"\(in, out\) pair"):
        pltpu.BufferedRef.input(spec, jnp.float32, buffer_count=(2, 2))


def test_prefetched_input_unbound_error():
    """JAX's test_prefetched_input_unbound_error: raised while tracing."""
    def kernel(x_hbm, o_hbm):
        pipeline, make = pltpu.emit_pipeline_with_allocations(
            lambda x, o: o.__setitem__(..., x[...]), grid=(4,),
            in_specs=[pl.BlockSpec((128,), lambda i: (i,),
                                   pipeline_mode=pl.Buffered(2, prefetched_count=1))],
            out_specs=[pl.BlockSpec((128,), lambda i: (i,))])
        pl.run_scoped(lambda a: pipeline(x_hbm, o_hbm, allocations=a), make(x_hbm, o_hbm))

    with pytest.raises(ValueError, match="Expected external window buffer to be bound"):
        pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((512,), jnp.float32),
                       in_specs=[ANY_SPEC], out_specs=ANY_SPEC, interpret=True)(
            jnp.ones((512,), jnp.float32))


def test_wrong_allocation_count_is_refused():
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))

    def kernel(x_hbm, o_hbm):
        pipeline = pltpu.emit_pipeline(lambda x, o: None, grid=(2,), in_specs=[spec],
                                       out_specs=[spec])
        pl.run_scoped(lambda a: pipeline(x_hbm, o_hbm, allocations=[a, a, a]),
                      pltpu.BufferedRef.output(spec, jnp.float32))

    with pytest.raises(TypeError, match="3 allocations for 2 operands"):
        pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
                       in_specs=[ANY_SPEC], out_specs=ANY_SPEC, interpret=True)(
            jnp.ones((16, 128), jnp.float32))
