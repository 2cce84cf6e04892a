"""Kernels run on CPU through JAX's Mosaic GPU interpreter, against NumPy float64."""

import os
import runpy
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_mgpu as plgpu

IP = {"interpret": plgpu.InterpretParams()}
EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "mgpu")


def test_f16_blocked_matmul_k_on_grid(rng):
    from pallas_frontend.testing import kernels as K
    x = rng.standard_normal((128, 256)).astype(np.float16)
    y = rng.standard_normal((256, 128)).astype(np.float16)
    got = K.blocked_matmul(128, 128, 256, 64, 128, 64, **IP)(x, y)
    np.testing.assert_allclose(got, x.astype(np.float64) @ y, rtol=1e-3, atol=1e-2)


def test_sequential_cumsum_over_steps(rng):
    """A running sum carried in scratch across a sequential grid axis."""
    def body(x, o, carry):
        @pl.when(pl.program_id(0) == 0)
        def _():
            carry[...] = jnp.zeros_like(carry)
        carry[...] += x[...]
        o[...] = carry[...]
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    f = pl.pallas_call(body, jax.ShapeDtypeStruct((32, 128), jnp.float32), grid=(4,),
                       in_specs=[spec], out_specs=spec,
                       scratch_shapes=[plgpu.SMEM((8, 128), jnp.float32)],
                       compiler_params=plgpu.CompilerParams(dimension_semantics=("sequential",)),
                       **IP)
    x = rng.standard_normal((32, 128)).astype(np.float32)
    ref = np.cumsum(x.astype(np.float64).reshape(4, 8, 128), axis=0).reshape(32, 128)
    np.testing.assert_allclose(f(x), ref, rtol=1e-5, atol=1e-5)


def test_hopper_matmul_example_matches_numpy(rng):
    sys.path.insert(0, EXAMPLES)
    try:
        import hopper_matmul
    finally:
        sys.path.pop(0)
    a = rng.standard_normal((256, 128)).astype(np.float16)
    b = rng.standard_normal((128, 256)).astype(np.float16)
    got = hopper_matmul.matmul(a, b, interpret=plgpu.InterpretParams())
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-3, atol=1e-2)


def test_flash_attention_example_matches_numpy(rng):
    sys.path.insert(0, EXAMPLES)
    try:
        import flash_attention
    finally:
        sys.path.pop(0)
    q, k, v = (rng.standard_normal((2, 128, 64)).astype(np.float16) for _ in range(3))
    got = flash_attention.attention(q, k, v, interpret=plgpu.InterpretParams())
    np.testing.assert_allclose(np.asarray(got, np.float64), flash_attention.reference(q, k, v),
                               rtol=1e-2, atol=2e-3)


@pytest.mark.parametrize("script", ["hopper_matmul.py", "flash_attention.py"])
def test_example_runs_as_a_script(script, capsys):
    """What a user runs: the example's ``__main__`` (its own NumPy check printed);
    run in this process (runpy), which has jax started already."""
    runpy.run_path(os.path.join(EXAMPLES, script), run_name="__main__")
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("max abs error vs NumPy:")]
    assert float(line.split(":")[1]) < 1e-2, line


def test_collective_run_scoped_is_refused_by_the_frontend_interpreter():
    def body(x, o):
        def scope(buf):
            buf[...] = x[...]
            o[...] = buf[...]
        pl.run_scoped(scope, plgpu.SMEM((128,), jnp.float32), collective_axes="wg")
    f = pl.pallas_call(body, jax.ShapeDtypeStruct((128,), jnp.float32), interpret=True)
    with pytest.raises(NotImplementedError, match="collective_run_scoped"):
        f(np.ones(128, np.float32))


def test_planar_snake_matches_jax(rng):
    from jax.experimental.pallas import mosaic_gpu as jax_plgpu
    for shape, minor, width in [((4, 6), 1, 2), ((5, 3), 0, 2), ((6, 6), 1, 4)]:
        # JAX's for every index at once (it takes traced indices), not one eager call each
        theirs = np.stack(jax.jit(jax.vmap(
            lambda lin: jnp.stack(jax_plgpu.planar_snake(lin, shape, minor, width))))(
                jnp.arange(shape[0] * shape[1], dtype=jnp.int32))).tolist()
        for lin in range(shape[0] * shape[1]):
            ours = [int(v) for v in plgpu.planar_snake(lin, shape, minor, width)]
            assert ours == theirs[lin], (shape, minor, width, lin)
