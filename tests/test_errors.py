"""Every checked user error: raised before anything runs, with a message that
names the operand and says what to change (docs/errors.md lists them)."""

import jax
import jax.numpy as jnp
import pytest

import pallas_frontend as pl
from conftest import rand


def copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def call(x, *, out_shape=None, **kw):
    out_shape = jax.ShapeDtypeStruct(x.shape, x.dtype) if out_shape is None else out_shape
    return pl.pallas_call(copy_kernel, out_shape=out_shape, **kw)(x)


@pytest.fixture
def x(rng):
    return rand(rng, 512)


def test_block_rank_differs_from_array_rank(x):
    with pytest.raises(ValueError, match=r"Block shape for args\[0\] .* same number of dimensions"):
        call(x, grid=(4,), in_specs=[pl.BlockSpec((128, 1), lambda i: (i, 0))],
             out_specs=pl.BlockSpec((128,), lambda i: (i,)))


def test_index_map_wrong_arity(x):
    with pytest.raises(TypeError, match=r"Index map function .* for args\[0\] must take 1 argument"):
        call(x, grid=(4,), in_specs=[pl.BlockSpec((128,), lambda i, j: (i,))],
             out_specs=pl.BlockSpec((128,), lambda i: (i,)))


def test_index_map_wrong_result_count(x):
    with pytest.raises(ValueError, match=r"for outputs must return 1 values .*Currently returning 2 values"):
        call(x, grid=(4,), in_specs=[pl.BlockSpec((128,), lambda i: (i,))],
             out_specs=pl.BlockSpec((128,), lambda i: (i, 0)))


def test_index_map_non_integer_result(x):
    with pytest.raises((TypeError, ValueError), match=r"must return integer scalars. Output\[0\] has type float32"):
        call(x, grid=(4,), in_specs=[pl.BlockSpec((128,), lambda i: (i * 1.0,))],
             out_specs=pl.BlockSpec((128,), lambda i: (i,)))


def test_index_map_non_scalar_result(x):
    with pytest.raises(ValueError, match=r"must return integer scalars. Output\[0\] has type int32\[2\]"):
        call(x, grid=(4,), in_specs=[pl.BlockSpec((128,), lambda i: (jnp.array([i, i]),))],
             out_specs=pl.BlockSpec((128,), lambda i: (i,)))


def test_index_map_captures_array_constant(x):
    table = jnp.arange(4)
    with pytest.raises(ValueError, match=r"must not capture constants"):
        call(x, grid=(4,), in_specs=[pl.BlockSpec((128,), lambda i: (table[i],))],
             out_specs=pl.BlockSpec((128,), lambda i: (i,)))


def test_grid_spec_with_grid(x):
    gs = pl.GridSpec(grid=(4,))
    with pytest.raises(ValueError, match=r"If `grid_spec` is specified, then `grid`"):
        call(x, grid_spec=gs, grid=(4,))
    with pytest.raises(ValueError, match=r"`in_specs`, `scratch_shapes` must be left at the default"):
        call(x, grid_spec=gs, in_specs=[None], scratch_shapes=[pl.ANY((1,), jnp.float32)])


def test_out_shape_not_shape_dtype_struct(x):
    with pytest.raises(TypeError, match=r"out_shape\[1\] is a int .* must be a pytree of jax.ShapeDtypeStruct"):
        call(x, out_shape=(jax.ShapeDtypeStruct(x.shape, x.dtype), 3))


def test_in_specs_tree_mismatch(x):
    with pytest.raises(ValueError, match=r"Pytree for `in_specs` and `inputs` do not match"):
        call(x, in_specs=[None, None])


def test_in_specs_not_a_sequence(x):
    with pytest.raises(TypeError, match=r"`in_specs` must be a tuple or a list"):
        call(x, in_specs=pl.BlockSpec((128,), lambda i: (i,)))


def test_alias_index_out_of_range(x):
    with pytest.raises(ValueError, match=r"input index 3 outside the range \[0, 1\)"):
        call(x, input_output_aliases={3: 0})
    with pytest.raises(ValueError, match=r"output index 2 outside the range \[0, 1\)"):
        call(x, input_output_aliases={0: 2})


def test_alias_shape_or_dtype_mismatch(x):
    with pytest.raises(ValueError, match=r"input\[0\] with abstract value float32\[512\] \(args\[0\]\) and to output\[0\] "
                                         r"with a different abstract value int32\[512\]"):
        pl.pallas_call(lambda x_ref, o_ref: None, out_shape=jax.ShapeDtypeStruct((512,), jnp.int32),
                       input_output_aliases={0: 0})(x)


