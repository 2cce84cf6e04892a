"""``jax.vmap`` of a ``pallas_call`` whose grid size is traced, or whose index
maps read scalar-prefetch operands, in the built-in interpreter.

The batching rule is the frontend's (backend-agnostic): an unbatched traced
size keeps its place and the batch becomes a static grid axis; a batched size
or prefetch operand runs the kernel once per batch element (a batch of one
runs it on the element). Every case is checked against NumPy on fresh data.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl

BR, C, ROWS = 8, 128, 6     # block rows, columns, blocks of rows in x


class PrefetchGridSpec(pl.GridSpec):
    """A scalar-prefetch grid spec as a backend defines one (pallas_tpu's, say)."""

    def __init__(self, num_scalar_prefetch, **kw):
        super().__init__(**kw)
        self.num_scalar_prefetch = num_scalar_prefetch


def _weighted_sum(x, n):
    """Block i < n of x's row blocks, weighted by i + 1, summed, plus n."""
    def kernel(x_ref, o_ref):
        i = pl.program_id(0)

        @pl.when(i == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref) + pl.num_programs(0).astype(jnp.float32)
        o_ref[...] += x_ref[...] * (i + 1).astype(jnp.float32)

    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((BR, C), jnp.float32), grid=(n,),
        in_specs=[pl.BlockSpec((BR, C), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((BR, C), lambda i: (0, 0)), interpret=True)(x)


def _weighted_sum_ref(x, n):
    blocks = np.asarray(x, np.float64).reshape(ROWS, BR, C)
    return sum((i + 1) * blocks[i] for i in range(n)) + n


def _rows(rng, *batch):
    return rng.standard_normal((*batch, ROWS * BR, C)).astype(np.float32)


def test_vmap_over_operands_with_an_unbatched_traced_grid_size(rng):
    xs, n = _rows(rng, 3), int(rng.integers(2, ROWS + 1))
    got = jax.jit(jax.vmap(_weighted_sum, in_axes=(0, None)))(xs, jnp.int32(n))
    want = np.stack([_weighted_sum_ref(x, n) for x in xs])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_vmap_over_operands_on_a_non_leading_axis(rng):
    xs, n = _rows(rng, 2), int(rng.integers(2, ROWS + 1))
    got = jax.jit(jax.vmap(_weighted_sum, in_axes=(1, None)))(np.moveaxis(xs, 0, 1),
                                                               jnp.int32(n))
    want = np.stack([_weighted_sum_ref(x, n) for x in xs])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("x_batched", [True, False], ids=["x_batched", "x_shared"])
def test_vmap_over_distinct_traced_grid_sizes(rng, x_batched):
    ns = rng.permutation(np.arange(1, ROWS + 1))[:4].astype(np.int32)   # distinct sizes
    xs = _rows(rng, len(ns)) if x_batched else _rows(rng)
    got = jax.jit(jax.vmap(_weighted_sum, in_axes=(0 if x_batched else None, 0)))(xs, ns)
    want = np.stack([_weighted_sum_ref(xs[k] if x_batched else xs, n) for k, n in enumerate(ns)])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_vmap_over_one_traced_grid_size(rng):
    x, n = _rows(rng, 1), int(rng.integers(2, ROWS + 1))
    got = jax.jit(jax.vmap(_weighted_sum))(x, jnp.full((1,), n, jnp.int32))
    np.testing.assert_allclose(np.asarray(got), _weighted_sum_ref(x[0], n)[None],
                               rtol=1e-5, atol=1e-5)


def test_nested_vmap_over_traced_grid_sizes(rng):
    ns = rng.integers(1, ROWS + 1, size=(2, 3)).astype(np.int32)
    xs = _rows(rng, 2)
    f = jax.vmap(jax.vmap(_weighted_sum, in_axes=(None, 0)), in_axes=(0, 0))
    got = np.asarray(jax.jit(f)(xs, ns))
    for a in range(2):
        for b in range(3):
            np.testing.assert_allclose(got[a, b], _weighted_sum_ref(xs[a], ns[a, b]),
                                       rtol=1e-5, atol=1e-5)


# --- scalar prefetch -------------------------------------------------------------

G = 4     # grid size of the gather kernel


def _gather(s, x, y=None, *, traced_grid=False):
    """Output block i is x's row block s[i] plus i; with ``y`` (aliased to the
    output), only the blocks s[i] of y are overwritten, the rest kept."""
    def kernel(s_ref, x_ref, *refs):
        o_ref = refs[-1]
        o_ref[...] = x_ref[...] + pl.program_id(0).astype(jnp.float32)

    grid = (G if not traced_grid else jnp.int32(G) + 0 * s[0],)
    if y is None:
        out_map, out_rows, extra, aliases = (lambda i, s_ref: (i, 0)), G * BR, [], {}
    else:
        out_map, out_rows, extra, aliases = (lambda i, s_ref: (s_ref[i], 0)), ROWS * BR, [y], {2: 0}
    in_specs = [pl.BlockSpec((BR, C), lambda i, s_ref: (s_ref[i], 0))]
    in_specs += [pl.BlockSpec(memory_space=pl.ANY)] * len(extra)
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((out_rows, C), jnp.float32),
        grid_spec=PrefetchGridSpec(1, grid=grid, in_specs=in_specs,
                                   out_specs=pl.BlockSpec((BR, C), out_map)),
        input_output_aliases=aliases, interpret=True)(s, x, *extra)


def _gather_ref(s, x, y=None):
    blocks = np.asarray(x, np.float64).reshape(ROWS, BR, C)
    if y is None:
        return np.concatenate([blocks[s[i]] + i for i in range(G)])
    out = np.asarray(y, np.float64).reshape(ROWS, BR, C).copy()
    for i in range(G):
        out[s[i]] = blocks[s[i]] + i
    return out.reshape(ROWS * BR, C)


def _tables(rng, *batch):
    # distinct blocks per row of the table (an aliased output block is written once)
    flat = [rng.permutation(ROWS)[:G] for _ in range(int(np.prod(batch, dtype=int)))]
    return np.asarray(flat, np.int32).reshape(*batch, G)


@pytest.mark.parametrize("traced_grid", [False, True], ids=["static_grid", "traced_grid"])
@pytest.mark.parametrize("x_batched", [True, False], ids=["x_batched", "x_shared"])
def test_vmap_over_scalar_prefetch(rng, traced_grid, x_batched):
    ss = _tables(rng, 3)
    xs = _rows(rng, 3) if x_batched else _rows(rng)
    f = jax.vmap(lambda s, x: _gather(s, x, traced_grid=traced_grid),
                 in_axes=(0, 0 if x_batched else None))
    got = jax.jit(f)(ss, xs)
    want = np.stack([_gather_ref(s, xs[k] if x_batched else xs) for k, s in enumerate(ss)])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)


