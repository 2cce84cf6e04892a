"""The contract's array-code helpers (backend_api.kernel_body_fn, block_window,
scratch_structs): a backend gets the kernel as plain JAX functions, with no
Ref, no frontend memory space and no jax._src."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
from pallas_frontend import backend_api, registry


class Capturing(backend_api.Backend):
    """Records the KernelIR it is asked to lower, then lets the interpreter run it."""
    name, api_version, platforms = "capturing", backend_api.API_VERSION, ("cpu",)
    kernel = None

    def lower(self, kernel, ctx, *args):
        self.kernel = kernel
        return registry.get_backend("interpret").lower(kernel, ctx, *args)


@pytest.fixture
def capturing():
    b = registry.register_backend(Capturing())
    yield b
    registry.unregister_backend(b.name)


def test_body_with_any_memory_space_scratch_is_plain_array_code(capturing):
    def body(x, o, acc):
        acc[...] = x[...] * 2.0 + pl.program_id(0).astype(jnp.float32)
        o[...] = acc[...] + 1.0
    rng = np.random.default_rng()
    x = rng.standard_normal(256).astype(np.float32)
    f = pl.pallas_call(body, jax.ShapeDtypeStruct((256,), jnp.float32), grid=(2,),
                       in_specs=[pl.BlockSpec((128,), lambda i: (i,))],
                       out_specs=pl.BlockSpec((128,), lambda i: (i,)),
                       scratch_shapes=[pl.ANY((128,), jnp.float32)], backend="capturing")
    f(x)
    kernel = capturing.kernel
    (scratch,) = backend_api.scratch_structs(kernel)
    assert (scratch.shape, scratch.dtype) == ((128,), jnp.float32)
    assert type(scratch) is jax.ShapeDtypeStruct            # no memory space attached
    fn = backend_api.kernel_body_fn(kernel)
    block = x[128:]
    new_x, new_o, new_acc = jax.jit(fn)(jnp.int32(1), block, jnp.zeros(128, jnp.float32),
                                        jnp.zeros(128, jnp.float32))
    want = block.astype(np.float64) * 2 + 1
    np.testing.assert_allclose(new_acc, want, rtol=1e-6)
    np.testing.assert_allclose(new_o, want + 1, rtol=1e-6)
    np.testing.assert_array_equal(new_x, block)
    with pytest.raises(TypeError, match="takes 1 program ids and 3 Ref values"):
        fn(jnp.int32(0), block)


def test_block_window_gives_element_offsets_and_valid_sizes(capturing):
    def body(a, b, o):
        o[...] = a[...] + b[...]
    specs = [pl.BlockSpec((None, 64), lambda i, j: (i, j)),
             pl.BlockSpec((None, pl.BoundedSlice(64)), lambda i, j: (i, pl.ds(j * 64, 64 - j)))]
    f = pl.pallas_call(body, jax.ShapeDtypeStruct((3, 128), jnp.float32), grid=(3, 2),
                       in_specs=specs, out_specs=specs[0], backend="capturing")
    rng = np.random.default_rng()
    a, b = (rng.standard_normal((3, 128)).astype(np.float32) for _ in range(2))
    f(a, b)
    m_a, m_b = capturing.kernel.in_mappings
    for i in range(3):
        for j in range(2):
            starts, sizes = backend_api.block_window(m_a, jnp.int32(i), jnp.int32(j))
            assert [int(s) for s in starts] == [i, 64 * j] and sizes == [1, 64]
            starts, sizes = jax.jit(lambda i, j: backend_api.block_window(m_b, i, j))(i, j)
            assert [int(s) for s in starts] == [i, 64 * j]
            assert [int(s) for s in sizes] == [1, 64 - j]


def test_block_window_takes_prefetch_values(capturing):
    # An index map reading pl.num_programs of a dynamic axis gets the size through a
    # scalar-prefetch operand (a Ref in the index map); block_window takes the
    # values a launch received (failed before: 'ShapedArray' has no 'inner_aval').
    def body(x, o):
        o[...] = x[...] * 2

    def run(x, n):
        return pl.pallas_call(body, jax.ShapeDtypeStruct((8, 128), jnp.float32), grid=(n,),
                              in_specs=[pl.BlockSpec((1, 128),
                                                     lambda i: (pl.num_programs(0) - 1 - i, 0))],
                              out_specs=pl.BlockSpec((1, 128), lambda i: (i, 0)),
                              backend="capturing")(x)
    x = np.random.default_rng().standard_normal((8, 128)).astype(np.float32)
    out = jax.jit(run)(x, 8)
    np.testing.assert_allclose(out, x[::-1].astype(np.float64) * 2)
    kernel = capturing.kernel
    assert kernel.num_scalar_prefetch == 1
    (m_x,) = kernel.in_mappings
    sizes = np.array([6], np.int32)                   # the prefetch operand: the grid's size
    for i in range(6):
        starts, _ = backend_api.block_window(m_x, np.int32(i), prefetch=[sizes])
        assert [int(s) for s in starts] == [5 - i, 0]
        starts, _ = jax.jit(lambda i, p: backend_api.block_window(m_x, i, prefetch=[p]))(
            np.int32(i), sizes)
        assert [int(s) for s in starts] == [5 - i, 0]
        # Refs are accepted as before
        starts, _ = jax.jit(lambda i, p: backend_api.block_window(
            m_x, i, prefetch=[jax.new_ref(p)]))(np.int32(i), sizes)
        assert [int(s) for s in starts] == [5 - i, 0]