def test_kernel_returns_a_value(x):
    with pytest.raises(ValueError, match=r"The kernel function in the pallas_call .* at .*test_errors.py:\d+ should return None: kernels write their results"):
        pl.pallas_call(lambda x_ref, o_ref: x_ref[...],
                       out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


def test_kernel_captures_array_constant(x):
    w = jnp.ones(512)
    with pytest.raises(ValueError, match=r"captures constants .* pass them as inputs"):
        pl.pallas_call(lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...] * w),
                       out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)


@pytest.mark.parametrize("grid", [(4.0,), ("4",), ((1, 2),)])
def test_grid_not_ints(x, grid):
    with pytest.raises(TypeError, match=r"Grid must be a tuple of integers|named grid"):
        call(x, grid=grid)


def test_seed_example_element_offsets_from_blocked_index_map(rng):
    """The seed's vector add returns i * block_size from a Blocked index_map.
    JAX clamps and returns wrong data; we raise and explain."""
    x = rand(rng, 512)
    bs = 128
    spec = pl.BlockSpec((bs,), lambda i: (i * bs,))
    with pytest.raises(pl.BlockIndexError,
                       match=r"returned block index 128 for dim 0 at grid point \(1,\).*"
                             r"valid block indices are 0..3. Blocked index maps return block "
                             r"indices, not element offsets"):
        pl.pallas_call(lambda a, b, o: o.__setitem__(..., a[...] + b[...]),
                       out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(4,),
                       in_specs=[spec, spec], out_specs=spec)(x, x)


def test_negative_block_index(x):
    with pytest.raises(pl.BlockIndexError, match=r"args\[0\].*block index -1 for dim 0 at grid point \(0,\)"):
        call(x, grid=(4,), in_specs=[pl.BlockSpec((128,), lambda i: (i - 1,))],
             out_specs=pl.BlockSpec((128,), lambda i: (i,)))


def test_out_of_range_is_raised_under_jit_before_running(x):
    f = jax.jit(lambda x: call(x, grid=(5,), in_specs=[pl.BlockSpec((128,), lambda i: (i,))],
                               out_specs=pl.BlockSpec((128,), lambda i: (i,))))
    with pytest.raises(pl.BlockIndexError, match=r"grid point \(4,\)"):
        f.lower(x)                       # tracing alone raises


def test_element_offset_out_of_range(x):
    with pytest.raises(pl.BlockIndexError, match=r"element offset 512 for Element dim 0"):
        call(x, grid=(5,), in_specs=[pl.BlockSpec((pl.Element(128),), lambda i: (i * 128,))],
             out_specs=pl.BlockSpec((128,), lambda i: (jnp.minimum(i, 3),)))


def test_bounded_slice_needs_ds(x):
    with pytest.raises(TypeError, match=r"whose block dim is pl.BoundedSlice: return pl.ds"):
        call(x, grid=(4,), in_specs=[pl.BlockSpec((pl.BoundedSlice(128),), lambda i: (i,))],
             out_specs=pl.BlockSpec((128,), lambda i: (i,)))


def test_bounded_slice_size_too_large(x):
    with pytest.raises(pl.BlockIndexError, match=r"size 200 .* allows sizes in \[0, 128\]"):
        call(x, grid=(4,), in_specs=[pl.BlockSpec((pl.BoundedSlice(128),),
                                                  lambda i: (pl.ds(i * 128, 200),))],
             out_specs=pl.BlockSpec((128,), lambda i: (i,)))


def test_unsupported_block_dim(x):
    with pytest.raises(TypeError, match=r"Unsupported block dimension 'x' for args\[0\]"):
        call(x, in_specs=[pl.BlockSpec(("x",), lambda: (0,))])


def test_program_id_bad_axis(x):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + pl.program_id(3)
    with pytest.raises(ValueError, match=r"axis must be an int in \[0, 1\)"):
        pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,))(x)


def test_program_id_outside_kernel():
    with pytest.raises(RuntimeError, match=r"only be called inside a kernel"):
        pl.program_id(0)


def test_cost_estimate_fields_must_be_ints():
    with pytest.raises(TypeError, match=r"CostEstimate.flops must be an int"):
        pl.CostEstimate(flops=1.5, transcendentals=0, bytes_accessed=4)


def test_compiler_params_must_be_a_dataclass(x):
    with pytest.raises(TypeError, match=r"compiler_params must be a backend's CompilerParams"):
        call(x, compiler_params={"num_warps": 4})


def test_unknown_compiler_params_name_what_to_install(x):
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class CompilerParams(pl.CompilerParams):
        BACKEND = "nosuchbackend"
    with pytest.raises(Exception, match=r"install the distribution that provides backend "
                                        r"'nosuchbackend'") as info:
        call(x, compiler_params=CompilerParams())
    assert "pallas-frontend[" not in str(info.value)
