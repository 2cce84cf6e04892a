"""``core_map`` passes back only the Refs its body writes, as JAX's does: a
Ref the body only reads is an input alone (an aliased output of it would cost
XLA a copy of that input, and gave ours' Mosaic kernel operands JAX's has not).
A Ref is taken as written when the body's write effects name it (nested loops
and pipelines included) or when it is used with no effect naming it.

Compiled device-less for a v5e, the Mosaic kernel takes the same operands
under ours as under JAX's Pallas, and XLA's program around it is JAX's (with
ours' earlier aliased outputs XLA copied read-only operands, into VMEM for
fusible_matmul's, five of whose core_map tests then gave wrong values or did
not end on the v5e); run in TPU interpret mode, the values are NumPy's and a
read-only Ref is left as it was."""

import importlib.util
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as jpl
from jax.experimental.pallas import tpu as jpltpu

import pallas_frontend as pl
import pallas_tpu as pltpu
from pallas_tpu import aot

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))
from tpu_program_parity import entry_instructions, kernel_operands  # noqa: E402


def _scale_rows(P, T, interpret=None):
    """o = x * s[0] + 1 (x and s only read, o written in a loop), and the three Refs'
    final values."""
    def f(x, s):
        x_ref, s_ref, o_ref = jax.new_ref(x), jax.new_ref(s), jax.new_ref(jnp.zeros_like(x))
        launch = {} if interpret is None else {"interpret": interpret}

        @P.core_map(T.create_tensorcore_mesh("core", num_cores=1), **launch)
        def _():
            def scoped(buf, scalar):
                T.sync_copy(s_ref, scalar)
                T.sync_copy(x_ref, buf)

                def row(i, carry):
                    buf[i, :] = buf[i, :] * scalar[0] + 1
                    return carry
                jax.lax.fori_loop(0, buf.shape[0], row, 0)
                T.sync_copy(buf, o_ref)
            P.run_scoped(scoped, T.VMEM(x.shape, x.dtype), T.SMEM(s.shape, s.dtype))
        return x_ref[...], s_ref[...], o_ref[...]
    return f


def _kernel_operands(text: str) -> list[str]:
    """The memref types of the (one) Mosaic kernel's operands."""
    (operands,) = kernel_operands(text)
    return operands


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="needs libtpu")
def test_kernel_operands_are_jaxs():
    specs = (jax.ShapeDtypeStruct((8, 128), jnp.float32), jax.ShapeDtypeStruct((1,), jnp.float32))
    operands = {side: _kernel_operands(aot.lower_for_tpu(_scale_rows(*api), *specs,
                                                         topology="v5e:2x2").as_text())
                for side, api in (("jax", (jpl, jpltpu)), ("ours", (pl, pltpu)))}
    # x, s and o in, o out: 4 (ours passed x and s out as well before)
    assert len(operands["jax"]) == 4
    assert operands["ours"] == operands["jax"]


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="needs libtpu")
def test_compiled_program_is_jaxs():
    specs = (jax.ShapeDtypeStruct((256, 128), jnp.float32),
             jax.ShapeDtypeStruct((1,), jnp.float32))
    programs = {side: entry_instructions(
                    aot.compile_for_tpu(_scale_rows(*api), *specs, topology="v5e:2x2").as_text())
                for side, api in (("jax", (jpl, jpltpu)), ("ours", (pl, pltpu)))}
    assert any("tpu_custom_call" in i or "custom-call" in i for i in programs["jax"])
    assert programs["ours"] == programs["jax"]


def test_values_and_the_read_only_refs():
    rng = np.random.default_rng(41)
    x = rng.standard_normal((8, 128)).astype(np.float32)
    s = rng.standard_normal(1).astype(np.float32)
    x_after, s_after, o = jax.jit(_scale_rows(pl, pltpu, pltpu.InterpretParams()))(x, s)
    want = x.astype(np.float64) * np.float64(s[0]) + 1
    np.testing.assert_allclose(np.asarray(o), want, rtol=2e-7, atol=2e-7)
    np.testing.assert_array_equal(np.asarray(x_after), x)
    np.testing.assert_array_equal(np.asarray(s_after), s)
