"""``has_memory_space``: on the interpreters a pl.ANY operand is in HBM (and
in no other space), so the HBM branch runs; it AOT-compiles for v5e, where
Mosaic answers; a Ref outside pl.ANY, or asking about pl.ANY, is refused."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu
from tpu_window import jax_pltpu_has

SPACES = [pltpu.HBM, pltpu.VMEM, pltpu.SMEM, pltpu.VMEM_SHARED, pltpu.CMEM]


def _body(x_ref, o_ref, flags_ref):
    for i, space in enumerate(SPACES):
        flags_ref[i] = pltpu.has_memory_space(x_ref, space).astype(jnp.int32)

    @pl.when(pltpu.has_memory_space(x_ref, pltpu.HBM))
    def _():
        pltpu.sync_copy(x_ref, o_ref)


def _call(x, **kw):
    # the output is written only in the HBM branch: an output left unwritten
    # would show the branch was not taken
    return pl.pallas_call(
        _body, out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype),
                          jax.ShapeDtypeStruct((len(SPACES),), jnp.int32)),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=(pl.BlockSpec(memory_space=pl.ANY), pl.BlockSpec(memory_space=pltpu.SMEM)),
        **kw)(x)


@pytest.mark.parametrize("interpret", [True, pltpu.InterpretParams()], ids=["builtin", "tpu"])
def test_an_any_operand_is_in_hbm_on_the_interpreters(interpret):
    x = np.random.default_rng().standard_normal((8, 128)).astype(np.float32)
    out, flags = _call(x, interpret=interpret)
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(flags, [1, 0, 0, 0, 0])


@jax_pltpu_has("has_memory_space")
def test_has_memory_space_aot(aot_compile):
    x = np.random.default_rng().standard_normal((8, 128)).astype(np.float32)
    compiled, _ = aot_compile(lambda a: _call(a, compiler_params=pltpu.CompilerParams()), x)
    assert compiled is not None


def test_refusals():
    def vmem_ref(x_ref, o_ref):
        pltpu.has_memory_space(x_ref, pltpu.HBM)

    def ask_any(x_ref, o_ref):
        pltpu.has_memory_space(x_ref, pl.ANY)
    x = jnp.zeros((8, 128), jnp.float32)
    out = jax.ShapeDtypeStruct(x.shape, x.dtype)
    with pytest.raises(ValueError, match="must be in pl.ANY"):
        pl.pallas_call(vmem_ref, out_shape=out, interpret=True)(x)
    with pytest.raises(ValueError, match="concrete space"):
        pl.pallas_call(ask_any, out_shape=out, in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                       interpret=True)(x)
