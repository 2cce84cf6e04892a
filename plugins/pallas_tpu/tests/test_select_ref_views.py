"""``pl.select_ref`` beyond a plain source or destination (JAX's test_select_ref
and test_select_ref_nested, lost on the v5e): a selection among semaphores
(``sem.at[0]``, ``sem.at[1]``), a selection among selections, and a selection
viewed further (``.reshape``, ``.at``) pick the Ref the run-time index names
and keep the later views; an index past the end picks the last Ref, as JAX's
Mosaic lowering does. Against NumPy on fresh data, and compiled for a v5e."""

import functools
import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu

HBM = pl.BlockSpec(memory_space=pltpu.HBM)
N = 4


def _gather_rows(interpret=True):
    """y[8i:8i+8] = x_i, each copy signalling the semaphore select_ref picks
    among two by i (i = 2, 3 are past the end)."""
    @functools.partial(pl.pallas_call, in_specs=[HBM] * N, out_specs=HBM,
                       out_shape=jax.ShapeDtypeStruct((8 * N, 128), jnp.float32),
                       interpret=interpret)
    def kernel(*refs):
        *xs, y = refs

        def body(sem):
            @pl.loop(0, N)
            def _(i):
                pltpu.async_copy(pl.select_ref(i, *xs), y.at[pl.ds(8 * i, 8)],
                                 pl.select_ref(i, sem.at[0], sem.at[1])).wait()
        pl.run_scoped(body, pltpu.SemaphoreType.DMA(2))
    return kernel


def _nested_halves(half, interpret=True):
    """y[8i:8i+8] = left (half=0) or right (half=1) half of x_i: a selection
    among selections, reshaped."""
    @functools.partial(pl.pallas_call, in_specs=[HBM] * N + [pl.BlockSpec(memory_space=pltpu.SMEM)],
                       out_specs=HBM, out_shape=jax.ShapeDtypeStruct((8 * N, 128), jnp.float32),
                       interpret=interpret)
    def kernel(*refs):
        *xs, half_ref, y = refs

        def body(sem):
            @pl.loop(0, N)
            def _(i):
                halves = [pl.select_ref(half_ref[0], x.at[:, :128], x.at[:, 128:]) for x in xs]
                pltpu.async_copy(pl.select_ref(i, *halves).reshape(8, 128),
                                 y.at[pl.ds(8 * i, 8)], sem.at[0]).wait()
        pl.run_scoped(body, pltpu.SemaphoreType.DMA(2))
    return kernel


def _viewed_selection(interpret=True):
    """o = rows 2:6 of the Ref idx picks among a, b (the .at after the selection)."""
    @functools.partial(pl.pallas_call, in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), HBM, HBM],
                       out_specs=HBM, out_shape=jax.ShapeDtypeStruct((4, 128), jnp.float32),
                       scratch_shapes=[pltpu.SemaphoreType.DMA], interpret=interpret)
    def kernel(idx_ref, a, b, o, sem):
        pltpu.async_copy(pl.select_ref(idx_ref[0], a, b).at[pl.ds(2, 4)], o, sem).wait()
    return kernel


def _parts(rng, width=128):
    return [rng.standard_normal((8, width)).astype(np.float32) for _ in range(N)]


def test_a_selected_semaphore_signals_and_every_copy_lands():
    xs = _parts(np.random.default_rng())
    got = jax.jit(_gather_rows())(*xs)
    np.testing.assert_array_equal(np.asarray(got), np.concatenate(xs))


@pytest.mark.parametrize("half", [0, 1])
def test_a_reshaped_selection_of_selections_copies_the_chosen_half(half):
    xs = _parts(np.random.default_rng(), width=256)
    got = jax.jit(_nested_halves(half))(*xs, np.array([half], np.int32))
    want = np.concatenate([x[:, 128 * half:128 * (half + 1)] for x in xs])
    np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("interpret", [True, pltpu.InterpretParams()], ids=["builtin", "tpu"])
@pytest.mark.parametrize("idx", [0, 1, 5, -1])
def test_a_view_after_the_selection_is_kept(interpret, idx):
    rng = np.random.default_rng()
    a, b = (rng.standard_normal((8, 128)).astype(np.float32) for _ in range(2))
    got = jax.jit(_viewed_selection(interpret))(np.array([idx], np.int32), a, b)
    chosen = a if idx == 0 else b          # past the end (either way) is the last one
    np.testing.assert_array_equal(np.asarray(got), chosen[2:6])


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                    reason="compiling for a TPU topology needs libtpu")
def test_they_compile_for_v5e(aot_compile):
    rng = np.random.default_rng()
    for fn, args in ((_gather_rows(False), _parts(rng)),
                     (_nested_halves(0, False), [*_parts(rng, 256), np.array([0], np.int32)]),
                     (_viewed_selection(False), [np.array([1], np.int32), *_parts(rng)[:2]])):
        compiled, text = aot_compile(fn, *args)
        assert compiled is not None and "tpu_custom_call" in text
