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
        self.missing = missing
        self.lowered = 0
        self.lowered_needing = 0      # kernels lowered that need the missing tag

    def lower(self, kernel, ctx, *args):
        self.lowered += 1
        self.lowered_needing += self.missing in backend_api.required_capabilities(kernel)
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
        # (other kernels of the program may lower first: under JAX 0.10/0.11 a jvp's
        # unused primal launch stays in the jaxpr, as JAX keeps its own)
        assert b.name in str(info.value) and b.lowered_needing == 0
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


class _PrefetchGridSpec:
    """A scalar-prefetch grid spec as a backend defines one (pallas_tpu's, say)."""

    def __new__(cls, num_scalar_prefetch, **kw):
        import pallas_frontend as pl
        spec = pl.GridSpec(**kw)
        spec.num_scalar_prefetch = num_scalar_prefetch
        return spec


def _gather_blocks(backend):
    """out block i = 2 * x block order[i]: the index map reads a prefetched operand."""
    import pallas_frontend as pl
    spec = _PrefetchGridSpec(
        1, grid=(4,), in_specs=[pl.BlockSpec((8,), lambda i, order: (order[i],))],
        out_specs=pl.BlockSpec((8,), lambda i, order: (i,)))

    def kernel(order_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((32,), np.float32),
                          grid_spec=spec, backend=backend)


def test_scalar_prefetch_needs_its_capability():
    """The base check refuses a scalar-prefetch kernel sent to a backend that does
    not declare "scalar_prefetch" (issue 34; before, it reached lower())."""
    rng = np.random.default_rng()
    order = rng.permutation(4).astype(np.int32)
    x = rng.standard_normal(32).astype(np.float32)
    expected = 2 * x.astype(np.float64).reshape(4, 8)[order].reshape(-1)
    without = AllButOne("scalar_prefetch")       # every documented tag, no scalar_prefetch
    with_it = AllButOne("nothing")
    with_it.name, with_it.capabilities = "with_prefetch", with_it.capabilities | {"scalar_prefetch"}
    for b in (without, with_it):
        registry.register_backend(b)
    try:
        with pytest.raises(backend_api.BackendCapabilityError,
                           match="lacks capability 'scalar_prefetch' that kernel 'kernel' needs "
                                 "at num_scalar_prefetch=1"):
            _gather_blocks(without.name)(order, x)
        assert without.lowered == 0
        np.testing.assert_allclose(np.asarray(_gather_blocks(with_it.name)(order, x)), expected,
                                   rtol=1e-6)
        assert with_it.lowered == 1
        assert "scalar_prefetch" in registry.get_backend("interpret").capabilities
        np.testing.assert_allclose(np.asarray(_gather_blocks("interpret")(order, x)), expected,
                                   rtol=1e-6)
    finally:
        for b in (without, with_it):
            registry.unregister_backend(b.name)
