"""16-bit float results that depend on the processor XLA compiles for (host_floats.py).

Issue 39: on an AMD EPYC host the float16 max/min/clamp/polynomial tests failed (NaN
0xFE00 where XLA gave 0x7E00, polynomials up to 11 ULP off): XLA computes float16 in
float16 with AVX512-FP16 (Intel Sapphire Rapids) and in float32 without it, and
bfloat16 max/min with or without AVX512-BF16. The interpreter's code followed the
Intel host's XLA only. Here:

- each kind of host's rules, forced in-process, against a NumPy float64 model of what
  XLA computes there, on fresh random data with edge values planted (so one machine
  checks the code of all three kinds of x86-64 host);
- what host_floats reads from XLA predicts XLA's own results on fresh data;
- forcing another instruction set (docs/contributing.md) changes what XLA does, and
  host_floats follows (the tox env ``triton-avx2`` runs the bitwise tests so).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import pallas_frontend as pl
import pallas_triton as pt
from pallas_triton import _jax_compat, host_floats
from pallas_triton.host_floats import XlaCpuFloats
from jax_window import LAX_POLYNOMIAL

SHAPE = (16, 64)
HOSTS = {
    # float16 native (AVX512-FP16) and bfloat16 vector code (AVX512-BF16)
    "sapphire-rapids": XlaCpuFloats(True, True, False, False),
    # AVX512-BF16 without AVX512-FP16
    "zen4": XlaCpuFloats(False, False, False, False),
    # AVX2 only (Zen 2/3, Haswell to Ice Lake client)
    "avx2": XlaCpuFloats(False, False, True, True),
}
QUIET = {"float16": 0x7E00, "bfloat16": 0x7FC0}
DTYPES = {"float16": jnp.float16, "bfloat16": jnp.bfloat16}


def _bits(x) -> np.ndarray:
    return np.asarray(x).view(np.uint16)


def _edge_bits(name):
    """NaNs (both signs, payloads), ±inf, ±0, ±denormals, ±largest finite, ±1."""
    if name == "float16":
        return [0x7E00, 0xFE00, 0x7E55, 0xFF01, 0x7C00, 0xFC00, 0x0000, 0x8000, 0x0001,
                0x8001, 0x03FF, 0x83FF, 0x7BFF, 0xFBFF, 0x3C00, 0xBC00]
    return [0x7FC0, 0xFFC0, 0x7FD5, 0xFFC1, 0x7F80, 0xFF80, 0x0000, 0x8000, 0x0001,
            0x8001, 0x007F, 0x807F, 0x7F7F, 0xFF7F, 0x3F80, 0xBF80]


def _operands(rng, name):
    """Two arrays: every pair of edge values, the rest random at mixed scales."""
    edges = np.array(_edge_bits(name), np.uint16)
    ea, eb = (v.reshape(-1) for v in np.meshgrid(edges, edges))
    out = []
    for e in (ea, eb):
        x = rng.standard_normal(SHAPE) * rng.choice([1e-6, 1e-3, 1.0, 300.0], SHAPE)
        arr = np.asarray(jnp.asarray(x.astype(np.float32)).astype(DTYPES[name]))
        flat = _bits(arr).reshape(-1).copy()
        flat[:e.size] = e
        # ties and equal values
        flat[e.size:e.size + 64] = _bits(arr).reshape(-1)[:64]
        out.append(flat.reshape(SHAPE).view(arr.dtype))
    b = out[1].copy()
    _bits(b).reshape(-1)[ea.size + 64:ea.size + 128] = _bits(out[0]).reshape(-1)[ea.size + 64:ea.size + 128]
    return out[0], b


def model_extremum(kind, a, b, rules: XlaCpuFloats):
    """XLA's max/min bits on a host with ``rules``, from float64 and the bits."""
    name = np.dtype(a.dtype).name
    ab, bb = _bits(a).astype(np.int64), _bits(b).astype(np.int64)
    A, B = a.astype(np.float64), b.astype(np.float64)
    if name == "bfloat16":
        # compared as float32 in the processor's denormals-are-zero mode (XLA's code,
        # and Triton's interpreter inside XLA's host callback); a float16 denormal is a
        # normal float32
        tiny = float(jnp.finfo(a.dtype).tiny)
        da, db = np.abs(A) < tiny, np.abs(B) < tiny
        A, B = np.where(da, 0.0, A), np.where(db, 0.0, B)
        if rules.bfloat16_denormals_read_as_zero:      # the result too: ±0.0
            ab, bb = np.where(da, ab & 0x8000, ab), np.where(db, bb & 0x8000, bb)
    wins = A > B if kind == "max" else A < B
    r = np.where(wins, ab, bb)
    # equal values: a where a is +0.0 (max) or -0.0 (min), else b
    zero = 0x8000 if kind == "min" else 0
    r = np.where(A == B, np.where(ab == zero, ab, bb), r)
    na, nb = np.isnan(A), np.isnan(B)
    kept = rules.float16_nan_kept if name == "float16" else rules.bfloat16_nan_kept
    if kept:
        sign = (ab & 0x8000) | (bb & 0x8000) if kind == "min" else (ab & bb & 0x8000)
        nan = np.where(na, ab, (bb & 0x7FFF) | sign)
        if name == "bfloat16":             # narrowed from float32: the quiet NaN, sign kept
            nan = (nan & 0x8000) | QUIET[name]
    else:
        nan = np.full_like(ab, QUIET[name])
    r = np.where(na | nb, nan, r)
    return r.astype(np.uint16)


