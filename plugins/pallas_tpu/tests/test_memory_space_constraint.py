"""``pallas_tpu.with_memory_space_constraint`` as JAX 0.10.2's
tpu_pallas_memory_space_test uses it (issue 41: its input-constraint cases
failed on the v5e with ``VMEM != <MemorySpace.VMEM: 'vmem'>``).

The constraint puts ours' space on the array's type, so
``jax.typeof(x).memory_space`` reads back the very object the user gave; the
TPU backend hands JAX's space of that name to JAX's lowering (the operand's
memory-space color), and none to an interpreter. Colors are compared with
JAX's Pallas on the same kernel lowered and compiled for a v5e without a
chip; values with NumPy float64 on random data.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as jpl
from jax.experimental.pallas import tpu as jpltpu

import pallas_frontend as pl
import pallas_tpu as pltpu
from pallas_tpu import aot

# the color XLA gives an operand in each space (JAX's test's table); SMEM and ANY: none
COLORS = {"VMEM": 1, "SMEM": None, "HBM": 0, "ANY": None}


def _space(T, P, name):
    return P.ANY if name == "ANY" else getattr(T, name)


def _placed_copy(P, T, name, seen=None, interpret=False):
    """JAX's test's function: constrain, read the type back, copy by DMA."""
    space = _space(T, P, name)

    def kernel(x_ref, y_ref):
        T.sync_copy(x_ref, y_ref)

    def f(x):
        x = T.with_memory_space_constraint(x, memory_space=space)
        if seen is not None:
            seen.append(jax.typeof(x))
        return P.pallas_call(kernel, out_shape=x, in_specs=[P.BlockSpec(memory_space=space)],
                             out_specs=P.BlockSpec(memory_space=P.ANY), interpret=interpret)(x)
    return f


def _input_colors(text: str) -> list[str]:
    return re.findall(r"input_memory_space_colors[^\]]*\]", text)


def _rng():
    return np.random.default_rng()


@pytest.mark.parametrize("name", ["VMEM", "SMEM", "HBM"])
def test_the_type_reads_back_the_space_given(name):
    ours, theirs = [], []
    x = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    jax.jit(_placed_copy(pl, pltpu, name, ours)).trace(x)
    jax.jit(_placed_copy(jpl, jpltpu, name, theirs)).trace(x)
    assert ours[0].memory_space is getattr(pltpu, name)
    assert ours[0].memory_space != getattr(jpltpu, name)     # two kinds, never mixed
    assert str(ours[0]) == str(theirs[0]) == f"float32<{name.lower()}>[8,128]"


@pytest.mark.parametrize("name", sorted(COLORS))
def test_colors_equal_jax_s_compiled_for_v5e(name):
    x = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    hlo = {}
    for side, P, T in (("ours", pl, pltpu), ("jax", jpl, jpltpu)):
        lowered = aot.lower_for_tpu(_placed_copy(P, T, name), x)
        with jax.set_mesh(aot.topology_mesh()):
            lowered.compile()
        hlo[side] = lowered.compiler_ir(dialect="hlo").as_hlo_text()
    assert _input_colors(hlo["ours"]) == _input_colors(hlo["jax"])
    color = COLORS[name]
    if color is None:
        assert "input_memory_space_colors" not in hlo["ours"]
    else:
        assert re.search(r'"input_memory_space_colors":\s*\[\{"operand_index":0,"color":%d\}\]'
                         % color, hlo["ours"]), hlo["ours"]


def test_jax_s_own_lowering_keeps_its_colors_beside_ours():
    # both kinds of constrained type through one jitted function, in turn: jit's
    # caches keep them apart (equal-by-name objects made JAX's lowering lose them)
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0
    ours_call = jax.jit(lambda x: pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltpu.CompilerParams())(x))
    jax_call = jax.jit(lambda x: jpl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x))
    x = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    vmem = ['input_memory_space_colors\\22: [{\\22operand_index\\22:0,\\22color\\22:1}]']
    for T in (jpltpu, pltpu, jpltpu, pltpu):
        for call in (ours_call, jax_call):
            if T is pltpu and call is jax_call:
                continue     # JAX's lowering knows only its own spaces
            text = aot.lower_for_tpu(
                lambda v: call(T.with_memory_space_constraint(v, T.VMEM)), x).as_text()
            assert _input_colors(text) == vmem, (T.__name__, call)


@pytest.mark.parametrize("name", ["VMEM", "SMEM", "HBM"])
def test_placed_operand_runs_in_the_interpreters(name):
    # JAX's TPU interpreter refuses a VMEM/SMEM-typed operand; ours hands it
    # none, nor does the built-in interpreter trace its body for one (JAX's
    # type checks, on in JAX's tests, compare the two)
    x = _rng().standard_normal((8, 128)).astype(np.float32)
    for interpret in (pltpu.InterpretParams(), True):
        with jax.enable_checks(True):
            y = jax.jit(_placed_copy(pl, pltpu, name, interpret=interpret))(x)
        np.testing.assert_array_equal(np.asarray(y, np.float64), x.astype(np.float64))

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0 + 1.0

    @jax.jit
    def f(x):
        x = pltpu.with_memory_space_constraint(x, getattr(pltpu, name))
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              interpret=pltpu.InterpretParams())(x)
    np.testing.assert_allclose(np.asarray(f(x), np.float64), x.astype(np.float64) * 2.0 + 1.0,
                               rtol=1e-6)


def test_a_concrete_array_is_returned_as_it_is():
    x = jnp.asarray(_rng().standard_normal((8, 128)), jnp.float32)
    for name in ("VMEM", "SMEM", "HBM", "ANY"):
        assert pltpu.with_memory_space_constraint(x, _space(pltpu, pl, name)) is x
