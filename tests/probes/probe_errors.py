"""Probe: bad user input must be refused before anything runs, naming the
kernel (and the operand at fault). Defect 13 of issue 24 (unhelpful errors)."""

import jax
import jax.numpy as jnp
import numpy as np

import pallas_frontend as pl
from probes.common import Case

F32 = jnp.float32


def _x(rng, *shape):
    return jnp.asarray(rng.standard_normal(shape), F32)


def _copy_call(kernel, x, **kw):
    kw.setdefault("out_shape", jax.ShapeDtypeStruct(x.shape, x.dtype))
    return lambda: pl.pallas_call(kernel, **kw)(x)


def bad_rank(rng):
    def k_bad_rank(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    x = _x(rng, 64)
    return _copy_call(k_bad_rank, x, grid=(4,), in_specs=[pl.BlockSpec((16, 1), lambda i: (i, 0))],
                      out_specs=pl.BlockSpec((16,), lambda i: (i,))), None


def index_map_arity(rng):
    def k_arity(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    x = _x(rng, 64)
    return _copy_call(k_arity, x, grid=(4,), in_specs=[pl.BlockSpec((16,), lambda i, j: (i,))],
                      out_specs=pl.BlockSpec((16,), lambda i: (i,))), None


def index_map_float(rng):
    def k_float_map(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    x = _x(rng, 64)
    return _copy_call(k_float_map, x, grid=(4,),
                      in_specs=[pl.BlockSpec((16,), lambda i: (i * 1.5,))],
                      out_specs=pl.BlockSpec((16,), lambda i: (i,))), None


def index_map_nan(rng):
    def k_nan_map(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    x = _x(rng, 64)
    return _copy_call(k_nan_map, x, grid=(4,),
                      in_specs=[pl.BlockSpec((16,), lambda i: (jnp.float32(jnp.nan),))],
                      out_specs=pl.BlockSpec((16,), lambda i: (i,))), None


def index_map_string(rng):
    def k_str_map(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    x = _x(rng, 64)
    return _copy_call(k_str_map, x, grid=(4,), in_specs=[pl.BlockSpec((16,), lambda i: ("0",))],
                      out_specs=pl.BlockSpec((16,), lambda i: (i,))), None


def index_map_out_of_range(rng):
    def k_oob_map(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    x = _x(rng, 64)
    return _copy_call(k_oob_map, x, grid=(4,), in_specs=[pl.BlockSpec((16,), lambda i: (i + 1,))],
                      out_specs=pl.BlockSpec((16,), lambda i: (i,))), None


def negative_grid(rng):
    def k_neg_grid(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    return _copy_call(k_neg_grid, _x(rng, 64), grid=(-2,)), None


def float_grid(rng):
    def k_float_grid(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    return _copy_call(k_float_grid, _x(rng, 64), grid=(2.0,)), None


def too_many_in_specs(rng):
    def k_many_specs(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    spec = pl.BlockSpec((16,), lambda i: (i,))
    return _copy_call(k_many_specs, _x(rng, 64), grid=(4,), in_specs=[spec, spec],
                      out_specs=spec), None


def out_specs_mismatch(rng):
    def k_out_specs(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    spec = pl.BlockSpec((16,), lambda i: (i,))
    return _copy_call(k_out_specs, _x(rng, 64), grid=(4,), in_specs=[spec],
                      out_specs=[spec, spec]), None


def kernel_wrong_arity(rng):
    def k_one_ref(x_ref):
        x_ref[...] = x_ref[...]
    return _copy_call(k_one_ref, _x(rng, 64)), None


def kernel_raises(rng):
    def k_raises(x_ref, o_ref):
        raise ValueError("user boom in the kernel body")
    return _copy_call(k_raises, _x(rng, 64)), None


def store_wrong_dtype(rng):
    def k_store_dtype(x_ref, o_ref):
        o_ref[...] = x_ref[...].astype(jnp.int32)
    return _copy_call(k_store_dtype, _x(rng, 64)), None


def store_wrong_shape(rng):
    def k_store_shape(x_ref, o_ref):
        o_ref[...] = x_ref[...][:8]
    return _copy_call(k_store_shape, _x(rng, 64)), None


def string_operand(rng):
    def k_str_operand(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    return (lambda: pl.pallas_call(k_str_operand, out_shape=jax.ShapeDtypeStruct((4,), F32))(
        "abcd")), None


def out_shape_not_struct(rng):
    def k_out_tuple(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    return _copy_call(k_out_tuple, _x(rng, 64), out_shape=(64,)), None


def alias_bad_index(rng):
    def k_alias_idx(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    return _copy_call(k_alias_idx, _x(rng, 64), input_output_aliases={0: 3}), None


def alias_shape_mismatch(rng):
    def k_alias_shape(x_ref, o_ref):
        o_ref[...] = x_ref[...][:32]
    return _copy_call(k_alias_shape, _x(rng, 64), out_shape=jax.ShapeDtypeStruct((32,), F32),
                      input_output_aliases={0: 0}), None


def scratch_not_a_type(rng):
    def k_bad_scratch(x_ref, o_ref, s_ref):
        o_ref[...] = x_ref[...]
    return _copy_call(k_bad_scratch, _x(rng, 64), scratch_shapes=["vmem"]), None


def block_not_dividing_bad_rank_map(rng):
    def k_map_arity_out(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    spec = pl.BlockSpec((16,), lambda i: (i,))
    return _copy_call(k_map_arity_out, _x(rng, 64), grid=(4,), in_specs=[spec],
                      out_specs=pl.BlockSpec((16,), lambda i: (i, 0))), None


def name_with_braces(rng):
    def k_braces(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    return _copy_call(k_braces, _x(rng, 64), name="we{0}ird'\"{name}", grid=(4,),
                      in_specs=[pl.BlockSpec((16,), lambda i: (i + 1,))],
                      out_specs=pl.BlockSpec((16,), lambda i: (i,))), None


def zero_grid(rng):
    def k_zero_grid(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1
    return _copy_call(k_zero_grid, _x(rng, 64), grid=(0,)), None


def huge_grid(rng):
    def k_huge_grid(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1
    spec = pl.BlockSpec((16,), lambda i, j: (0,))
    return _copy_call(k_huge_grid, _x(rng, 16), grid=(2 ** 31, 2 ** 31), in_specs=[spec],
                      out_specs=spec), None


def unknown_backend(rng):
    def k_backend(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    return _copy_call(k_backend, _x(rng, 64), backend="no_such_backend"), None


def default_backend_env(rng):
    def k_env(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    return _copy_call(k_env, _x(rng, 64)), (lambda got: True)


CASES = [
    Case("block_rank", bad_rank, ("k_bad_rank", "args[0]"), expect_error=True),
    Case("index_map_arity", index_map_arity, ("k_arity", "args[0]"), expect_error=True),
    Case("index_map_float", index_map_float, ("k_float_map", "args[0]"), expect_error=True),
    Case("index_map_nan", index_map_nan, ("k_nan_map", "args[0]"), expect_error=True),
    Case("index_map_string", index_map_string, ("k_str_map", "args[0]"), expect_error=True),
    Case("index_map_out_of_range", index_map_out_of_range, ("k_oob_map", "args[0]"),
         expect_error=True),
    Case("out_index_map_arity", block_not_dividing_bad_rank_map, ("k_map_arity_out", "out"),
         expect_error=True),
    Case("negative_grid", negative_grid, ("k_neg_grid", "grid sizes"), expect_error=True),
    Case("float_grid", float_grid, ("k_float_grid", "grid"), expect_error=True),
    Case("too_many_in_specs", too_many_in_specs, ("k_many_specs", "in_specs"), expect_error=True),
    Case("out_specs_mismatch", out_specs_mismatch, ("k_out_specs", "out_specs"),
         expect_error=True),
    Case("kernel_wrong_arity", kernel_wrong_arity, ("k_one_ref",), expect_error=True),
    Case("kernel_raises", kernel_raises, ("user boom",), expect_error=True),
    Case("store_wrong_dtype", store_wrong_dtype, ("k_store_dtype",), expect_error=True),
    Case("store_wrong_shape", store_wrong_shape, ("k_store_shape",), expect_error=True),
    Case("string_operand", string_operand, ("k_str_operand",), expect_error=True),
    Case("out_shape_not_struct", out_shape_not_struct, ("k_out_tuple", "out_shape"),
         expect_error=True),
    Case("alias_bad_index", alias_bad_index, ("k_alias_idx", "input_output_aliases"),
         expect_error=True),
    Case("alias_shape_mismatch", alias_shape_mismatch, ("k_alias_shape", "input_output_aliases"),
         expect_error=True),
    Case("scratch_not_a_type", scratch_not_a_type, ("k_bad_scratch", "scratch"),
         expect_error=True),
    Case("name_with_braces", name_with_braces, ("we{0}ird'\"{name}", "args[0]"),
         expect_error=True),
    Case("zero_grid", zero_grid, ("k_zero_grid", "grid"), expect_error=True, either=True),
    Case("huge_grid", huge_grid, ("k_huge_grid", "grid sizes", "int32"), expect_error=True),
    Case("unknown_backend", unknown_backend, ("k_backend", "no_such_backend"), expect_error=True,
         defect=13),
    Case("default_backend_env", default_backend_env,
         ("PALLAS_FRONTEND_DEFAULT_BACKEND",), expect_error=True, either=True, defect=13,
         env={"PALLAS_FRONTEND_DEFAULT_BACKEND": "no_such_backend"}),
]
