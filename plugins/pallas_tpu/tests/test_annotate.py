"""``annotate``: the view carries JAX's own access-assumption transform (equal
to what JAX's ``pltpu.annotate`` builds for the same Ref and flags, merged
the same way), reads through it on the built-in interpreter equal NumPy's, the
kernel AOT-compiles for v5e with every flag (Mosaic gets the hints through
JAX's rule), and JAX's refusals hold before anything runs. JAX's TPU interpret
mode cannot read through the transform, under JAX or ours (checked below)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as jax_pl
from jax.experimental.pallas import tpu as jax_pltpu

import pallas_frontend as pl
import pallas_tpu as pltpu
from tpu_window import ANNOTATE

# ours carries JAX's own transform (test_jax_window: the line ours says on JAX 0.10)
pytestmark = ANNOTATE

FLAG_SETS = [dict(no_store=True), dict(no_bank_conflict=True),
             dict(no_store=True, no_bank_conflict=True), dict(no_hazard=True),
             dict(no_hazard_no_deps=True, no_bank_conflict=True)]


def _kernel(flags, annotate=pltpu.annotate):
    def body(x_ref, o_ref, v_ref):
        v_ref[...] = x_ref[...] + 1.0
        view = annotate(v_ref.at[pl.ds(8, 8)], **flags)
        o_ref[...] = view[...] * 2.0 + annotate(v_ref, **flags)[pl.ds(0, 8), :]
    return body


def _call(flags, **kw):
    return pl.pallas_call(
        _kernel(flags), out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        scratch_shapes=[pltpu.VMEM((16, 128), jnp.float32)], **kw)


def _want(x):
    v = x.astype(np.float64) + 1.0
    return v[8:] * 2.0 + v[:8]


@pytest.mark.parametrize("flags", FLAG_SETS, ids=lambda f: "+".join(f))
def test_reads_through_annotations_on_the_builtin_interpreter(flags):
    x = np.random.default_rng().standard_normal((16, 128)).astype(np.float32)
    np.testing.assert_allclose(_call(flags, interpret=True)(x), _want(x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("flags", FLAG_SETS, ids=lambda f: "+".join(f))
def test_aot_v5e(flags, aot_compile):
    x = np.random.default_rng().standard_normal((16, 128)).astype(np.float32)
    compiled, _ = aot_compile(_call(flags, compiler_params=pltpu.CompilerParams()), x)
    assert compiled is not None


def test_the_transform_is_jaxs():
    """Ours and JAX's annotate on the same (JAX-API) VMEM scratch Ref, each
    annotating twice: the same transforms, the assumptions merged."""
    seen = {}

    def body(x_ref, o_ref, v_ref):
        for name, fn in (("ours", pltpu.annotate), ("jax", jax_pltpu.annotate)):
            twice = fn(fn(v_ref.at[pl.ds(0, 8)], no_store=True), no_bank_conflict=True)
            seen[name] = twice.transforms
        o_ref[...] = x_ref[...]
    jax_pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                       scratch_shapes=[jax_pltpu.VMEM((16, 128), jnp.float32)],
                       interpret=jax_pltpu.InterpretParams())(jnp.ones((8, 128)))
    assert seen["ours"] == seen["jax"]
    assert seen["ours"][-1].assumption.no_store and seen["ours"][-1].assumption.no_bank_conflict


def test_tpu_interpret_mode_fails_as_under_jax():
    x = np.ones((16, 128), np.float32)
    flags = dict(no_store=True)
    with pytest.raises(Exception, match="AccessAssumptionTransform"):
        jax_pl.pallas_call(_kernel(flags, jax_pltpu.annotate),
                           out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                           scratch_shapes=[jax_pltpu.VMEM((16, 128), jnp.float32)],
                           interpret=jax_pltpu.InterpretParams())(x)
    with pytest.raises(Exception, match="AccessAssumptionTransform"):
        _call(flags, interpret=pltpu.InterpretParams())(x)


def test_refusals():
    out = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    x = jnp.zeros((8, 128), jnp.float32)

    def hazard_on_a_block(x_ref, o_ref):
        pltpu.annotate(x_ref, no_hazard=True)

    def contradiction(x_ref, o_ref, v_ref):
        pltpu.annotate(v_ref, no_store=True, no_hazard=True)

    def not_a_ref(x_ref, o_ref):
        pltpu.annotate(x_ref[...], no_store=True)
    with pytest.raises(ValueError, match="declared in VMEM"):
        pl.pallas_call(hazard_on_a_block, out_shape=out, interpret=True)(x)
    with pytest.raises(ValueError, match="contradiction"):
        pl.pallas_call(contradiction, out_shape=out, interpret=True,
                       scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)])(x)
    with pytest.raises(TypeError, match="must be a Ref"):
        pl.pallas_call(not_a_ref, out_shape=out, interpret=True)(x)