def test_vmap_over_operands_with_shared_scalar_prefetch(rng):
    s, xs = _tables(rng), _rows(rng, 3)
    got = jax.jit(jax.vmap(_gather, in_axes=(None, 0)))(s, xs)
    want = np.stack([_gather_ref(s, x) for x in xs])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)


def test_vmap_over_one_scalar_prefetch_table(rng):
    ss, xs = _tables(rng, 1), _rows(rng, 1)
    got = jax.vmap(_gather)(ss, xs)
    np.testing.assert_allclose(np.asarray(got), _gather_ref(ss[0], xs[0])[None], rtol=1e-6)


def test_nested_vmap_over_scalar_prefetch(rng):
    ss, xs = _tables(rng, 2, 3), _rows(rng, 2)
    f = jax.vmap(jax.vmap(_gather, in_axes=(0, None)), in_axes=(0, 0))
    got = np.asarray(jax.jit(f)(ss, xs))
    for a in range(2):
        for b in range(3):
            np.testing.assert_allclose(got[a, b], _gather_ref(ss[a, b], xs[a]), rtol=1e-6)


@pytest.mark.parametrize("y_batched", [True, False], ids=["y_batched", "y_shared"])
def test_vmap_over_scalar_prefetch_with_an_aliased_output(rng, y_batched):
    """The blocks the kernel does not write keep the aliased input's values,
    per batch element (a shared input is each element's starting output)."""
    ss, xs = _tables(rng, 3), _rows(rng, 3)
    ys = _rows(rng, 3) if y_batched else _rows(rng)
    f = jax.vmap(_gather, in_axes=(0, 0, 0 if y_batched else None))
    got = jax.jit(f)(ss, xs, ys)
    want = np.stack([_gather_ref(s, xs[k], ys[k] if y_batched else ys)
                     for k, s in enumerate(ss)])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)


