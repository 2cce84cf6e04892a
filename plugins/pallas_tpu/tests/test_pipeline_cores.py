"""emit_pipeline split across cores (``core_axis_name``) with body scratches,
index maps that ask ``pl.num_programs``, ``pl.kernel`` operands placed in
SMEM, and DMAs through ``ref.reshape(...)`` views: the shapes of tokamax's
gmm_v2 and linear softmax cross-entropy kernels and tpu-inference's ragged
paged attention. Each runs against NumPy (float64) and JAX's own Pallas on
the same inputs, and compiles for a v5e."""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as jpl
from jax.experimental.pallas import tpu as jpltpu

import pallas_frontend as pl
import pallas_tpu as pltpu
from pallas_tpu import aot
from tpu_window import tensorcore_mesh

B, H, V = 8, 128, 128       # block sizes of the x @ w pipeline


def _rng():
    return np.random.default_rng()


def _jax_chip(T):
    """JAX's emit_pipeline asks the context mesh which chip it targets."""
    if T is not jpltpu:
        return contextlib.nullcontext()
    v5e = jax.sharding.AbstractDevice("TPU v5 lite", 1, "tpu")
    return jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((), (), abstract_device=v5e))


# --- core_axis_name with scratches ---------------------------------------------------------

def _split_matmul(Pl, T, num_cores, interpret, reverse_out=False):
    """o = x @ w over a (b, v, h) grid split across ``num_cores`` cores on b,
    accumulated over h in a kernel scratch handed to the body; each finished
    block also adds this core's ``pl.num_programs(0)`` (its share of b). With
    ``reverse_out`` the output index map writes v-blocks in reverse order,
    asking the pipeline's ``pl.num_programs(1)`` (tokamax's gmm_v2 index maps
    ask so; the kernel's own grid has one axis)."""
    mesh = tensorcore_mesh(T, "core", num_cores)

    def f(x, w):
        nb, nv, nh = x.shape[0] // B, w.shape[1] // V, x.shape[1] // H
        out = jax.ShapeDtypeStruct((x.shape[0], w.shape[1]), jnp.float32)

        @Pl.kernel(mesh=mesh, out_type=out, scratch_types=[T.VMEM((B, V), jnp.float32)],
                   interpret=interpret)
        def k(x_hbm, w_hbm, o_hbm, acc_hbm_scratch):
            def body(x_ref, w_ref, o_ref, acc):
                h = Pl.program_id(2)

                @Pl.when(h == 0)
                def _():
                    acc[...] = jnp.zeros_like(acc)
                acc[...] += jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32,
                                    precision=jax.lax.Precision.HIGHEST)

                @Pl.when(h == Pl.num_programs(2) - 1)
                def _():
                    o_ref[...] = acc[...] + jnp.asarray(Pl.num_programs(0), jnp.float32)

            def out_map(i, j, kk):
                return (i, Pl.num_programs(1) - 1 - j) if reverse_out else (i, j)
            T.emit_pipeline(
                body, grid=(nb, nv, nh),
                in_specs=[Pl.BlockSpec((B, H), lambda i, j, kk: (i, kk)),
                          Pl.BlockSpec((H, V), lambda i, j, kk: (kk, j))],
                out_specs=Pl.BlockSpec((B, V), out_map),
                core_axis_name="core",
                dimension_semantics=(T.PARALLEL, T.ARBITRARY, T.ARBITRARY),
            )(x_hbm, w_hbm, o_hbm, scratches=[acc_hbm_scratch])
        return k(x, w)
    return f


def _shares(nb, cores):
    """Each b-block's core share size (JAX's split: the first nb % cores
    cores take one block more), and the core's first block."""
    base, extra = divmod(nb, cores)
    sizes = [base + (c < extra) for c in range(cores)]
    starts = np.cumsum([0] + sizes[:-1])
    return [(sizes[c], int(starts[c])) for c in range(cores) for _ in range(sizes[c])]


