"""Scalar prefetch as JAX has it: index maps take the grid indices then one
argument per prefetch operand (a pytree operand arrives as that pytree),
``interpret=True`` runs such kernels (static or traced grid), and
``pl.num_programs`` works inside an index map (of a traced size too). JAX's megablox gmm/tgmm files
run against JAX; the small kernels run under both libraries on the same
fresh random data."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import jax_ops  # noqa: E402
import jax_ops_cases  # noqa: E402

import pallas_frontend as pl  # noqa: E402
from jax.experimental import pallas as jax_pl  # noqa: E402
from jax.experimental.pallas import tpu as jax_pltpu  # noqa: E402

pltpu = pytest.importorskip("pallas_tpu")
CASES = {c.name: c for c in jax_ops_cases.TPU_CASES}
LIBS = {"ours": (pl, pltpu), "jax": (jax_pl, jax_pltpu)}


def _seed():
    return int(np.random.SeedSequence().entropy % 2**32)


@pytest.mark.parametrize("name,grad", [("tpu.megablox.gmm", False), ("tpu.megablox.tgmm", False),
                                       ("tpu.megablox.ops.gmm", True)])
def test_jax_megablox_file(name, grad):
    row = jax_ops.run_case(CASES[name], "small", grad, seed=_seed(), repeats=0)
    assert row["jax"] == "ok", row["jax_error"]
    assert row["ours"] == "ok", row["ours_error"]
    assert row["rel"] <= 1e-5


def _gather_rows(lib, traced_grid: bool, x, table, offset):
    """out[i] = x[table[0][i] + offset] for each block row: a pytree prefetch
    operand (table, a 1-tuple) and a plain one (offset)."""
    pl_, pltpu_ = lib
    n = table[0].shape[0]

    def index_map(i, tables, off):       # one argument per prefetch operand
        (t,) = tables
        return t[i] + off[0], 0

    def out_map(i, tables, off):
        # pl.num_programs inside an index map (of a static grid)
        return (pl_.num_programs(0) if not traced_grid else n) - 1 - i, 0

    def kernel(tables, off, x_ref, o_ref):
        o_ref[...] = x_ref[...] + tables[0][pl_.program_id(0)].astype(jnp.float32)

    def run(table, offset, x):
        grid = (table[0].shape[0],) if traced_grid else (n,)
        if traced_grid:
            grid = (jnp.int32(n) + 0 * table[0][0],)   # a traced size
        spec = pl_.BlockSpec((8, 128), index_map)
        return pl_.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct((8 * n, 128), x.dtype),
            grid_spec=pltpu_.PrefetchScalarGridSpec(
                num_scalar_prefetch=2, grid=grid, in_specs=[spec],
                out_specs=pl_.BlockSpec((8, 128), out_map)),
            interpret=True)(table, offset, x)
    return jax.jit(run)(table, offset, x)


@pytest.mark.parametrize("traced_grid", [False, True], ids=["static_grid", "traced_grid"])
def test_pytree_prefetch_interpret_true_against_jax(traced_grid):
    rng = np.random.default_rng()
    n, rows = 4, 6
    x = rng.standard_normal((8 * rows, 128)).astype(np.float32)
    table = (rng.integers(0, rows - 1, size=n).astype(np.int32),)
    offset = np.array([1], np.int32)
    want = np.asarray(_gather_rows(LIBS["jax"], traced_grid, x, table, offset))
    got = np.asarray(_gather_rows(LIBS["ours"], traced_grid, x, table, offset))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    # and against NumPy: block i of the output is written at block n-1-i
    ref = np.concatenate([x[8 * (table[0][i] + 1):8 * (table[0][i] + 2)] + table[0][i]
                          for i in range(n)][::-1])
    np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_num_programs_of_a_traced_size_in_an_index_map_matches_jax():
    """The traced size reaches the index maps as a scalar-prefetch operand the
    frontend adds (KernelIR index maps take no grid sizes); the kernel's own
    arguments are unchanged."""
    x = np.random.default_rng().standard_normal((32, 128)).astype(np.float32)

    def run(P, n):
        spec = P.BlockSpec((8, 128), lambda i: (P.num_programs(0) - 1 - i, 0))
        return P.pallas_call(lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...] * 2),
                             out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(n,),
                             in_specs=[spec], out_specs=spec, interpret=True)(x)
    got = np.asarray(jax.jit(lambda n: run(pl, n))(4))
    want = np.asarray(jax.jit(lambda n: run(jax_pl, n))(4))
    np.testing.assert_allclose(got, 2 * x.astype(np.float64), rtol=1e-6)
    np.testing.assert_array_equal(got, want)
