"""``jax.named_scope`` inside a kernel reaches Mosaic as JAX's does: each
scope becomes a ``tpu.trace_start``/``tpu.trace_stop`` pair (profiler regions)
in the compiled kernel, nested, in loops, branches and ``pl.run_scoped``
bodies. Checked against JAX's own pallas_call of the same kernel, both
lowered for a v5e without a device (JAX 0.10.2's PallasCallTraceTest read
0 pairs under ours on the chip)."""

import importlib.util
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as jax_pl
from jax.experimental.pallas import tpu as jax_pltpu

import pallas_frontend as pl
import pallas_tpu as pltpu
from pallas_tpu import aot

pytestmark = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                reason="the device-less TPU lowering needs libtpu")


def _scoped_kernel(lib, steps):
    def kernel(x_ref, o_ref):
        with jax.named_scope("outer"):
            o_ref[...] = x_ref[...] * 2.0
            with jax.named_scope("inner"):
                o_ref[...] += 1.0

        def body(i, c):
            with jax.named_scope("step"):
                o_ref[...] += 1.0
            return c
        lax.fori_loop(0, steps, body, 0)

        @lib.when(x_ref[0, 0] > 0)
        def _():
            with jax.named_scope("branch"):
                o_ref[...] += 10.0

        def scoped():
            with jax.named_scope("scoped"):
                o_ref[...] -= 3.0
        lib.run_scoped(scoped)
    return kernel


def _trace_messages(lib, params, steps, capsys):
    call = lib.pallas_call(_scoped_kernel(lib, steps), debug=True, compiler_params=params,
                           out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32))
    capsys.readouterr()
    aot.lower_for_tpu(call, jax.ShapeDtypeStruct((8, 128), jnp.float32))
    mosaic = capsys.readouterr().out.split("The Mosaic module")[-1]
    starts = re.findall(r'tpu.trace_start"\(\) <\{level = (\d+) : i32, message = "(\w+)"', mosaic)
    return starts, mosaic.count("tpu.trace_stop")


def test_named_scopes_become_jaxs_trace_regions(capsys):
    steps = int(np.random.default_rng().integers(2, 5))
    ours = _trace_messages(pl, pltpu.CompilerParams(), steps, capsys)
    jax_own = _trace_messages(jax_pl, jax_pltpu.CompilerParams(), steps, capsys)
    assert ours == jax_own
    assert [m for _, m in ours[0]] == ["outer", "inner", "step", "branch", "scoped"]
    assert ours[1] == len(ours[0])


def test_scoped_kernel_still_computes(rng):
    steps = int(rng.integers(2, 5))
    x = rng.standard_normal((8, 128)).astype(np.float32)
    out = pl.pallas_call(_scoped_kernel(pl, steps), interpret=pltpu.InterpretParams(),
                         out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32))(x)
    x64 = x.astype(np.float64)
    want = 2 * x64 + 1 + steps + (10.0 if x64[0, 0] > 0 else 0.0) - 3
    np.testing.assert_allclose(np.asarray(out), want, rtol=1e-6, atol=1e-5)
