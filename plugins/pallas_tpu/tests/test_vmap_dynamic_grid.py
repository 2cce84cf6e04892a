"""The frontend's vmap of dynamic-grid and scalar-prefetch kernels, through
pallas_tpu: TPU interpret mode against NumPy on fresh data, and AOT-compiled
for v5e. Each batching strategy reaches the backend as an ordinary kernel (a
static batch grid axis before a traced one; the unchanged kernel in a loop;
an extra scalar-prefetch operand holding the traced sizes)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu

BR, C, ROWS, G = 8, 128, 6, 4


def _weighted_sum(x, n, interpret):
    """Row blocks i < n of x weighted by i + 1, summed, plus n."""
    def kernel(x_ref, o_ref):
        i = pl.program_id(0)

        @pl.when(i == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref) + pl.num_programs(0).astype(jnp.float32)
        o_ref[...] += x_ref[...] * (i + 1).astype(jnp.float32)

    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((BR, C), jnp.float32), grid=(n,),
        in_specs=[pl.BlockSpec((BR, C), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((BR, C), lambda i: (0, 0)), interpret=interpret)(x)


def _weighted_sum_ref(x, n):
    blocks = np.asarray(x, np.float64).reshape(ROWS, BR, C)
    return sum((i + 1) * blocks[i] for i in range(n)) + n


def _gather(s, x, interpret):
    """Output block i is x's row block s[i] plus i."""
    def kernel(s_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...] + pl.program_id(0).astype(jnp.float32)

    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((G * BR, C), jnp.float32),
        grid_spec=pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(G,),
            in_specs=[pl.BlockSpec((BR, C), lambda i, s_ref: (s_ref[i], 0))],
            out_specs=pl.BlockSpec((BR, C), lambda i, s_ref: (i, 0))),
        interpret=interpret)(s, x)


def _gather_ref(s, x):
    blocks = np.asarray(x, np.float64).reshape(ROWS, BR, C)
    return np.concatenate([blocks[s[i]] + i for i in range(G)])


def _reverse(x, y, n, interpret):
    """Output (aliased to y) block n-1-i is twice x's block i; its index map
    reads pl.num_programs(0) of the traced axis."""
    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(y.shape, y.dtype), grid=(n,),
        in_specs=[pl.BlockSpec((BR, C), lambda i: (i, 0)), pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec((BR, C), lambda i: (pl.num_programs(0) - 1 - i, 0)),
        input_output_aliases={1: 0}, interpret=interpret)(x, y)


def _reverse_ref(x, y, n):
    xb = np.asarray(x, np.float64).reshape(ROWS, BR, C)
    out = np.asarray(y, np.float64).reshape(ROWS, BR, C).copy()
    for i in range(n):
        out[n - 1 - i] = 2 * xb[i]
    return out.reshape(ROWS * BR, C)


def _cases(rng):
    """(name, f(*args, interpret), args, NumPy result) for each strategy."""
    xs = rng.standard_normal((3, ROWS * BR, C)).astype(np.float32)
    ys = rng.standard_normal((3, ROWS * BR, C)).astype(np.float32)
    n = int(rng.integers(2, ROWS + 1))
    ns = rng.integers(1, ROWS + 1, size=3).astype(np.int32)
    ss = np.stack([rng.permutation(ROWS)[:G] for _ in range(3)]).astype(np.int32)
    return [
        ("grid_axis", jax.vmap(_weighted_sum, in_axes=(0, None, None)), (xs, jnp.int32(n)),
         np.stack([_weighted_sum_ref(x, n) for x in xs])),
        ("loop_over_sizes", jax.vmap(_weighted_sum, in_axes=(0, 0, None)), (xs, ns),
         np.stack([_weighted_sum_ref(x, k) for x, k in zip(xs, ns)])),
        ("loop_over_prefetch", jax.vmap(_gather, in_axes=(0, 0, None)), (ss, xs),
         np.stack([_gather_ref(s, x) for s, x in zip(ss, xs)])),
        ("sizes_operand", _reverse, (xs[0], ys[0], jnp.int32(n)),
         _reverse_ref(xs[0], ys[0], n)),
    ]


NAMES = ["grid_axis", "loop_over_sizes", "loop_over_prefetch", "sizes_operand"]


@pytest.mark.parametrize("name", NAMES)
def test_tpu_interpret_matches_numpy(name):
    cases = {c[0]: c for c in _cases(np.random.default_rng())}
    _, f, args, want = cases[name]
    got = jax.jit(lambda *a: f(*a, pltpu.InterpretParams()))(*args)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_aot_v5e(aot_compile, name):
    cases = {c[0]: c for c in _cases(np.random.default_rng())}
    _, f, args, _ = cases[name]
    compiled, text = aot_compile(jax.jit(lambda *a: f(*a, False)), *args)
    assert "tpu_custom_call" in text
    assert compiled is not None