def _kernel(fn, *args, rules=None):
    outs = jax.eval_shape(fn, *args)

    def body(*refs):
        refs[-1][...] = fn(*[r[...] for r in refs[:-1]])
    return pl.pallas_call(body, out_shape=outs, interpret=pt.InterpretParams())(*args)


@pytest.fixture
def force(monkeypatch):
    def _force(rules):
        monkeypatch.setattr(host_floats, "xla_cpu_floats", lambda: rules)
    return _force


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("kind", ["max", "min"])
def test_max_min_as_each_host_computes_them(rng, force, host, name, kind):
    force(HOSTS[host])
    a, b = _operands(rng, name)
    fn = jnp.maximum if kind == "max" else jnp.minimum
    for x, y in ((a, b), (b, a)):
        got = _bits(_kernel(fn, jnp.asarray(x), jnp.asarray(y)))
        want = model_extremum(kind, x, y, HOSTS[host])
        bad = np.flatnonzero(got.reshape(-1) != want.reshape(-1))
        assert not bad.size, (f"{bad.size} differ on {host}: got "
                              f"{[hex(v) for v in got.reshape(-1)[bad[:6]]]}, model "
                              f"{[hex(v) for v in want.reshape(-1)[bad[:6]]]} for "
                              f"{[hex(v) for v in _bits(x).reshape(-1)[bad[:6]]]}, "
                              f"{[hex(v) for v in _bits(y).reshape(-1)[bad[:6]]]}")


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("name", DTYPES)
def test_clamp_as_each_host_computes_it(rng, force, host, name):
    force(HOSTS[host])
    x, lo = _operands(rng, name)
    hi = _operands(rng, name)[1]
    got = _bits(_kernel(lambda l, v, h: lax.clamp(l, v, h),
                        *(jnp.asarray(v) for v in (lo, x, hi))))
    low = model_extremum("max", lo, x, HOSTS[host]).view(x.dtype)
    want = model_extremum("min", low, hi, HOSTS[host])
    np.testing.assert_array_equal(got, want)


COEFFS = [0.5, -1.25, 2.0, 0.75]


def _round16(v):
    return np.asarray(v, np.float64).astype(np.float16).astype(np.float64)


def polynomial_fused(host: XlaCpuFloats) -> bool:
    """Whether XLA rounds a float16 polynomial once per Horner step on ``host``: where
    the processor has AVX512-FP16, and on every host where JAX lowers each step as
    fmuladd (an fma in float32, JAX 0.12.1 on)."""
    return host.float16_fused or _jax_compat.polynomial_steps_are_fmuladd()


def model_polynomial(x: np.ndarray, fused: bool) -> np.ndarray:
    """Horner's rule in float64, rounded to float16 after each fused step (exact in
    float64 for these operands), or after each multiply and each add."""
    xs = x.astype(np.float64)
    acc = np.full_like(xs, COEFFS[-1])
    for c in reversed(COEFFS[:-1]):
        acc = _round16(acc * xs + c) if fused else _round16(_round16(acc * xs) + c)
    return acc.astype(np.float16)


@LAX_POLYNOMIAL
@pytest.mark.parametrize("host", ["sapphire-rapids", "avx2"])
def test_float16_polynomial_as_each_host_rounds_it(rng, force, host):
    force(HOSTS[host])
    x = rng.standard_normal(SHAPE) * rng.choice([0.01, 1.0, 3.0, 20.0], SHAPE)
    x = x.astype(np.float16)
    got = np.asarray(_kernel(lambda v: lax.polynomial(v, COEFFS), jnp.asarray(x)))
    want = model_polynomial(x, polynomial_fused(HOSTS[host]))
    other = model_polynomial(x, not polynomial_fused(HOSTS[host]))
    assert (_bits(want) != _bits(other)).any()       # the data tells the two apart
    np.testing.assert_array_equal(_bits(got), _bits(want))


