"""A ``core_map`` body may close over scalars of the surrounding program
(issue 41, JAX 0.10.2's PallasCallMegacoreTest::test_can_partition_grid with
a grid size passed to the jitted function): each is passed in SMEM, as JAX's
core_map passes it, and read there. Arrays are refused, as JAX refuses them.

Runs in TPU interpret mode against NumPy (float64) (the built-in
interpreter: tests/test_kernel_captures.py); compiles for a v5e without one, where JAX's own copy lowers too.
JAX's TPU interpreter has no SMEM operands, so JAX's copy is compared on the
lowered path only.
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
from tpu_window import tensorcore_mesh

B, V, NV = 8, 128, 2          # blocks of (B, V); NV block columns


def _scaled_rows(Pl, T, num_cores, interpret):
    """f(x, n, s): y[:n*B] = x[:n*B] * s + C, zeros below; ``n`` (the pipeline's
    traced grid size) and ``s`` are scalars the core_map body closes over, C a
    NumPy constant; the pipeline's rows are split across the mesh's cores."""
    mesh = tensorcore_mesh(T, "core", num_cores)
    c = np.float32(0.5)

    def f(x, n, s):
        x_ref = jax.new_ref(x)
        y_ref = jax.new_ref(jnp.zeros_like(x))

        def scale(x_blk, y_blk):
            y_blk[...] = x_blk[...] * s + c

        @Pl.core_map(mesh, interpret=interpret)
        def _():
            T.emit_pipeline(
                scale, grid=(n, NV),
                in_specs=[Pl.BlockSpec((B, V), lambda i, j: (i, j))],
                out_specs=Pl.BlockSpec((B, V), lambda i, j: (i, j)),
                core_axis_name="core", dimension_semantics=(T.PARALLEL, T.PARALLEL),
            )(x_ref, y_ref)
        return y_ref[...]
    return f


def _want(x, n, s):
    want = np.zeros(x.shape, np.float64)
    want[:n * B] = x[:n * B].astype(np.float64) * float(s) + 0.5
    return want


@pytest.mark.parametrize("num_cores", [1, 2])
def test_traced_grid_size_and_scale_reach_the_body(num_cores):
    rng = np.random.default_rng()
    nb = 5
    x = rng.standard_normal((nb * B, NV * V)).astype(np.float32)
    f = jax.jit(_scaled_rows(pl, pltpu, num_cores, pltpu.InterpretParams()))
    for n in sorted({int(v) for v in rng.integers(1, nb + 1, 3)} | {nb}):
        s = np.float32(rng.standard_normal())
        got = f(x, np.int32(n), s)       # one trace: n and s are operands of the kernel
        np.testing.assert_allclose(np.asarray(got, np.float64), _want(x, n, s),
                                   rtol=1e-6, atol=1e-6)


def _custom_call_operands(text: str) -> list[str]:
    """The operand types of the one Mosaic kernel call in StableHLO ``text``."""
    calls = re.findall(r"stablehlo\.custom_call @tpu_custom_call\(.*?\) \{.*?\} : \(([^)]*)\)",
                       text)
    assert len(calls) == 1, calls
    return sorted(t.strip() for t in calls[0].split(", "))


def test_the_scalars_are_kernel_operands_as_under_jax_and_compile_for_v5e():
    args = (jax.ShapeDtypeStruct((5 * B, NV * V), jnp.float32),
            jax.ShapeDtypeStruct((), jnp.int32), jax.ShapeDtypeStruct((), jnp.float32))
    ours = aot.lower_for_tpu(_scaled_rows(pl, pltpu, 1, False), *args).as_text()
    theirs = aot.lower_for_tpu(_scaled_rows(jpl, jpltpu, 1, False), *args).as_text()
    operands = _custom_call_operands(ours)
    # the two scalars as (1,) operands beside the two arrays, as JAX passes them
    assert operands == ["tensor<1xf32>", "tensor<1xi32>", "tensor<40x256xf32>",
                        "tensor<40x256xf32>"]
    assert operands == _custom_call_operands(theirs)
    aot.compile_for_tpu(_scaled_rows(pl, pltpu, 1, False), *args)


def test_a_captured_array_is_refused_before_anything_runs():
    mesh = pltpu.create_tensorcore_mesh("core", num_cores=1)

    @jax.jit
    def f(x):
        y_ref = jax.new_ref(jnp.zeros_like(x))
        offsets = x[0] * 2.0

        @pl.core_map(mesh, interpret=pltpu.InterpretParams())
        def body():
            y_ref[...] = y_ref[...] + offsets
        return y_ref[...]
    with pytest.raises(ValueError, match=r"core_map body at .*captures non-scalar array "
                                         r"constants \[f32\[128\]\].*jax\.new_ref"):
        f(jnp.zeros((8, 128), jnp.float32))


def test_a_core_map_over_a_scalar_and_no_ref_is_still_refused():
    mesh = pltpu.create_tensorcore_mesh("core", num_cores=1)

    @jax.jit
    def f(s):
        @pl.core_map(mesh, interpret=pltpu.InterpretParams())
        def body():
            jnp.sin(s)
        return s
    with pytest.raises(ValueError, match="closes over no Ref"):
        f(jnp.float32(1.0))
