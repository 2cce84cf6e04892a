"""What an ``emit_pipeline`` body split across cores (``core_axis_name``) may
use from the kernel around it, as JAX's megacore pipeline tests do: a
``pl.run_scoped`` VMEM Ref the body closes over (JAX 0.10 traced it as a
constant the replay never bound: KeyError), and ``jax.lax.axis_index`` /
``axis_size`` of the core axis inside the body (was refused). Each runs in
TPU interpret mode against NumPy (float64) and JAX's own Pallas."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as jpl
from jax.experimental.pallas import tpu as jpltpu

import pallas_frontend as pl
import pallas_tpu as pltpu
from test_pipeline_cores import _jax_chip
from tpu_window import tensorcore_mesh

R, C = 8, 128       # one block


def _core_shares(steps, cores):
    """Steps per core (JAX's split: the first steps % cores take one more)."""
    return [steps // cores + (c < steps % cores) for c in range(cores)]


def _accumulate(Pl, T, num_cores, steps, interpret):
    """Each core sums its share of the ``steps`` blocks of x into a scoped
    VMEM accumulator the pipeline body closes over, then copies it to its
    row of the output."""
    mesh = tensorcore_mesh(T, "core", num_cores)
    out = jax.ShapeDtypeStruct((num_cores, R, C), jnp.float32)

    def f(x):
        @Pl.kernel(mesh=mesh, out_type=out, interpret=interpret)
        def k(x_hbm, o_hbm):
            def run(acc):
                acc[...] = jnp.zeros_like(acc)

                def body(x_blk):
                    acc[...] += x_blk[...]
                T.emit_pipeline(body, grid=(steps,),
                                in_specs=[Pl.BlockSpec((R, C), lambda i: (i, 0))],
                                core_axis_name="core",
                                dimension_semantics=(T.PARALLEL,))(x_hbm)
                T.sync_copy(acc, o_hbm.at[jax.lax.axis_index("core")])
            Pl.run_scoped(run, T.VMEM((R, C), jnp.float32))
        return k(x)
    return f


@pytest.mark.parametrize("num_cores,steps", [(1, 3), (2, 4), (2, 5)])
def test_body_closing_over_a_scoped_ref(num_cores, steps):
    x = np.random.default_rng().standard_normal((steps * R, C)).astype(np.float32)
    ours = _accumulate(pl, pltpu, num_cores, steps, pltpu.InterpretParams())(x)
    with _jax_chip(jpltpu):
        theirs = _accumulate(jpl, jpltpu, num_cores, steps, jpltpu.InterpretParams())(x)
    blocks = x.astype(np.float64).reshape(steps, R, C)
    want = np.zeros((num_cores, R, C))
    first = 0
    for c, n in enumerate(_core_shares(steps, num_cores)):
        want[c] = blocks[first:first + n].sum(0)
        first += n
    np.testing.assert_allclose(np.asarray(ours), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-6, atol=1e-6)


def _axis_queries(Pl, T, num_cores, steps, interpret):
    """o block i = x block i * (core index + 1) + core count * 1000 + the
    pipeline's program id * 10, the core asked with lax inside the body."""
    mesh = tensorcore_mesh(T, "core", num_cores)

    def f(x):
        @Pl.kernel(mesh=mesh, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                   interpret=interpret)
        def k(x_hbm, o_hbm):
            def body(x_blk, o_blk):
                core = jax.lax.axis_index("core").astype(jnp.float32)
                size = jnp.float32(jax.lax.axis_size("core"))
                step = Pl.program_id(0).astype(jnp.float32)
                o_blk[...] = x_blk[...] * (core + 1) + size * 1000 + step * 10
            spec = Pl.BlockSpec((R, C), lambda i: (i, 0))
            T.emit_pipeline(body, grid=(steps,), in_specs=[spec], out_specs=spec,
                            core_axis_name="core",
                            dimension_semantics=(T.PARALLEL,))(x_hbm, o_hbm)
        return k(x)
    return f


@pytest.mark.parametrize("num_cores,steps", [(1, 2), (2, 4), (2, 3)])
def test_axis_index_inside_the_body(num_cores, steps):
    x = np.random.default_rng().standard_normal((steps * R, C)).astype(np.float32)
    ours = _axis_queries(pl, pltpu, num_cores, steps, pltpu.InterpretParams())(x)
    with _jax_chip(jpltpu):
        theirs = _axis_queries(jpl, jpltpu, num_cores, steps, jpltpu.InterpretParams())(x)
    core_of = np.repeat(np.arange(num_cores), _core_shares(steps, num_cores))
    want = np.concatenate([x[i * R:(i + 1) * R].astype(np.float64) * (core_of[i] + 1)
                           + num_cores * 1000 + i * 10 for i in range(steps)])
    np.testing.assert_allclose(np.asarray(ours), want, rtol=1e-6, atol=1e-4)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))


def _gather_rows(starts_sizes, rows, bounded: bool):
    """o = 2 x + 1 through blocks whose bounds the index map reads from a
    scoped SMEM copy of ``starts_sizes``. ``bounded``: BoundedSlice rows
    ``pl.ds(start, size)`` of the first dim in and out; else o's row-block i from x's row-block
    ``start[i]``, split across a one-core axis (the recorded pipeline)."""
    mesh = tensorcore_mesh(pltpu, "core", 1)
    n = starts_sizes.shape[0]

    def f(x, table):
        @pl.kernel(mesh=mesh, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                   interpret=pltpu.InterpretParams())
        def k(x_hbm, t_hbm, o_hbm):
            def run(t_smem):
                pltpu.sync_copy(t_hbm, t_smem)

                def body(x_blk, o_blk):
                    o_blk[...] = 2 * x_blk[...] + 1
                if bounded:
                    spec = pl.BlockSpec((pl.BoundedSlice(rows), R, C),
                                        lambda i: (pl.ds(t_smem[i, 0], t_smem[i, 1]), 0, 0))
                    extra = {}
                else:
                    spec = pl.BlockSpec((R, C), lambda i: (t_smem[i, 0], 0))
                    out_spec = pl.BlockSpec((R, C), lambda i: (i, 0))
                    extra = dict(core_axis_name="core", dimension_semantics=(pltpu.PARALLEL,))
                pltpu.emit_pipeline(body, grid=(n,), in_specs=[spec],
                                    out_specs=spec if bounded else out_spec,
                                    **extra)(x_hbm, o_hbm)
            pl.run_scoped(run, pltpu.SMEM(table.shape, table.dtype))
        return k(x, table)
    return f


@pytest.mark.parametrize("bounded", [True, False])
def test_index_map_reading_a_scoped_smem_ref(bounded):
    rng = np.random.default_rng()
    total = 16
    if bounded:       # (total, R, C) cut along its first dim at random points,
        # the pieces visited in a random order (BoundedSlice of the whole dim)
        cuts = np.sort(rng.choice(np.arange(1, total), 3, replace=False))
        edges = np.concatenate([[0], cuts, [total]])
        table = np.stack([edges[:-1], np.diff(edges)], 1)[rng.permutation(4)]
        x = rng.standard_normal((total, R, C)).astype(np.float32)
    else:             # (4 R, C) row blocks in a random order
        table = np.stack([rng.permutation(4), np.zeros(4, int)], 1)
        x = rng.standard_normal((4 * R, C)).astype(np.float32)
    table = table.astype(np.int32)
    out = _gather_rows(table, total if bounded else R, bounded)(x, table)
    want = 2 * x.astype(np.float64) + 1
    if not bounded:
        want = want.reshape(4, R, C)[table[:, 0]].reshape(x.shape)
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-6, atol=1e-6)