def _split_matmul_want(x, w, cores, reverse_out=False):
    prod = x.astype(np.float64) @ w.astype(np.float64)
    nb = x.shape[0] // B
    even = nb % cores == 0
    shares = [(nb // cores, (i // (nb // cores)) * (nb // cores)) for i in range(nb)] if even \
        else _shares(nb, cores)
    want = np.empty_like(prod)
    for i, (n, _) in enumerate(shares):
        want[i * B:(i + 1) * B] = prod[i * B:(i + 1) * B] + n
    if reverse_out:
        nv = w.shape[1] // V
        want = want.reshape(-1, nv, V)[:, ::-1].reshape(want.shape)
    return want


@pytest.mark.parametrize("num_cores,nb", [(1, 3), (2, 4), (2, 3)])
@pytest.mark.parametrize("reverse_out", [False, True])
def test_core_split_pipeline_with_scratches_matches_jax(num_cores, nb, reverse_out):
    rng = _rng()
    x = rng.standard_normal((nb * B, 2 * H)).astype(np.float32)
    w = rng.standard_normal((2 * H, 2 * V)).astype(np.float32)
    ours = _split_matmul(pl, pltpu, num_cores, pltpu.InterpretParams(), reverse_out)(x, w)
    with _jax_chip(jpltpu):
        theirs = _split_matmul(jpl, jpltpu, num_cores, jpltpu.InterpretParams(),
                               reverse_out)(x, w)
    np.testing.assert_allclose(np.asarray(ours), _split_matmul_want(x, w, num_cores, reverse_out),
                               rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


@pytest.mark.parametrize("num_cores,nb", [(2, 4), (2, 3)])
def test_core_split_pipeline_in_the_builtin_interpreter(num_cores, nb):
    rng = _rng()
    x = rng.standard_normal((nb * B, 2 * H)).astype(np.float32)
    w = rng.standard_normal((2 * H, 2 * V)).astype(np.float32)
    out = _split_matmul(pl, pltpu, num_cores, True, True)(x, w)
    np.testing.assert_allclose(np.asarray(out), _split_matmul_want(x, w, num_cores, True),
                               rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("topology,num_cores", [("v5e:2x2", 1), ("v5p:1x1x1", 2)])
def test_core_split_pipeline_with_scratches_compiles(topology, num_cores):
    x = jax.ShapeDtypeStruct((4 * B, 2 * H), jnp.float32)
    w = jax.ShapeDtypeStruct((2 * H, V), jnp.float32)
    aot.compile_for_tpu(_split_matmul(pl, pltpu, num_cores, False, True), x, w,
                        topology=topology)


def test_core_split_needs_a_parallel_dimension():
    x = jnp.ones((2 * B, H), jnp.float32)
    w = jnp.ones((H, V), jnp.float32)
    mesh = pltpu.TensorCoreMesh(axis_name="core", num_cores=2)

    @pl.kernel(mesh=mesh, out_type=jax.ShapeDtypeStruct((2 * B, V), jnp.float32),
               scratch_types=[pltpu.VMEM((B, V), jnp.float32)], interpret=pltpu.InterpretParams())
    def k(x_hbm, w_hbm, o_hbm, acc):
        pltpu.emit_pipeline(
            lambda x_ref, w_ref, o_ref, acc: None, grid=(2, 1),
            in_specs=[pl.BlockSpec((B, H), lambda i, j: (i, 0)),
                      pl.BlockSpec((H, V), lambda i, j: (0, j))],
            out_specs=pl.BlockSpec((B, V), lambda i, j: (i, j)), core_axis_name="core",
        )(x_hbm, w_hbm, o_hbm, scratches=[acc])
    with pytest.raises(NotImplementedError, match="needs a parallel dimension.*PARALLEL"):
        k(x, w)


# --- pl.kernel operands placed in SMEM -----------------------------------------------------

def _gathered_rows(Pl, T, interpret):
    """Copies rows of x picked by an SMEM-placed index vector (as gmm_v2 reads
    its group sizes): a scalar load from a pl.kernel operand."""
    mesh = tensorcore_mesh(T, "core", 1)

    def f(x, rows):
        rows = T.with_memory_space_constraint(rows, T.SMEM)

        @Pl.kernel(mesh=mesh, out_type=jax.ShapeDtypeStruct((rows.shape[0], 8, 128), x.dtype),
                   scratch_types=[T.SemaphoreType.DMA], interpret=interpret)
        def k(x_hbm, rows_smem, o_hbm, sem):
            for i in range(rows.shape[0]):
                T.make_async_copy(x_hbm.at[rows_smem[i]], o_hbm.at[i], sem).start()
                T.make_async_copy(x_hbm.at[rows_smem[i]], o_hbm.at[i], sem).wait()
        return k(x, rows)
    return f


def test_kernel_operand_in_smem_runs_in_tpu_interpret_mode():
    # JAX's TPU interpreter has no SMEM operands; ours hands it the operand
    # unplaced (a placement changes no value), so the kernel runs as on the chip
    x = _rng().standard_normal((6, 8, 128)).astype(np.float32)
    rows = _rng().permutation(6)[:4].astype(np.int32)
    out = jax.jit(_gathered_rows(pl, pltpu, pltpu.InterpretParams()))(x, rows)
    np.testing.assert_array_equal(np.asarray(out, np.float64), x.astype(np.float64)[rows])
    with pytest.raises(NotImplementedError, match="Unsupported memory space: smem"):
        jax.jit(_gathered_rows(jpl, jpltpu, jpltpu.InterpretParams()))(x, rows)


def _memory_colors(text: str) -> str:
    start = text.find("memory_space_colors")
    return "" if start < 0 else text[start:text.index("]", start)]


def test_kernel_operand_in_smem_compiles_for_v5e_as_jax():
    x = jax.ShapeDtypeStruct((6, 8, 128), jnp.float32)
    rows = jax.ShapeDtypeStruct((4,), jnp.int32)
    texts = [aot.lower_for_tpu(_gathered_rows(Pl, T, False), x, rows).as_text()
             for Pl, T in ((pl, pltpu), (jpl, jpltpu))]
    assert texts[0].count("tpu_custom_call") == texts[1].count("tpu_custom_call") == 1
    assert _memory_colors(texts[0]) == _memory_colors(texts[1])
    aot.compile_for_tpu(_gathered_rows(pl, pltpu, False), x, rows)


# --- DMAs through ref.reshape views --------------------------------------------------------

def _reversed_tiles(Pl, T, interpret):
    """Views the (4, 16, 128) HBM operand as (8, 8, 128) tiles (``ref.reshape``)
    and copies tile 7 - i, doubled, to tile i of the output, by DMA (ragged
    paged attention views its KV cache so)."""
    def kernel(x_hbm, o_hbm, buf, sem):
        tiles_in, tiles_out = x_hbm.reshape(8, 8, 128), o_hbm.reshape(8, 8, 128)
        for i in range(8):
            T.make_async_copy(tiles_in.at[7 - i], buf, sem).start()
            T.make_async_copy(tiles_in.at[7 - i], buf, sem).wait()
            buf[...] = buf[...] * 2.0
            T.make_async_copy(buf, tiles_out.at[i], sem).start()
            T.make_async_copy(buf, tiles_out.at[i], sem).wait()
    return Pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((4, 16, 128), jnp.float32),
        in_specs=[Pl.BlockSpec(memory_space=Pl.ANY)], out_specs=Pl.BlockSpec(memory_space=Pl.ANY),
        scratch_shapes=[T.VMEM((8, 128), jnp.float32), T.SemaphoreType.DMA],
        compiler_params=None if interpret else T.CompilerParams(), interpret=interpret)


def test_dma_through_reshape_view_in_the_interpreter():
    # JAX's TPU interpret mode cannot run such a DMA ('ReshapeTransform' has no
    # indices), so the built-in interpreter is checked against NumPy
    x = _rng().standard_normal((4, 16, 128)).astype(np.float32)
    out = _reversed_tiles(pl, pltpu, True)(x)
    want = 2.0 * x.astype(np.float64).reshape(8, 8, 128)[::-1].reshape(4, 16, 128)
    np.testing.assert_array_equal(np.asarray(out), want)


def test_dma_through_reshape_view_compiles_for_v5e_as_jax():
    spec = jax.ShapeDtypeStruct((4, 16, 128), jnp.float32)
    for Pl, T in ((pl, pltpu), (jpl, jpltpu)):
        aot.compile_for_tpu(_reversed_tiles(Pl, T, False), spec)
