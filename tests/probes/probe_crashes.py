"""Probe: unusual but legal (or plainly odd) input must neither crash the
process nor raise an internal error: a correct result, or a clear refusal."""

import jax
import jax.numpy as jnp
import numpy as np

import pallas_frontend as pl
from probes.common import Case

F32 = jnp.float32


def zero_size_operand(rng):
    def k_empty(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1
    x = np.zeros((0, 4), np.float32)
    f = pl.pallas_call(k_empty, out_shape=jax.ShapeDtypeStruct((0, 4), F32))
    return (lambda: f(x)), x + 1


def scalar_operand(rng):
    def k_scalar(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 3
    x = np.float32(rng.standard_normal())
    f = pl.pallas_call(k_scalar, out_shape=jax.ShapeDtypeStruct((), F32))
    return (lambda: f(x)), np.float64(x) * 3


def many_operands(rng):
    xs = [rng.standard_normal(8).astype(np.float32) for _ in range(64)]

    def k_many(*refs):
        acc = refs[0][...]
        for r in refs[1:-1]:
            acc = acc + r[...]
        refs[-1][...] = acc
    f = pl.pallas_call(k_many, out_shape=jax.ShapeDtypeStruct((8,), F32))
    return (lambda: f(*xs)), np.sum(np.stack(xs).astype(np.float64), 0)


def dict_out_shape(rng):
    x = rng.standard_normal(8).astype(np.float32)

    def k_dict_out(x_ref, outs):
        outs["we{ird"][...] = x_ref[...] * 2
        outs["qu'ote\""][...] = x_ref[...] - 1
    shapes = {"we{ird": jax.ShapeDtypeStruct((8,), F32),
              "qu'ote\"": jax.ShapeDtypeStruct((8,), F32)}
    f = pl.pallas_call(k_dict_out, out_shape=shapes)

    def check(got):
        return (np.allclose(got["we{ird"], x * 2.0) and np.allclose(got["qu'ote\""], x - 1.0))
    return (lambda: f(x)), check


def kernel_returns_value(rng):
    def k_returns(x_ref, o_ref):
        o_ref[...] = x_ref[...]
        return x_ref[...]
    x = rng.standard_normal(8).astype(np.float32)
    f = pl.pallas_call(k_returns, out_shape=jax.ShapeDtypeStruct((8,), F32))
    return (lambda: f(x)), x


def uint32_wraparound(rng):
    x = rng.integers(2 ** 31, 2 ** 32, 16, dtype=np.uint64).astype(np.uint32)

    def k_uint32(x_ref, o_ref):
        o_ref[...] = x_ref[...] * np.uint32(3) + np.uint32(7)
    f = pl.pallas_call(k_uint32, out_shape=jax.ShapeDtypeStruct((16,), jnp.uint32))
    return (lambda: f(x)), (x.astype(np.uint64) * 3 + 7).astype(np.uint32)


def bool_operand(rng):
    a = rng.integers(0, 2, 32).astype(bool)
    b = rng.integers(0, 2, 32).astype(bool)

    def k_bool(a_ref, b_ref, o_ref):
        o_ref[...] = jnp.logical_xor(a_ref[...], b_ref[...])
    f = pl.pallas_call(k_bool, out_shape=jax.ShapeDtypeStruct((32,), jnp.bool_))
    return (lambda: f(a, b)), np.logical_xor(a, b)


def long_name_error(rng):
    def k_long(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    name = "n" * 5000 + "{}%s"
    x = rng.standard_normal(64).astype(np.float32)
    f = pl.pallas_call(k_long, out_shape=jax.ShapeDtypeStruct((64,), F32), name=name, grid=(4,),
                       in_specs=[pl.BlockSpec((16,), lambda i: (i + 2,))],
                       out_specs=pl.BlockSpec((16,), lambda i: (i,)))
    return (lambda: f(x)), None


def huge_block_on_small_array(rng):
    def k_big_block(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2
    x = rng.standard_normal(10).astype(np.float32)
    spec = pl.BlockSpec((1024,), lambda i: (i,))
    f = pl.pallas_call(k_big_block, out_shape=jax.ShapeDtypeStruct((10,), F32), grid=(1,),
                       in_specs=[spec], out_specs=spec)
    return (lambda: f(x)), x * 2


def block_with_zero_dim(rng):
    def k_zero_block(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    x = rng.standard_normal(16).astype(np.float32)
    spec = pl.BlockSpec((0,), lambda i: (i,))
    f = pl.pallas_call(k_zero_block, out_shape=jax.ShapeDtypeStruct((16,), F32), grid=(4,),
                       in_specs=[spec], out_specs=spec)
    return (lambda: f(x)), None


def negative_block_dim(rng):
    def k_neg_block(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    x = rng.standard_normal(16).astype(np.float32)
    spec = pl.BlockSpec((-4,), lambda i: (i,))
    f = pl.pallas_call(k_neg_block, out_shape=jax.ShapeDtypeStruct((16,), F32), grid=(4,),
                       in_specs=[spec], out_specs=spec)
    return (lambda: f(x)), None


def index_map_negative(rng):
    def k_neg_index(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    x = rng.standard_normal(64).astype(np.float32)
    f = pl.pallas_call(k_neg_index, out_shape=jax.ShapeDtypeStruct((64,), F32), grid=(4,),
                       in_specs=[pl.BlockSpec((16,), lambda i: (i - 1,))],
                       out_specs=pl.BlockSpec((16,), lambda i: (i,)))
    return (lambda: f(x)), None


def float64_operand(rng):
    def k_f64(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1
    x = rng.standard_normal(8)         # float64: JAX without x64 makes it float32
    f = pl.pallas_call(k_f64, out_shape=jax.ShapeDtypeStruct((8,), jnp.float32))
    return (lambda: f(x)), x + 1


CASES = [
    Case("zero_size_operand", zero_size_operand, ("k_empty",), either=True),
    Case("scalar_operand", scalar_operand, ("k_scalar",)),
    Case("many_operands", many_operands, ("k_many",), tol=1e-4),
    Case("dict_out_shape_odd_keys", dict_out_shape, ("k_dict_out",)),
    Case("kernel_returns_value", kernel_returns_value, ("k_returns",), either=True),
    Case("uint32_wraparound", uint32_wraparound, ("k_uint32",)),
    Case("bool_operand", bool_operand, ("k_bool",)),
    Case("long_name_error", long_name_error, ("n" * 5000 + "{}%s", "args[0]"), expect_error=True),
    Case("huge_block_small_array", huge_block_on_small_array, ("k_big_block",), either=True),
    Case("block_with_zero_dim", block_with_zero_dim, ("k_zero_block", "args[0]"),
         expect_error=True, either=True),
    Case("negative_block_dim", negative_block_dim, ("k_neg_block", "args[0]"), expect_error=True),
    Case("index_map_negative", index_map_negative, ("k_neg_index", "args[0]"), expect_error=True),
    Case("float64_operand", float64_operand, ("k_f64",), tol=1e-5),
]
