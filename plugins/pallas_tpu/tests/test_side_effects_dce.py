"""A kernel whose outputs go unused, by ``CompilerParams(has_side_effects=...)``:
SIDE_EFFECTING (or True) survives into the compiled program, marked
side-effecting; PURE, DATAFLOW_SIDE_EFFECTING and False are dropped (by JAX
0.12's jaxpr DCE, or by XLA after JAX 0.10 kept them in StableHLO). Each case
is lowered and compiled for a v5e without a device under ours and under JAX's
own pallas_call, and must agree (JAX 0.10.2's test_side_effecting_dce found
ours' launch dropped from StableHLO on the chip)."""

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as jax_pl
from jax.experimental.pallas import tpu as jax_pltpu

import pallas_frontend as pl
import pallas_tpu as pltpu
from pallas_tpu import aot

pytestmark = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                reason="the device-less TPU compile needs libtpu")

CASES = ["PURE", "SIDE_EFFECTING", "DATAFLOW_SIDE_EFFECTING", True, False]


def _kernel(sync_copy):
    def kernel(x_ref, o_ref):
        sync_copy(x_ref, o_ref)
    return kernel


def _side(lib, case):
    return case if isinstance(case, bool) else getattr(lib.SideEffectType, case)


def _traits(pallas, tpu, case):
    """What survives of an unused launch: (in StableHLO, marked there, in the
    compiled HLO, marked there)."""
    call = pallas.pallas_call(_kernel(tpu.sync_copy), out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                              compiler_params=tpu.CompilerParams(has_side_effects=_side(tpu, case)))

    def f(x):
        call(x)
        return x * 2.0
    lowered = aot.lower_for_tpu(f, jax.ShapeDtypeStruct((8, 128), jnp.float32))
    shlo = lowered.as_text()
    with jax.set_mesh(aot.topology_mesh()):
        hlo = lowered.compile().as_text()
    return ("tpu_custom_call" in shlo, "has_side_effect = true" in shlo,
            "custom-call" in hlo, "custom_call_has_side_effect=true" in hlo)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_unused_launch_survives_as_under_jax(case):
    ours = _traits(pl, pltpu, case)
    jax_own = _traits(jax_pl, jax_pltpu, case)
    kept = case is True or case == "SIDE_EFFECTING"
    assert ours[2:] == jax_own[2:] == (kept, kept)
    if jax.__version__.startswith("0.11.") and not kept:
        # JAX 0.11 leaves an unused pure launch in StableHLO for XLA to drop;
        # ours' launch sits in a jit that JAX 0.11 drops whole: same program
        pytest.skip("StableHLO differs on JAX 0.11 for a launch XLA drops anyway")
    assert ours == jax_own


def test_side_effecting_kernel_still_computes(rng):
    x = rng.standard_normal((8, 128)).astype(np.float32)
    call = pl.pallas_call(_kernel(pltpu.sync_copy), out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                          compiler_params=pltpu.CompilerParams(
                              has_side_effects=pltpu.SideEffectType.SIDE_EFFECTING),
                          interpret=pltpu.InterpretParams())
    np.testing.assert_array_equal(np.asarray(jax.jit(call)(x)), x)
    np.testing.assert_array_equal(np.asarray(call(x)), x)