@LAX_POLYNOMIAL
def test_what_host_floats_reads_predicts_xla_on_fresh_data(rng):
    """XLA's own max and float16 multiply-add on fresh data agree with the model of the
    rules host_floats read from it (a probe that misread XLA fails here)."""
    rules = host_floats.xla_cpu_floats()
    for name in DTYPES:
        a, b = _operands(rng, name)
        for kind, fn in (("max", jnp.maximum), ("min", jnp.minimum)):
            got = _bits(jax.jit(fn)(jnp.asarray(a), jnp.asarray(b)))
            np.testing.assert_array_equal(got, model_extremum(kind, a, b, rules), err_msg=kind)
    x = (rng.standard_normal(SHAPE) * 3).astype(np.float16)
    got = np.asarray(jax.jit(lambda v: lax.polynomial(v, COEFFS))(jnp.asarray(x)))
    np.testing.assert_array_equal(_bits(got), _bits(model_polynomial(x, polynomial_fused(rules))))


def _x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


@pytest.mark.skipif(not _x86(), reason="--xla_cpu_max_isa=AVX2 names an x86 instruction set")
def test_forcing_avx2_gives_the_avx2_hosts_rules():
    """docs/contributing.md's way to run an AVX2 host's code paths on any x86-64
    machine: XLA then computes as an AVX2 host, and host_floats follows."""
    env = dict(os.environ, XLA_FLAGS="--xla_cpu_max_isa=AVX2", JAX_PLATFORMS="cpu")
    code = ("from pallas_triton import host_floats; "
            "print(repr(host_floats.xla_cpu_floats()))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = eval(out.stdout.strip().splitlines()[-1], {"XlaCpuFloats": XlaCpuFloats})
    # float16 as an AVX2 host; bfloat16 max/min depend on XLA's release too: JAX 0.12.0.1's
    # computes them in float32 there (AVX2_HOST), 0.12.1's as with AVX512-BF16
    assert (got.float16_nan_kept, got.float16_fused) == \
        (host_floats.AVX2_HOST.float16_nan_kept, host_floats.AVX2_HOST.float16_fused), got
    assert (got.bfloat16_nan_kept, got.bfloat16_denormals_read_as_zero) in (
        (host_floats.AVX2_HOST.bfloat16_nan_kept,
         host_floats.AVX2_HOST.bfloat16_denormals_read_as_zero), (False, False)), got


# (acos and acosh are flushed too, but their value at a denormal is their value at 0)
@pytest.mark.parametrize("name", ["asin", "atan", "asinh", "atanh", "cbrt", "tanh"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_math_reads_a_denormal_input_as_zero_on_every_host(rng, name, dtype):
    """XLA on CPU reads a denormal input of these functions as zero. NumPy did too, but
    only in its AVX-512 loops and in XLA's processor mode: its C-library loops on AVX2
    hosts returned asinh/atan/atanh of a denormal unchanged (issue 39's corpus run with
    NumPy held to AVX2). Here outside any XLA callback, on fresh denormals of both signs,
    against the function at ±0.0 in float64."""
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    from pallas_triton import interpret_math
    tiny = np.finfo(dtype).tiny
    x = (rng.uniform(0, 1, 64) * tiny).astype(dtype) * rng.choice([-1, 1], 64).astype(dtype)
    x = x[(x != 0) & (np.abs(x) < tiny)]
    assert x.size

    class Tensor:                          # the interpreter's tensor, as the function sees it
        def __init__(self, handle, type=None):
            self.handle, self.type = handle, type
    scalar = tl.float32 if dtype == np.float32 else tl.float64
    got = interpret_math.elementwise(name, Tensor(TensorHandle(x, scalar))).handle.data
    zero = np.copysign(0.0, x.astype(np.float64))
    ref = {"asin": np.arcsin, "atan": np.arctan, "asinh": np.arcsinh, "atanh": np.arctanh,
           "cbrt": np.cbrt, "tanh": np.tanh}[name]
    want = ref(zero).astype(dtype)
    np.testing.assert_array_equal(got.view(f"uint{got.dtype.itemsize * 8}"),
                                  want.view(f"uint{want.dtype.itemsize * 8}"))
