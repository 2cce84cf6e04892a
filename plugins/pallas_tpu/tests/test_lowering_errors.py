"""``pallas_tpu.LoweringException`` is JAX's, and catches the errors JAX's
Mosaic lowering raises as such under ours as under JAX (same message, plus
the kernel's line)."""

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as jax_pl
from jax.experimental.pallas import tpu as jax_pltpu

import pallas_frontend as pl
import pallas_tpu as pltpu
from pallas_tpu import aot

X = jax.ShapeDtypeStruct((64, 128), jnp.float32)


def _body(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def _triple_buffered(P, **kw):
    return lambda a: P.pallas_call(
        _body, out_shape=X, grid=(8,),
        in_specs=[P.BlockSpec((8, 128), lambda i: (i, 0), pipeline_mode=P.Buffered(3))],
        out_specs=P.BlockSpec((8, 128), lambda i: (i, 0)), **kw)(a)


def test_lowering_exception_is_jaxs_and_catches_the_same_error():
    assert pltpu.LoweringException is jax_pltpu.LoweringException
    messages = {}
    for side, fn in (("ours", _triple_buffered(pl, compiler_params=pltpu.CompilerParams())),
                     ("jax", _triple_buffered(jax_pl))):
        with pytest.raises(pltpu.LoweringException) as info:
            aot.lower_for_tpu(fn, X)
        messages[side] = str(info.value)
    assert "buffering" in messages["jax"]
    assert messages["ours"].endswith(messages["jax"])
