"""pallas_tpu.force_tpu_interpret_mode / set_tpu_interpret_mode: kernels that pass
TPU CompilerParams and no interpret= run in TPU interpret mode on CPU, as in JAX."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu
from pallas_frontend.backend_api import BackendUnavailableError


def _scaled_add():
    def k(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] * 3.0 + y_ref[...]
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    return pl.pallas_call(k, out_shape=jax.ShapeDtypeStruct((32, 128), jnp.float32), grid=(4,),
                          in_specs=[spec, spec], out_specs=spec,
                          compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)))


def _data(seed):
    rng = np.random.default_rng(seed)
    return [jnp.asarray(rng.standard_normal((32, 128)), jnp.float32) for _ in range(2)]


def test_without_interpret_mode_cpu_is_refused():
    with pytest.raises(BackendUnavailableError, match="force_tpu_interpret_mode|interpret"):
        _scaled_add()(*_data(0))


def test_force_tpu_interpret_mode_runs_the_kernel():
    x, y = _data(1)
    f = _scaled_add()
    with pltpu.force_tpu_interpret_mode():
        got = f(x, y)
    want = 3.0 * np.asarray(x, np.float64) + np.asarray(y, np.float64)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)
    with pytest.raises(BackendUnavailableError):      # the mode ends with the block
        f(x, y)


def test_set_tpu_interpret_mode_until_reset():
    x, y = _data(2)
    pltpu.set_tpu_interpret_mode(pltpu.InterpretParams())
    try:
        got = jax.jit(_scaled_add())(x, y)
    finally:
        pltpu.set_tpu_interpret_mode(None)
    want = 3.0 * np.asarray(x, np.float64) + np.asarray(y, np.float64)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)


def test_jax_own_interpret_params_run_in_tpu_interpret_mode(monkeypatch):
    # code written for JAX passes jax.experimental.pallas.tpu.InterpretParams
    from jax.experimental.pallas import tpu as jax_pltpu

    from pallas_frontend import foreign_params
    from pallas_tpu.backend import TpuBackend
    theirs = jax_pltpu.InterpretParams(dma_execution_mode="eager", uninitialized_memory="zero")
    adopted, _ = foreign_params.adopt(theirs, None)
    assert adopted == pltpu.InterpretParams(dma_execution_mode="eager",
                                            uninitialized_memory="zero")
    lowered = []
    real_lower = TpuBackend.lower
    monkeypatch.setattr(TpuBackend, "lower",
                        lambda self, *a: lowered.append(1) or real_lower(self, *a))

    def k(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] * 3.0 + y_ref[...]
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    x, y = _data(None)     # fresh
    got = pl.pallas_call(k, out_shape=jax.ShapeDtypeStruct((32, 128), jnp.float32), grid=(4,),
                         in_specs=[spec, spec], out_specs=spec, interpret=theirs)(x, y)
    want = 3.0 * np.asarray(x, np.float64) + np.asarray(y, np.float64)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-6)
    assert lowered, "JAX's InterpretParams did not select backend 'tpu'"


def _dynamic_size_copy(x_hbm, size):
    """A kernel that passes no compiler_params (as JAX's tests write many): a
    DMA whose length is read from SMEM, which only TPU interpret mode runs."""
    def k(size_ref, x_ref, _, o_ref, sem):
        n = size_ref[0]
        pltpu.async_copy(x_ref.at[pl.ds(0, n)], o_ref.at[pl.ds(0, n)], sem).wait()
    return pl.pallas_call(
        k, out_shape=jax.ShapeDtypeStruct(x_hbm.shape, x_hbm.dtype),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), pl.BlockSpec(memory_space=pl.ANY),
                  pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY), scratch_shapes=[pltpu.SemaphoreType.DMA],
        input_output_aliases={2: 0})(size, x_hbm, jnp.zeros_like(x_hbm))


def test_forced_mode_reaches_kernels_without_compiler_params(monkeypatch):
    # JAX's force_tpu_interpret_mode applies to every pallas_call; ours ran a
    # kernel without compiler_params in the built-in interpreter, which has no
    # dynamic-size DMA (JAX's test_simple_tile_aligned_dynamic_size_dma)
    from pallas_tpu.backend import TpuBackend
    lowered = []
    real_lower = TpuBackend.lower
    monkeypatch.setattr(TpuBackend, "lower",
                        lambda self, *a: lowered.append(1) or real_lower(self, *a))
    rng = np.random.default_rng()
    x = jnp.asarray(rng.integers(-1000, 1000, (8, 8, 128)), jnp.int32)
    n = int(rng.integers(1, 8))
    with pltpu.force_tpu_interpret_mode():
        got = np.asarray(_dynamic_size_copy(x, jnp.asarray([n], jnp.int32)))
    want = np.zeros((8, 8, 128), np.int64)
    want[:n] = np.asarray(x)[:n]
    np.testing.assert_array_equal(got, want)
    assert lowered, "the kernel did not run in TPU interpret mode"


def test_portable_kernel_outside_forced_mode_keeps_the_default_backend(monkeypatch):
    from pallas_tpu.backend import TpuBackend
    monkeypatch.setattr(TpuBackend, "lower", lambda self, *a: pytest.fail("tpu chosen"))

    def k(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0
    x = jnp.asarray(np.random.default_rng().standard_normal((8, 128)), jnp.float32)
    got = pl.pallas_call(k, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(x, np.float64) * 2, rtol=1e-7)


FRESH_PROCESS = r'''
import sys
import jax, jax.numpy as jnp, numpy as np
import pallas_frontend as pl
import pallas_tpu as pltpu
from pallas_tpu.backend import TpuBackend

lowered = []
real_lower = TpuBackend.lower
TpuBackend.lower = lambda self, *a: lowered.append(1) or real_lower(self, *a)
pltpu.set_tpu_interpret_mode(pltpu.InterpretParams(chip_checks=False))

def k(x_ref, y_ref, o_ref):     # no CompilerParams: only the mode names the backend
    o_ref[...] = x_ref[...] - 2.0 * y_ref[...]
rng = np.random.default_rng(int(sys.argv[1]))
x, y = (rng.standard_normal((8, 128)).astype(np.float32) for _ in range(2))
got = pl.pallas_call(k, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32))(x, y)
np.testing.assert_allclose(np.asarray(got), x.astype(np.float64) - 2.0 * y, rtol=1e-6)
print("tpu lowered", len(lowered))
'''


def test_set_mode_before_any_kernel_reaches_kernels_without_compiler_params(tmp_path):
    # In a fresh process the registry had loaded no backend yet: such a kernel went to
    # the built-in interpreter, so JAX's TPU test files rehearsed on CPU skipped the
    # chip check (Mosaic refused an int8 scalar compare on the v5e that CPU had passed)
    import os
    import subprocess
    import sys
    script = tmp_path / "fresh.py"
    script.write_text(FRESH_PROCESS)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("PALLAS_FRONTEND_DEFAULT_BACKEND", None)
    done = subprocess.run([sys.executable, str(script), str(np.random.randint(1 << 30))],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "tpu lowered 1" in done.stdout
