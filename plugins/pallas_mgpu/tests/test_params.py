"""CompilerParams / InterpretParams mirror JAX 0.12's Mosaic GPU types; the
interpret modes route kernels through JAX's GPU interpreter."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax_window import jplgpu as jax_plgpu  # JAX's plgpu (with 0.10's GPU interpret API)
from jax_window import JAX_PARAMS_AS_IN_012, PATCH_FIELDS_LACKED

import pallas_frontend as pl
import pallas_mgpu as plgpu
from pallas_mgpu import _jax_private


def _fields(cls):
    return {f.name: f.default for f in dataclasses.fields(cls)
            if f.name != "BACKEND" and f.name not in PATCH_FIELDS_LACKED}


@JAX_PARAMS_AS_IN_012
def test_compiler_params_have_jax_fields_and_defaults():
    ours, theirs = _fields(plgpu.CompilerParams), _fields(jax_plgpu.CompilerParams)
    assert ours.keys() == theirs.keys()
    for name, default in theirs.items():
        mine = ours[name]
        assert getattr(mine, "name", mine) == getattr(default, "name", default), name
    assert plgpu.CompilerParams().to_jax() == jax_plgpu.CompilerParams()


@JAX_PARAMS_AS_IN_012
def test_interpret_params_have_jax_fields_and_defaults():
    assert _fields(plgpu.InterpretParams) == _fields(jax_plgpu.InterpretGPUParams)
    assert plgpu.InterpretGPUParams is plgpu.InterpretParams
    assert plgpu.InterpretParams(detect_races=True).to_jax() == \
        jax_plgpu.InterpretGPUParams(detect_races=True)


def test_an_older_jax_takes_the_fields_it_has_and_refuses_the_rest_in_one_line():
    """Under JAX 0.10/0.11 ours has JAX 0.12's fields; those this JAX lacks hold their
    default (not handed to JAX); another value is refused where it is written."""
    lacked = {**_jax_private.fields_jax_lacks("CompilerParams"),
              **_jax_private.fields_jax_lacks("InterpretGPUParams")}
    if not lacked:
        pytest.skip("this JAX has every field of JAX 0.12's params")
    assert plgpu.CompilerParams().to_jax() is not None
    assert plgpu.InterpretParams(detect_races=True).to_jax().detect_races
    for cls in (plgpu.CompilerParams, plgpu.InterpretParams):
        for f in dataclasses.fields(cls):
            if f.name in lacked:
                other = {"on_race": "warn", "inline_mgpu": "ignore",
                         "collective_id": 3}.get(f.name, not f.default)
                with pytest.raises(NotImplementedError,
                                   match=rf"\({f.name}=.*needs JAX {lacked[f.name]} or newer"):
                    cls(**{f.name: other})


@pytest.mark.parametrize("kwargs, match", [
    (dict(profile_space=8), "profile_space and profile_dir"),
    (dict(dimension_semantics=("parallel", "arbitrary")), "dimension_semantics"),
    (dict(max_concurrent_steps=0), "max_concurrent_steps"),
])
def test_compiler_params_validate(kwargs, match):
    with pytest.raises(ValueError, match=match):
        plgpu.CompilerParams(**kwargs)


@pytest.mark.parametrize("cid", [-1, 32, True, 2.0])
def test_collective_id_is_checked_where_it_is_written(cid):
    with pytest.raises(ValueError, match=r"collective_id must be None or an int in \[0, 32\)"):
        plgpu.CompilerParams(collective_id=cid)


def test_interpret_params_validate():
    with pytest.raises(ValueError, match="on_race"):
        plgpu.InterpretParams(on_race="ignore")
    with pytest.raises(ValueError, match="vector_clock_size"):
        plgpu.InterpretParams(vector_clock_size=4)


def _scale_kernel(**call):
    def body(x, o):
        o[...] = x[...] * 2.0 + 1.0
    spec = pl.BlockSpec((128,), lambda i: (i,))
    return pl.pallas_call(body, jax.ShapeDtypeStruct((512,), jnp.float32), grid=(4,),
                          in_specs=[spec], out_specs=spec, **call)


def test_force_and_set_gpu_interpret_mode_route_compiler_params(rng):
    x = rng.standard_normal(512).astype(np.float32)
    ref = x.astype(np.float64) * 2 + 1
    f = _scale_kernel(compiler_params=plgpu.CompilerParams())
    # on CPU without an interpret mode the backend refuses (it compiles for cuda)
    with pytest.raises(Exception, match="cuda"):
        f(x)
    with plgpu.force_gpu_interpret_mode():
        np.testing.assert_allclose(f(x), ref, rtol=1e-6)
    plgpu.set_gpu_interpret_mode(plgpu.InterpretParams())
    try:
        np.testing.assert_allclose(f(x), ref, rtol=1e-6)
        with plgpu.force_gpu_interpret_mode(None):     # scoped off beats the global mode
            with pytest.raises(Exception, match="cuda"):
                f(x)
    finally:
        plgpu.set_gpu_interpret_mode(None)


def test_our_interpret_modes_run_jax_kernels_too(rng):
    """Code that calls JAX's own Mosaic GPU kernels (e.g. JAX's shipped ops)
    next to ours, under our force/set_gpu_interpret_mode: JAX's run in its GPU
    interpreter as under JAX's functions, not "Only interpret mode is supported
    on CPU backend"."""
    import jax.experimental.pallas as jpl
    x = rng.standard_normal(256).astype(np.float32)
    ref = x.astype(np.float64) * 2 + 1

    def theirs(x):   # JAX's pallas_call reads the mode where it is called, as here
        def body(x_ref, o_ref):
            o_ref[...] = x_ref[...] * 2.0 + 1.0
        return jpl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
    with plgpu.force_gpu_interpret_mode(plgpu.InterpretParams(detect_races=True)):
        np.testing.assert_allclose(theirs(x), ref, rtol=1e-6)
    plgpu.set_gpu_interpret_mode(plgpu.InterpretParams())
    try:
        np.testing.assert_allclose(jax.jit(theirs)(x), ref, rtol=1e-6)
    finally:
        plgpu.set_gpu_interpret_mode(None)
    with pytest.raises(Exception, match="interpret mode"):   # off again: JAX's refusal on CPU
        jax.jit(theirs)(x)


