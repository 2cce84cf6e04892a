"""Backend.check rejects what Mosaic cannot take, before lowering, naming the operand."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu
from pallas_frontend.backend_api import BackendCapabilityError, kernel_primitive
from pallas_tpu import aot


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def _call(block, shape=(256, 256), dtype=jnp.float32, kernel=_copy, interpret=True):
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(shape, dtype),
        grid=(shape[0] // block[0], shape[1] // block[1]),
        in_specs=[pl.BlockSpec(block, lambda i, j: (i, j))],
        out_specs=pl.BlockSpec(block, lambda i, j: (i, j)),
        compiler_params=pltpu.CompilerParams(),
        interpret=pltpu.InterpretParams() if interpret else False)


def test_rejects_untiled_lane_dim_when_compiling():
    with pytest.raises(BackendCapabilityError, match=r"args\[0\].*divisible by 8 and 128"):
        aot.lower_for_tpu(_call((128, 64), interpret=False),
                          jax.ShapeDtypeStruct((256, 256), jnp.float32))


def test_rejects_untiled_sublane_dim_when_compiling():
    with pytest.raises(BackendCapabilityError, match=r"block shape \(4, 128\) of args\[0\]"):
        aot.lower_for_tpu(_call((4, 128), interpret=False),
                          jax.ShapeDtypeStruct((256, 256), jnp.float32))


@pytest.mark.parametrize("block", [(4, 128), (128, 64), (12, 40)])
def test_interpret_mode_runs_untiled_blocks(block):
    """TPU interpret mode (as JAX's) takes any block shape; only Mosaic needs (8, 128)."""
    shape = (block[0] * 2, block[1] * 3)
    x = np.random.default_rng().standard_normal(shape).astype(np.float32)

    def add_one(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0
    out = _call(block, shape=shape, kernel=add_one)(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(out), x.astype(np.float64) + 1.0, rtol=1e-6)


def test_accepts_full_array_dims_and_runs():
    x = np.random.default_rng().standard_normal((20, 72)).astype(np.float32)
    out = _call((20, 72), shape=(20, 72))(jnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(out), x)


def test_rejects_float64():
    with jax.enable_x64(True):
        with pytest.raises(BackendCapabilityError,
                           match=r"'tpu' lacks capability 'float64'.*args\[0\]"):
            jax.jit(_call((8, 128), dtype=jnp.float64)).trace(
                jnp.zeros((256, 256), jnp.float64)).lower()


other_p = kernel_primitive("other_backend_op", owner="triton")
other_p.def_abstract_eval(lambda x: x)


def test_rejects_other_backends_primitive():
    def kernel(x_ref, o_ref):
        o_ref[...] = other_p.bind(x_ref[...])
    with pytest.raises(BackendCapabilityError, match="other_backend_op.*'triton'"):
        jax.jit(_call((8, 128), kernel=kernel)).trace(jnp.zeros((256, 256))).lower()


def test_interpreter_refuses_tpu_primitives_without_a_rule():
    # (local DMAs have one: tests/test_dma_interpret.py)
    def kernel(x_ref, o_ref):
        pltpu.prng_seed(1)
        o_ref[...] = x_ref[...]
    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                       interpret=True)
    with pytest.raises(BackendCapabilityError, match="tpu_prng_seed.*'tpu'"):
        f(jnp.zeros((8, 128)))


def test_compiler_params_validate():
    with pytest.raises(ValueError, match="dimension_semantics"):
        pltpu.CompilerParams(dimension_semantics=("sideways",))
    with pytest.raises(TypeError):
        pltpu.InterpretParams(no_such_option=True)
    with pytest.raises(ValueError, match="dma_execution_mode"):
        pltpu.InterpretParams(dma_execution_mode="lazy")


def test_interpret_params_mirror_jax():
    """Same fields and defaults as JAX's TPU InterpretParams (fails on a JAX
    upgrade that adds or changes one)."""
    import dataclasses
    from jax.experimental.pallas import tpu as jax_tpu
    from pallas_tpu import _jax_private
    ours = {f.name: f.default for f in dataclasses.fields(pltpu.InterpretParams)}
    theirs = {f.name: f.default for f in dataclasses.fields(jax_tpu.InterpretParams)}
    # an older JAX of the window lacks the fields JAX 0.12 added, and only those
    newer = {name for name in ours if _jax_private.missing_interpret_field(name)}
    assert {k: v for k, v in ours.items() if k not in newer} == theirs
    params = pltpu.InterpretParams(detect_races=True, uninitialized_memory="zero")
    assert params.to_jax() == jax_tpu.InterpretParams(detect_races=True, uninitialized_memory="zero")


def test_cpu_without_interpret_is_refused():
    f = pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                       compiler_params=pltpu.CompilerParams())
    with pytest.raises(Exception, match="tpu"):
        f(jnp.zeros((8, 128)))


def test_bounded_slice_block_dims_are_refused_by_name():
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    f = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32), grid=(2,),
        in_specs=[pl.BlockSpec((pl.BoundedSlice(8), 128), lambda i: (pl.ds(i * 4, 8), 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
        compiler_params=pltpu.CompilerParams(), interpret=pltpu.InterpretParams())
    with pytest.raises(BackendCapabilityError, match=r"BoundedSlice block dim 0 of args\[0\]"):
        f(jnp.zeros((16, 128)))
