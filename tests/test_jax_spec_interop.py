"""Our spec objects and JAX's interoperate: JAX's fuser (block-spec pull/push,
``jax.experimental.pallas.fuser``) takes ours, and our ``pallas_call`` takes
the specs it returns (JAX's tests/pallas/fuser_block_spec_test.py relies on it)."""

from __future__ import annotations

import jax
import jax.experimental.pallas as jpl
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import fuser

import pallas_frontend as pl
from pallas_frontend.testing.jax_window import needs_jax

KINDS = [("Blocked", (8,)), ("Element", (8, (1, 2))), ("BoundedSlice", (8,)), ("Indirect", (8,)),
         ("Squeezed", ())]


@pytest.mark.parametrize("name,args", KINDS)
def test_block_dims_are_and_equal_jax_kinds(name, args):
    ours, theirs = getattr(pl, name)(*args), getattr(jpl, name)(*args)
    assert isinstance(ours, getattr(jpl, name))
    assert ours == theirs and theirs == ours and hash(ours) == hash(theirs)
    assert len({ours, theirs}) == 1
    other = pl.Element(8) if name != "Element" else pl.Element(8, (0, 1))
    assert ours != other and other != theirs


def test_no_block_spec_and_memory_spaces_are_jax_values():
    assert pl.no_block_spec is jpl.no_block_spec
    for name in ("ANY", "DEFAULT", "ERROR", "INDEX", "KEY"):
        ours, theirs = getattr(pl.MemorySpace, name), getattr(jpl.MemorySpace, name)
        assert ours == theirs and theirs == ours and hash(ours) == hash(theirs)
    assert pl.MemorySpace.ANY != jpl.MemorySpace.DEFAULT
    assert pl.MemorySpace.KEY != pl.MemorySpace.INDEX


def test_pallas_call_takes_jax_block_dims():
    x = jax.random.normal(jax.random.key(1), (3, 64, 96), jnp.float32)

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0 + 1.0

    spec = pl.BlockSpec((jpl.Squeezed(), jpl.Blocked(16), 96), lambda b, i: (b, i, 0))
    out = pl.pallas_call(kernel, grid=(3, 4), in_specs=[spec], out_specs=spec,
                         out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    np.testing.assert_allclose(out, np.asarray(x, np.float64) * 2 + 1, rtol=1e-6)


def test_pallas_call_takes_jax_block_specs():
    x = jax.random.normal(jax.random.key(3), (32, 48), jnp.float32)

    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.exp(x_ref[...])

    in_spec = jpl.BlockSpec((8, jpl.Blocked(48)), lambda i: (i, 0),
                            pipeline_mode=jpl.Buffered(2))
    out_spec = jpl.BlockSpec((8, 48), lambda i: (i, 0), memory_space=jpl.MemorySpace.DEFAULT)
    out = pl.pallas_call(kernel, grid=(4,), in_specs=[in_spec], out_specs=out_spec,
                         out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    np.testing.assert_allclose(out, np.exp(np.asarray(x, np.float64)), rtol=1e-6)
    ours = pl.BlockSpec((8, 48), lambda i: (i, 0))
    assert pl.pallas_call(kernel, grid=(4,), in_specs=[ours], out_specs=ours,
                          out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x).tolist() \
        == out.tolist()


@needs_jax("0.12", "JAX 0.10/0.11's fuser cannot pull a pl.Squeezed() block through a "
                   "broadcast (JAX's own pallas_call fails alike: 'add: arrays must have "
                   "the same number of dimensions')")
def test_fuser_pulls_a_prologue_into_our_pallas_call():
    kx, kb = jax.random.split(jax.random.key(2))
    x = jax.random.normal(kx, (4, 64, 256), jnp.float32)
    b = jax.random.normal(kb, (256,), jnp.float32)

    def prologue():
        return jnp.tanh(x) + b[None, None, :]

    fn, values, prefetch = fuser.get_fusion_values(prologue)
    out_spec = pl.BlockSpec((pl.Squeezed(), 64, 128), lambda i, j: (i, 0, j))
    kernel_fn, (value_specs,), _ = fuser.pull_block_spec(
        fn, out_spec, grid_len=2,
        scalar_prefetch_handler=fuser.make_scalar_prefetch_handler())(values)

    def kernel(value_refs, o_ref):
        blocks = jax.tree.map(lambda r: r[...], value_refs)
        o_ref[...] = kernel_fn((pl.program_id(0), pl.program_id(1)), prefetch, blocks) * 3.0

    out = pl.pallas_call(kernel, grid=(4, 2), in_specs=[value_specs], out_specs=out_spec,
                         out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(values)
    want = (np.tanh(np.asarray(x, np.float64)) + np.asarray(b, np.float64)) * 3
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


@needs_jax("0.11", "JAX 0.10's fuser has no push rule for lax.split")
def test_fuser_pushes_our_spec_through_an_epilogue():
    # x * tanh(x): the binary op meets our spec twice and must see them equal
    spec = pl.BlockSpec((None, 32, 128), lambda i, j: (i, j, 0))
    x_type = jax.ShapeDtypeStruct((2, 64, 128), jnp.float32)
    pushed = fuser.push_block_spec(lambda v: v * jnp.tanh(v), spec)(x_type)
    assert pushed.block_shape == (None, 32, 128)
    assert pushed.index_map(1, 1) == (1, 1, 0)
    # JAX's split rule makes JAX's Blocked for the dims it keeps: equal to ours
    spec = pl.BlockSpec((12, 128), lambda i: (0, i))
    parts = fuser.push_block_spec(lambda v: jax.lax.split(v, (2, 10), axis=0), spec)(
        jax.ShapeDtypeStruct((12, 512), jnp.float32))
    assert [p.block_shape for p in parts] == [(2, pl.Blocked(128)), (10, pl.Blocked(128))]


def test_fuser_takes_our_multiple_of():
    """JAX's fuser has rules for JAX's multiple_of primitive; ours is another
    primitive and gets the same (elementwise) rules: pulled through a prologue
    into our pallas_call, and pushed through an epilogue."""
    kx, kb = jax.random.split(jax.random.key(3))
    x = jax.random.normal(kx, (64, 256), jnp.float32)
    b = jax.random.normal(kb, (256,), jnp.float32)

    def prologue():
        return jnp.exp(pl.multiple_of(x, 8)) - b[None, :]

    fn, values, prefetch = fuser.get_fusion_values(prologue)
    out_spec = pl.BlockSpec((32, 128), lambda i, j: (i, j))
    kernel_fn, (value_specs,), _ = fuser.pull_block_spec(
        fn, out_spec, grid_len=2,
        scalar_prefetch_handler=fuser.make_scalar_prefetch_handler())(values)

    def kernel(value_refs, o_ref):
        blocks = jax.tree.map(lambda r: r[...], value_refs)
        o_ref[...] = kernel_fn((pl.program_id(0), pl.program_id(1)), prefetch, blocks)

    out = pl.pallas_call(kernel, grid=(2, 2), in_specs=[value_specs], out_specs=out_spec,
                         out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(values)
    want = np.exp(np.asarray(x, np.float64)) - np.asarray(b, np.float64)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)

    pushed = fuser.push_block_spec(lambda v: pl.multiple_of(v, 128) * 2.0, out_spec)(
        jax.ShapeDtypeStruct(x.shape, x.dtype))
    assert pushed.block_shape == (32, 128) and pushed.index_map(1, 0) == (1, 0)
