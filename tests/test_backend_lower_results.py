"""A backend's mistakes in what ``Backend.lower`` returns are named before MLIR
sees them: the backend, the output, what was wrong and the fix. Without the
check JAX reports a ``safe_zip`` length, an MLIR verifier dump, or "Operand 0
of operation func.return must be a Value", naming neither backend nor output."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
from pallas_frontend import backend_api, registry


MISTAKES = {
    # what lower returns -> what the error must say
    "too_few": (lambda kernel, ctx, *args: ctx.lower_fun(lambda *a: [], *args),
                "returned 0 values for the kernel's 1 outputs"),
    "arrays_not_mlir": (lambda kernel, ctx, *args: [jnp.zeros((256,), jnp.float32)],
                        "output 0 (outputs, float32[256]) is a jaxlib"),
    "wrong_dtype": (lambda kernel, ctx, *args: ctx.lower_fun(
                        lambda x: [(x * 2).astype(jnp.int32)], *args),
                    "output 0 (outputs, float32[256]) is of type tensor<256xi32>, "
                    "not tensor<256xf32>"),
    "wrong_shape": (lambda kernel, ctx, *args: ctx.lower_fun(lambda x: [x[:128]], *args),
                    "is of type tensor<128xf32>, not tensor<256xf32>"),
    "not_a_sequence": (lambda kernel, ctx, *args: None, "Backend.lower returned NoneType"),
}


class Mistaken(backend_api.Backend):
    name, api_version, platforms = "mistaken", backend_api.API_VERSION, ("cpu",)
    mistake = None

    def lower(self, kernel, ctx, *args):
        return self.mistake(kernel, ctx, *args)


@pytest.fixture
def mistaken():
    b = pl.register_backend(Mistaken())
    yield b
    registry.unregister_backend(b.name)


def _call(x):
    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2
    return pl.pallas_call(body, jax.ShapeDtypeStruct((256,), jnp.float32), grid=(2,),
                          in_specs=[pl.BlockSpec((128,), lambda i: (i,))],
                          out_specs=pl.BlockSpec((128,), lambda i: (i,)), backend="mistaken")(x)


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_lower_result_mistake_is_named(mistaken, mistake):
    returns, says = MISTAKES[mistake]
    mistaken.mistake = staticmethod(returns)
    x = np.random.default_rng().standard_normal(256).astype(np.float32)
    with pytest.raises(TypeError) as info:
        _call(x)
    msg = str(info.value)
    assert "backend 'mistaken'" in msg and says in msg, msg
    assert "one MLIR value per kernel.out_mappings" in msg and "ctx.lower_fun" in msg, msg
    assert "test_backend_lower_results.py" in msg, msg          # the kernel's line


def test_correct_lower_still_runs(mistaken):
    mistaken.mistake = staticmethod(lambda kernel, ctx, *args: ctx.lower_fun(
        lambda x: [x * 2], *args))
    x = np.random.default_rng().standard_normal(256).astype(np.float32)
    np.testing.assert_allclose(_call(x), x.astype(np.float64) * 2, rtol=1e-6)
