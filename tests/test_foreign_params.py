"""A params object of JAX's own Pallas (code written for JAX passes them) is
offered to every backend (``Backend.adopt_foreign_params``, API 1.7) before it
is refused; the backend that adopts it runs the kernel."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
from pallas_frontend import backend_api, foreign_params, registry


@dataclasses.dataclass(frozen=True)
class AdoptedParams:
    BACKEND = "adopter"
    num_warps: int = 4


class Adopter(backend_api.Backend):
    """Takes JAX's Triton CompilerParams (no real plugin adopts those) as its own."""
    name = "adopter"
    api_version = backend_api.API_VERSION
    platforms = ("cpu",)
    compiler_params_type = AdoptedParams
    capabilities = frozenset(backend_api.CAPABILITY_TAGS)

    def __init__(self):
        self.lowered = 0

    def adopt_foreign_params(self, obj):
        from jax.experimental.pallas import triton as jpltriton
        if isinstance(obj, jpltriton.CompilerParams):
            return AdoptedParams(num_warps=obj.num_warps)
        return None

    def lower(self, kernel, ctx, *args):
        self.lowered += 1
        assert kernel.compiler_params == AdoptedParams(num_warps=8)
        return registry.get_backend("interpret").lower(kernel, ctx, *args)


class Older(backend_api.Backend):
    """A backend written against API 1.6 has no hook at all (feature probing)."""
    name = "older"
    api_version = (backend_api.API_VERSION[0], 6)
    platforms = ("cpu",)


@pytest.fixture
def adopter():
    older = Older()
    older.adopt_foreign_params = None     # as a Backend from before the hook existed
    b = registry.register_backend(Adopter())
    registry.register_backend(older)
    try:
        yield b
    finally:
        registry.unregister_backend(b.name)
        registry.unregister_backend(older.name)


def _double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def test_adopted_params_pick_the_adopting_backend(adopter, rng):
    from jax.experimental.pallas import triton as jpltriton
    x = rng.standard_normal(256).astype(np.float32)
    f = pl.pallas_call(_double, jax.ShapeDtypeStruct(x.shape, jnp.float32),
                       compiler_params=jpltriton.CompilerParams(num_warps=8))
    np.testing.assert_allclose(np.asarray(f(x)), 2 * x.astype(np.float64), rtol=1e-7)
    assert adopter.lowered == 1


def test_a_foreign_object_no_backend_adopts_is_still_refused(adopter):
    from jax.experimental.pallas import tpu as jpltpu
    adopted = foreign_params.adopt(None, jpltpu.CompilerParams())
    assert isinstance(adopted[1], jpltpu.CompilerParams)       # nobody adopts it
    with pytest.raises(TypeError, match=r"JAX's own jax\.experimental\.pallas\.tpu\."
                                         r"CompilerParams.*Use pallas_tpu\.CompilerParams"):
        pl.pallas_call(_double, jax.ShapeDtypeStruct((8,), jnp.float32),
                       compiler_params=jpltpu.CompilerParams())


class BrokenHook(backend_api.Backend):
    """A backend whose hook raises: warned about, skipped, never the call's end."""
    name = "broken-hook"
    api_version = backend_api.API_VERSION
    platforms = ("cpu",)

    def adopt_foreign_params(self, obj):
        raise AttributeError("module has no attribute 'SomethingNewer'")


def test_a_raising_hook_is_warned_about_and_the_others_still_adopt(rng):
    from jax.experimental.pallas import triton as jpltriton
    broken = registry.register_backend(BrokenHook())     # asked first
    adopter = registry.register_backend(Adopter())
    try:
        with pytest.warns(RuntimeWarning, match=r"backend 'broken-hook': adopt_foreign_params"
                          r"\(CompilerParams\) raised AttributeError: .*SomethingNewer"):
            x = rng.standard_normal(64).astype(np.float32)
            f = pl.pallas_call(_double, jax.ShapeDtypeStruct(x.shape, jnp.float32),
                               compiler_params=jpltriton.CompilerParams(num_warps=8))
            np.testing.assert_allclose(np.asarray(f(x)), 2 * x.astype(np.float64), rtol=1e-7)
    finally:
        registry.unregister_backend(broken.name)
        registry.unregister_backend(adopter.name)
    assert adopter.lowered == 1
