"""Every capability tag the frontend documents is derived from the kernel and
checked before lowering: a backend that declares all tags but one refuses
exactly the kernel that needs that one (e.g. Element and BoundedSlice dims
never reach a backend that did not declare them)."""

import jax
import numpy as np
import pytest

from pallas_frontend import backend_api, registry
from pallas_frontend.testing.capability_kernels import CAPABILITY_KERNELS, x64_for


class AllButOne(backend_api.Backend):
    api_version = backend_api.API_VERSION
    platforms = ("cpu",)

    def __init__(self, missing):
        self.name = f"all_but_{missing}"
        self.capabilities = frozenset(backend_api.CAPABILITY_TAGS) - {missing}
        self.lowered = 0

    def lower(self, kernel, ctx, *args):
        self.lowered += 1
        return registry.get_backend("interpret").lower(kernel, ctx, *args)


def test_every_documented_tag_has_a_kernel():
    assert set(CAPABILITY_KERNELS) == set(backend_api.CAPABILITY_TAGS)


@pytest.mark.parametrize("tag", sorted(backend_api.CAPABILITY_TAGS))
def test_missing_tag_is_refused_before_lowering(tag):
    b = registry.register_backend(AllButOne(tag))
    try:
        rng = np.random.default_rng()
        with x64_for(tag):
            fn, operands, expected = CAPABILITY_KERNELS[tag](rng, backend=b.name)
            with pytest.raises(backend_api.BackendCapabilityError,
                               match=f"lacks capability '{tag}'") as info:
                jax.jit(fn).lower(*operands)
        assert b.name in str(info.value) and b.lowered == 0
        # with the tag declared, the same kernel lowers and matches NumPy
        b.capabilities = frozenset(backend_api.CAPABILITY_TAGS)
        with x64_for(tag):
            fn, operands, expected = CAPABILITY_KERNELS[tag](rng, backend=b.name)
            got = np.asarray(jax.jit(fn)(*operands))
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
        assert b.lowered >= 1
    finally:
        registry.unregister_backend(b.name)


def test_vmap_batch_dims_need_vmap_not_squeezed():
    caps = frozenset(backend_api.CAPABILITY_TAGS) - {"squeezed"}
    b = AllButOne("squeezed")
    b.name, b.capabilities = "no_squeezed", caps
    registry.register_backend(b)
    try:
        fn, operands, expected = CAPABILITY_KERNELS["vmap"](np.random.default_rng(),
                                                             backend=b.name)
        np.testing.assert_allclose(np.asarray(jax.jit(fn)(*operands)), expected, rtol=1e-6)
    finally:
        registry.unregister_backend(b.name)
