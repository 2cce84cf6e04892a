"""``pallas_call(..., debug=True)`` compiled for TPU prints what JAX's does:
after our KernelIR, JAX's kernel jaxpr and the Mosaic module (JAX's TPU tests
read loop structure off it, e.g. ``scf.for`` for a partly unrolled
``fori_loop``). Interpreted, no Mosaic module is built and none is printed."""

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import pallas_frontend as pl
import pallas_tpu as pltpu
from pallas_tpu import aot

needs_libtpu = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                  reason="the device-less TPU lowering needs libtpu")


def _loop_sum(n, unroll, **kw):
    """o = x + 0 + 1 + ... + (n - 1), the sum added one step at a time."""
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

        def body(i, _):
            o_ref[...] += i
        lax.fori_loop(0, n, body, None, unroll=unroll)
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.int32),
                          debug=True, **kw)


@needs_libtpu
@pytest.mark.parametrize("n, unroll, loop_left", [(6, 2, True), (5, 2, True), (4, True, False)])
def test_compiled_debug_prints_the_mosaic_module(capsys, n, unroll, loop_left):
    x = jnp.zeros((8, 128), jnp.int32)
    aot.lower_for_tpu(_loop_sum(n, unroll, compiler_params=pltpu.CompilerParams()), x)
    out = capsys.readouterr().out
    assert out.index("KernelIR") < out.index("The kernel jaxpr for pallas_call") \
        < out.index("The Mosaic module for pallas_call")
    mosaic = out[out.index("The Mosaic module"):]
    assert "func.func" in mosaic and "tpu.core_type" in mosaic
    # a partial unroll keeps a loop; a full one leaves none
    assert ("scf.for" in mosaic) is loop_left


def test_interpreted_debug_prints_no_mosaic_module(capsys, rng):
    n = int(rng.integers(3, 8))
    x = rng.integers(-100, 100, size=(8, 128)).astype(np.int32)
    out = _loop_sum(n, 2, interpret=pltpu.InterpretParams())(x)
    np.testing.assert_array_equal(np.asarray(out), x.astype(np.int64) + n * (n - 1) // 2)
    printed = capsys.readouterr().out
    assert "KernelIR" in printed and "Mosaic module" not in printed
