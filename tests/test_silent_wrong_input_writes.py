"""A kernel that writes its input Ref: later grid points read the update, as
in JAX's own interpreter (issue 24, defect 2)."""

import jax
import jax.experimental.pallas as jpl
import jax.numpy as jnp
import numpy as np

import pallas_frontend as pl
from conftest import rand


def _bump_and_copy(a, o):
    a[...] = a[...] * 2 + 1
    o[...] = a[...]


def _run(mod, x, grid, in_map, out_map, block, out_len):
    return mod.pallas_call(
        _bump_and_copy, out_shape=jax.ShapeDtypeStruct((out_len,), x.dtype), grid=grid,
        in_specs=[mod.BlockSpec((block,), in_map)], out_specs=mod.BlockSpec((block,), out_map),
        interpret=True)(x)


def test_input_block_revisited_every_point_keeps_writes(rng):
    x = rand(rng, 3)
    args = (x, (4,), lambda i: (0,), lambda i: (i,), 3, 12)
    want = _run(jpl, *args)
    np.testing.assert_allclose(np.asarray(want)[-3:], 16 * x.astype(np.float64) + 15,
                               rtol=1e-5)     # four bumps, as JAX itself gives
    np.testing.assert_array_equal(_run(pl, *args), want)


def test_input_block_revisited_on_inner_axis_2d(rng):
    x = rand(rng, 8, 4)

    def kern(a, o):
        a[...] = a[...] + 1.5
        o[...] = a[...] * 3

    def run(mod):
        return mod.pallas_call(
            kern, out_shape=jax.ShapeDtypeStruct((8, 12), jnp.float32), grid=(2, 3),
            in_specs=[mod.BlockSpec((4, 4), lambda i, j: (i, 0))],
            out_specs=mod.BlockSpec((4, 4), lambda i, j: (i, j)), interpret=True)(x)

    np.testing.assert_array_equal(run(pl), run(jpl))


def test_input_write_under_jit_with_a_dynamic_grid(rng):
    x = rand(rng, 2)

    @jax.jit
    def f(x, n):
        return pl.pallas_call(
            _bump_and_copy, out_shape=jax.ShapeDtypeStruct((8,), x.dtype), grid=(n,),
            in_specs=[pl.BlockSpec((2,), lambda i: (0,))],
            out_specs=pl.BlockSpec((2,), lambda i: (i,)), interpret=True)(x)

    got = np.asarray(f(x, 4))
    want, a = [], x.astype(np.float64)
    for _ in range(4):
        a = a * 2 + 1
        want.append(a)
    np.testing.assert_allclose(got, np.concatenate(want), rtol=1e-6)


def test_input_written_inside_a_loop_body(rng):
    x, y = rand(rng, 8), rand(rng, 2)

    def kern(x_ref, y_ref, o_ref):
        def body(j, c):
            y_ref[...] += x_ref[0:2] * 0.5
            return c
        jax.lax.fori_loop(0, 3, body, 0)
        o_ref[...] = y_ref[0:1] * 2

    def run(mod):
        return mod.pallas_call(
            kern, out_shape=jax.ShapeDtypeStruct((4,), jnp.float32), grid=(4,),
            in_specs=[mod.BlockSpec((8,), lambda i: (0,)), mod.BlockSpec((2,), lambda i: (0,))],
            out_specs=mod.BlockSpec((1,), lambda i: (i,)), interpret=True)(x, y)

    np.testing.assert_allclose(run(pl), run(jpl), rtol=1e-6)


def test_inputs_only_read_in_a_loop_still_run_batched(monkeypatch, rng):
    from pallas_frontend.interpreter import vectorized
    plans = []
    make_plan = vectorized.make_plan
    monkeypatch.setattr(vectorized, "make_plan",
                        lambda k, **kw: plans.append(make_plan(k, **kw)) or plans[-1])
    x = rand(rng, 8)

    def kern(x_ref, o_ref):
        total = jax.lax.fori_loop(0, 4, lambda j, c: c + x_ref[pl.ds(j, 1)], jnp.zeros(1))
        o_ref[...] = total + pl.program_id(0).astype(jnp.float32)

    got = pl.pallas_call(kern, out_shape=jax.ShapeDtypeStruct((4,), jnp.float32), grid=(4,),
                         in_specs=[pl.BlockSpec((8,), lambda i: (0,))],
                         out_specs=pl.BlockSpec((1,), lambda i: (i,)), interpret=True)(x)
    np.testing.assert_allclose(got, x[:4].astype(np.float64).sum() + np.arange(4), rtol=1e-5)
    assert plans and plans[0].batch_axes == (0,), plans[0].note
