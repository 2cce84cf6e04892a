"""Dynamic grids on TPU: ``grid=(n,)`` with ``n`` counted from the data.

A grouped-matmul-style kernel walks only the row tiles that belong to some
group: the tile count and each tile's group come from the group sizes. The
same code runs with ``pallas_frontend``/``pallas_tpu`` and with JAX's
``jax.experimental.pallas`` (TPU interpret mode) on the same fresh random
inputs, both checked against NumPy in float64; ours is also AOT-compiled for v5e.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as jpl
from jax.experimental.pallas import tpu as jpltpu

import pallas_frontend as pl
import pallas_tpu as pltpu

OURS, JAXS = (pl, pltpu), (jpl, jpltpu)
TM, K, N, GROUPS, TILES = 128, 128, 128, 4, 6


def grouped_matmul(P, T, interpret):
    """(lhs (TILES*TM, K), rhs (GROUPS, K, N), group_sizes (GROUPS,), tile_group (TILES,))
    -> (out (TILES*TM, N), last (8, 128)): out's first sum(group_sizes) rows are
    lhs rows times their group's rhs; ``last`` holds the tile count the kernel saw."""
    def kernel(tile_group_ref, lhs_ref, rhs_ref, o_ref, last_ref):
        o_ref[...] = jnp.dot(lhs_ref[...], rhs_ref[0], preferred_element_type=jnp.float32)

        @P.when(P.program_id(0) == 0)   # the count is known from the first step on
        def _():
            last_ref[...] = jnp.full(last_ref.shape, P.num_programs(0), jnp.int32)

    def f(lhs, rhs, group_sizes, tile_group):
        n = (jnp.sum(group_sizes) // TM).astype(jnp.int32)   # tiles holding some group's rows
        return P.pallas_call(
            kernel,
            out_shape=(jax.ShapeDtypeStruct((TILES * TM, N), jnp.float32),
                       jax.ShapeDtypeStruct((8, 128), jnp.int32)),
            grid_spec=T.PrefetchScalarGridSpec(
                num_scalar_prefetch=1, grid=(n,),
                in_specs=[P.BlockSpec((TM, K), lambda i, tg: (i, 0)),
                          P.BlockSpec((1, K, N), lambda i, tg: (tg[i], 0, 0))],
                out_specs=[P.BlockSpec((TM, N), lambda i, tg: (i, 0)),
                           P.BlockSpec((8, 128), lambda i, tg: (0, 0))]),
            compiler_params=T.CompilerParams(dimension_semantics=("arbitrary",)),
            interpret=interpret)(tile_group, lhs, rhs)
    return jax.jit(f)


def _random_groups(rng):
    """Group sizes in whole tiles (at least one empty group, at least one tile
    in all, some tiles left over) and the group of each used tile."""
    while True:
        tiles = rng.integers(0, 3, GROUPS)
        if 0 < tiles.sum() < TILES and (tiles == 0).any():
            break
    tile_group = np.zeros(TILES, np.int32)
    tile_group[:tiles.sum()] = np.repeat(np.arange(GROUPS), tiles)
    return (tiles * TM).astype(np.int32), tile_group


def _inputs(rng):
    lhs = rng.standard_normal((TILES * TM, K)).astype(np.float32)
    rhs = rng.standard_normal((GROUPS, K, N)).astype(np.float32)
    return (lhs, rhs, *_random_groups(rng))


def _reference(lhs, rhs, group_sizes):
    rows = int(group_sizes.sum())
    group_of_row = np.repeat(np.arange(GROUPS), group_sizes)
    lhs64, rhs64 = lhs.astype(np.float64), rhs.astype(np.float64)
    return np.einsum("rk,rkn->rn", lhs64[:rows], rhs64[group_of_row]), rows // TM


def test_grouped_matmul_dynamic_grid_matches_numpy_and_jax():
    rng = np.random.default_rng()
    lhs, rhs, group_sizes, tile_group = args = _inputs(rng)
    want, tiles = _reference(lhs, rhs, group_sizes)
    rows = tiles * TM
    results = [grouped_matmul(P, T, T.InterpretParams())(*map(jnp.asarray, args))
               for P, T in (OURS, JAXS)]
    (ours, ours_last), (theirs, theirs_last) = [[np.asarray(r) for r in res] for res in results]
    # f32 dot over K=128 (accumulated in f32): relative error ~1e-6; atol for cancellations.
    np.testing.assert_allclose(ours[:rows], want, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(ours[:rows], theirs[:rows], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(ours_last, np.full((8, 128), tiles))
    np.testing.assert_array_equal(ours_last, theirs_last)


def _jax_lowers_for_v5e(aot_compile, args):
    try:
        aot_compile(grouped_matmul(*JAXS, False), *args)
    except Exception as e:   # noqa: BLE001 - any failure of JAX's own means: nothing to compare
        return e
    return None


def test_grouped_matmul_dynamic_grid_aot_v5e(aot_compile):
    args = [jnp.asarray(a) for a in _inputs(np.random.default_rng())]
    failure = _jax_lowers_for_v5e(aot_compile, args)
    if failure is not None:
        pytest.skip(f"JAX's own Pallas does not compile this for v5e: {failure!r}")
    compiled, text = aot_compile(grouped_matmul(*OURS, False), *args)
    assert "tpu_custom_call" in text
    assert compiled is not None


def test_dynamic_parallel_dimension_raises():
    """As JAX's test of the same name: TPU interpret mode needs the size of a
    "parallel" axis (it splits it over simulated cores) before it runs."""
    def kernel(o_ref):
        o_ref[0] = 42.0

    @jax.jit
    def call():
        dim_size = jax.random.randint(jax.random.key(0), (), 10, 20, dtype=jnp.int32)
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((1,), jnp.float32),
            grid=(dim_size,),
            in_specs=[],
            out_specs=pl.BlockSpec((1,), lambda _: (0,)),
            interpret=pltpu.InterpretParams(),
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
        )()

    with pytest.raises(jax.errors.ConcretizationTypeError):
        call()


def test_dynamic_arbitrary_dimension_runs_to_the_traced_size():
    """The same kernel on an "arbitrary" axis runs ``dim_size`` steps: each adds one."""
    def kernel(o_ref):
        @pl.when(pl.program_id(0) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
        o_ref[...] += 1.0

    @jax.jit
    def call(dim_size):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
            grid=(dim_size,),
            out_specs=pl.BlockSpec((8, 128), lambda _: (0, 0)),
            interpret=pltpu.InterpretParams(),
        )()

    size = int(np.random.default_rng().integers(2, 9))
    np.testing.assert_array_equal(np.asarray(call(jnp.int32(size))), np.full((8, 128), size))


def test_dynamic_core_parallel_dimension_is_refused_naming_the_axis():
    """Interpret mode runs a "core_parallel" axis as that many simulated cores,
    which it must know before running: refused, naming the axis and the fix."""
    def kernel(o_ref):
        o_ref[...] = jnp.ones_like(o_ref)

    @jax.jit
    def call(dim_size):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
            grid=(dim_size,),
            out_specs=pl.BlockSpec((8, 128), lambda _: (0, 0)),
            interpret=pltpu.InterpretParams(),
            compiler_params=pltpu.CompilerParams(dimension_semantics=("core_parallel",)),
        )()

    with pytest.raises(ValueError, match=r"grid axis 0 is \"core_parallel\".*Python int size"):
        call(jnp.int32(2))
