"""lax.reduce_precision: the generated kernel under Triton's interpreter vs XLA on CPU,
bit for bit, on every 16-bit pattern and on random float32/float64 bit patterns with the
edges planted (NaN of both signs and payloads, ±inf, ±0, denormals, the largest finite,
values that round up into the next binade or past the reduced range).

Before float_edges.py's emitter (issue 32) reduce_precision was an identity: float32
denormals, values below the reduced exponent range and unrounded mantissas came out
unchanged.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import pallas_frontend as pl
import pallas_triton as pt

TRITON = dict(interpret=pt.InterpretParams())
# (exponent_bits, mantissa_bits): float16, bfloat16, fp8 e4m3/e5m2, 1-bit mantissas, none
FORMATS = [(5, 10), (8, 7), (4, 3), (5, 2), (2, 1), (3, 0), (8, 0), (11, 20), (8, 23)]


def _bits(a):
    a = np.asarray(a)
    return a.view(f"uint{a.dtype.itemsize * 8}")


def _reduce(x, e, m, interpret):
    fn = lambda v: lax.reduce_precision(v, exponent_bits=e, mantissa_bits=m)  # noqa: E731
    if interpret is None:
        return np.asarray(jax.jit(fn)(x))

    def body(x_ref, o_ref):
        o_ref[...] = fn(x_ref[...])
    return np.asarray(pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                                     interpret=interpret)(x))


def _random_bits(rng, dtype, n=4096):
    """Random bit patterns (every exponent equally likely) with the edges planted."""
    uint = np.dtype(f"uint{np.dtype(dtype).itemsize * 8}")
    u = rng.integers(0, np.iinfo(uint).max, n, dtype=uint, endpoint=True)
    x = u.view(dtype)
    info = np.finfo(dtype)
    edges = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, info.smallest_subnormal,
                      -info.smallest_subnormal, info.tiny, -info.max, info.max, 65504.0,
                      65520.0, -65519.0, 6.1e-5, 6.0e-5, 3e-5, 1.0, 1.0 + info.eps,
                      2.0 ** -126, 2.0 ** -127, 1.5 * 2.0 ** -14], dtype)
    payload = np.array([u[0] | _bits(np.array([np.nan], dtype))[0]], uint).view(dtype)
    x[:edges.size + 1] = np.concatenate([edges, -payload])
    return x.reshape(64, -1)


@pytest.mark.parametrize("e,m", FORMATS)
@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_every_sixteen_bit_pattern_as_xla(dtype, e, m):
    x = np.arange(1 << 16, dtype=np.uint16).view(dtype).reshape(256, 256)
    want, got = _reduce(x, e, m, None), _reduce(x, e, m, TRITON["interpret"])
    wrong = np.flatnonzero(_bits(got) != _bits(want))
    assert wrong.size == 0, [(hex(int(_bits(x).reshape(-1)[i])), hex(int(_bits(got).reshape(-1)[i])),
                              hex(int(_bits(want).reshape(-1)[i]))) for i in wrong[:5]]


@pytest.mark.parametrize("e,m", FORMATS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_random_bit_patterns_as_xla(dtype, e, m):
    with jax.enable_x64(dtype == np.float64):
        x = _random_bits(np.random.default_rng([e, m, np.dtype(dtype).itemsize]), dtype)
        want, got = _reduce(x, e, m, None), _reduce(x, e, m, TRITON["interpret"])
    wrong = np.flatnonzero(_bits(got) != _bits(want))
    assert wrong.size == 0, [(hex(int(_bits(x).reshape(-1)[i])), hex(int(_bits(got).reshape(-1)[i])),
                              hex(int(_bits(want).reshape(-1)[i]))) for i in wrong[:5]]
    # the edges are there: something rounds, something overflows, something underflows
    if m < np.finfo(dtype).nmant and e < 8:
        assert (_bits(want) != _bits(x)).any() and np.isinf(want[~np.isinf(x)]).any()
        assert ((want == 0) & (x != 0)).any()


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
def test_generated_source_compiles_for_sm90(dtype):
    """The same expressions as the interpreter's, compiled to PTX (no GPU needed)."""
    def kernel(x):
        def body(x_ref, o_ref):
            o_ref[...] = lax.reduce_precision(x_ref[...], exponent_bits=4, mantissa_bits=3)
        return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              **TRITON)(x)
    ir = pt.kernel_ir_of(kernel, jax.ShapeDtypeStruct((64, 64), dtype))
    asm = pt.compile_for_target(ir, target=("cuda", 90), params=pt.CompilerParams(num_warps=4))
    assert ".target sm_90a" in asm["ptx"]