def test_backend_is_discovered_and_lowers_compile_only():
    b = pl.get_backend("mgpu")
    assert b.is_available() == (True, "")              # no GPU needed to lower
    assert b.describe()["available"]
    from pallas_frontend import diagnostics
    row = {r["name"]: r for r in diagnostics.backend_rows("cpu")}["mgpu"]
    assert "compile-only (cuda)" in row["available"], row["available"]
    assert b.call_options("cpu") == {"interpret": plgpu.InterpretParams()}
    # jax.default_backend() is "gpu" on an NVIDIA host: the device path, not interpret mode
    for platform in ("gpu", "cuda"):
        assert b.call_options(platform) == {"compiler_params": plgpu.CompilerParams()}


def test_jax_own_interpret_gpu_params_run_on_mgpu(rng, monkeypatch):
    # JAX's tests import InterpretGPUParams from jax._src and pass it to pallas_call
    from jax._src.pallas.mosaic_gpu.interpret.params import InterpretGPUParams

    from pallas_frontend import foreign_params
    from pallas_mgpu.backend import MosaicGpuBackend
    theirs = InterpretGPUParams(detect_races=True, uninitialized_memory="zero")
    adopted, _ = foreign_params.adopt(theirs, None)
    # (JAX 0.10's default is one TMA thread, 0.11 on five, as ours)
    assert adopted == plgpu.InterpretParams(
        detect_races=True, uninitialized_memory="zero",
        num_tma_threads_per_device=theirs.num_tma_threads_per_device)
    lowered = []
    real_lower = MosaicGpuBackend.lower
    monkeypatch.setattr(MosaicGpuBackend, "lower",
                        lambda self, *a: lowered.append(1) or real_lower(self, *a))

    def body(x, o):
        o[...] = jnp.sin(x[...]) * 2
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    x = rng.standard_normal((32, 128)).astype(np.float32)
    got = pl.pallas_call(body, jax.ShapeDtypeStruct(x.shape, jnp.float32), grid=(4,),
                         in_specs=[spec], out_specs=spec, interpret=theirs)(x)
    np.testing.assert_allclose(np.asarray(got), np.sin(x.astype(np.float64)) * 2,
                               rtol=1e-6, atol=1e-6)
    assert lowered, "JAX's InterpretGPUParams did not select backend 'mgpu'"