# --- pl.num_programs of a traced axis in an index map ------------------------------

def _reverse(x, y, n, off=None):
    """Output (aliased to y) block n-1-i is twice x's block i (+ off[0]); blocks
    from n on keep y. The output's index map reads pl.num_programs(0)."""
    def kernel(*refs):
        x_ref, o_ref = refs[-3], refs[-1]
        o_ref[...] = x_ref[...] * 2

    prefetch = [] if off is None else [off]
    in_map = (lambda i: (i, 0)) if off is None else (lambda i, off_ref: (i + off_ref[0], 0))
    out_map = (lambda i, *_: (pl.num_programs(0) - 1 - i, 0))
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(y.shape, y.dtype),
        grid_spec=PrefetchGridSpec(
            len(prefetch), grid=(n,),
            in_specs=[pl.BlockSpec((BR, C), in_map), pl.BlockSpec(memory_space=pl.ANY)],
            out_specs=pl.BlockSpec((BR, C), out_map)),
        input_output_aliases={len(prefetch) + 1: 0}, interpret=True)(*prefetch, x, y)


def _reverse_ref(x, y, n, off=0):
    xb = np.asarray(x, np.float64).reshape(ROWS, BR, C)
    out = np.asarray(y, np.float64).reshape(ROWS, BR, C).copy()
    for i in range(n):
        out[n - 1 - i] = 2 * xb[i + off]
    return out.reshape(ROWS * BR, C)


@pytest.mark.parametrize("with_prefetch", [False, True], ids=["no_prefetch", "user_prefetch"])
def test_num_programs_of_a_traced_axis_in_an_index_map(rng, with_prefetch):
    x, y = _rows(rng), _rows(rng)
    off = int(rng.integers(0, 2)) if with_prefetch else 0
    n = int(rng.integers(2, ROWS - off + 1))
    args = (np.array([off], np.int32),) if with_prefetch else ()
    got = jax.jit(lambda x, y, n, *a: _reverse(x, y, n, *a))(x, y, jnp.int32(n), *args)
    np.testing.assert_allclose(np.asarray(got), _reverse_ref(x, y, n, off), rtol=1e-6)


@pytest.mark.parametrize("sizes_batched", [False, True], ids=["shared_size", "batched_sizes"])
def test_vmap_of_num_programs_of_a_traced_axis_in_an_index_map(rng, sizes_batched):
    xs, ys = _rows(rng, 3), _rows(rng, 3)
    ns = (rng.integers(1, ROWS + 1, size=3) if sizes_batched
          else np.full(3, rng.integers(1, ROWS + 1))).astype(np.int32)
    f = jax.vmap(_reverse, in_axes=(0, 0, 0 if sizes_batched else None))
    got = jax.jit(f)(xs, ys, ns if sizes_batched else jnp.int32(ns[0]))
    want = np.stack([_reverse_ref(xs[k], ys[k], ns[k]) for k in range(3)])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
