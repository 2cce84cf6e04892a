"""``pl.select_ref`` as the source or destination of a pltpu DMA: the Ref the
run-time index picks is copied, on the built-in interpreter and in TPU
interpret mode (against NumPy, every index), and the kernel AOT-compiles for
v5e; JAX's own ``select_ref`` view is taken as ours. JAX's refusals hold."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as jax_pl

import pallas_frontend as pl
import pallas_tpu as pltpu

INTERPRETERS = {"builtin": True, "tpu": pltpu.InterpretParams()}
SMEM, ANY = pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pl.ANY)


def _from_selected(select_ref):
    """o = the chosen one of a[0:8], a[8:16], b (a view and a whole Ref)."""
    def body(idx_ref, a_ref, b_ref, o_ref, sem):
        src = select_ref(idx_ref[0], a_ref.at[pl.ds(0, 8)], a_ref.at[pl.ds(8, 8)], b_ref)
        pltpu.async_copy(src, o_ref, sem).wait()
    return body


def _into_selected(idx_ref, a_ref, o_ref, s0, s1, sem):
    """a lands in the chosen scratch; both scratch buffers go out."""
    s0[...] = jnp.zeros_like(s0)
    s1[...] = jnp.zeros_like(s1)
    copy = pltpu.make_async_copy(a_ref, pl.select_ref(idx_ref[0], s0, s1), sem)
    copy.start()
    copy.wait()
    o_ref[0] = s0[...]
    o_ref[1] = s1[...]


def _call_from(select_ref=pl.select_ref, **kw):
    return pl.pallas_call(
        _from_selected(select_ref), out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        in_specs=[SMEM, ANY, ANY], out_specs=ANY, scratch_shapes=[pltpu.SemaphoreType.DMA],
        **kw)


def _call_into(**kw):
    return pl.pallas_call(
        _into_selected, out_shape=jax.ShapeDtypeStruct((2, 8, 128), jnp.float32),
        in_specs=[SMEM, ANY],
        scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), pltpu.VMEM((8, 128), jnp.float32),
                        pltpu.SemaphoreType.DMA], **kw)


@pytest.mark.parametrize("interpret", INTERPRETERS.values(), ids=INTERPRETERS)
@pytest.mark.parametrize("select_ref", [pl.select_ref, jax_pl.select_ref], ids=["ours", "jax"])
def test_copy_from_the_selected_ref(interpret, select_ref):
    rng = np.random.default_rng()
    a = rng.standard_normal((16, 128)).astype(np.float32)
    b = rng.standard_normal((8, 128)).astype(np.float32)
    call = jax.jit(_call_from(select_ref, interpret=interpret))
    for i, want in enumerate((a[:8], a[8:], b)):
        np.testing.assert_array_equal(call(np.array([i], np.int32), a, b), want)


@pytest.mark.parametrize("interpret", INTERPRETERS.values(), ids=INTERPRETERS)
def test_copy_into_the_selected_ref(interpret):
    a = np.random.default_rng().standard_normal((8, 128)).astype(np.float32)
    call = jax.jit(_call_into(interpret=interpret))
    for i in (0, 1):
        want = np.zeros((2, 8, 128), np.float32)
        want[i] = a
        np.testing.assert_array_equal(call(np.array([i], np.int32), a), want)


def test_aot_v5e(aot_compile):
    idx = np.array([1], np.int32)
    a = np.ones((16, 128), np.float32)
    b = np.ones((8, 128), np.float32)
    params = pltpu.CompilerParams()
    assert aot_compile(_call_from(compiler_params=params), idx, a, b)[0] is not None
    assert aot_compile(_call_into(compiler_params=params), idx, b)[0] is not None


def test_refusals():
    out = jax.ShapeDtypeStruct((8, 128), jnp.float32)

    def kernel_with(make):
        def body(x_ref, y_ref, o_ref):
            make(x_ref, y_ref)
            o_ref[...] = x_ref[...]
        return pl.pallas_call(body, out_shape=out, interpret=True)
    x, y = jnp.zeros((8, 128)), jnp.zeros((16, 128))
    with pytest.raises(ValueError, match="two or more"):
        kernel_with(lambda a, b: pl.select_ref(0, a))(x, y)
    with pytest.raises(TypeError, match="one shape and dtype"):
        kernel_with(lambda a, b: pl.select_ref(0, a, b))(x, y)
    with pytest.raises(TypeError, match="not a Ref"):
        kernel_with(lambda a, b: pl.select_ref(0, a, b[...]))(x, y)
    with pytest.raises(TypeError, match="integer scalar"):
        kernel_with(lambda a, b: pl.select_ref(0.5, a, b.at[pl.ds(0, 8)]))(x, y)
