"""``jax.export(..., platforms=[...])`` lowers a ``pallas_call`` once per
platform, each with that platform's own backend (issue 24, defect 6: every
platform got the first platform's backend)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

import pallas_frontend as pl
from conftest import rand

pytest.importorskip("pallas_triton")
TRITON_CALL = "__gpu$xla.gpu.triton"


def _kernel(x_ref, o_ref):
    o_ref[...] = jnp.sin(x_ref[...]) * 2 + 1


def _fn():
    spec = pl.BlockSpec((128,), lambda i: (i,))
    return jax.jit(lambda x: pl.pallas_call(
        _kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(x.shape[0] // 128,),
        in_specs=[spec], out_specs=spec)(x))


def _export(platforms):
    from pallas_frontend import registry
    if registry.select_backend(platform="cuda", interpret=False, compiler_params=None,
                               backend=None).name != "triton":
        pytest.skip("triton is not the default backend for cuda in this environment")
    return export.export(_fn(), platforms=platforms,
                         disabled_checks=[export.DisabledSafetyCheck.custom_call(TRITON_CALL)])(
        jax.ShapeDtypeStruct((512,), jnp.float32))


@pytest.mark.parametrize("platforms", [["cpu", "cuda"], ["cuda", "cpu"]])
def test_each_platform_lowered_by_its_own_backend(rng, platforms):
    exp = _export(platforms)
    text = exp.mlir_module()
    assert text.count(f"@{TRITON_CALL}") == 1          # the cuda variant: Triton's launch
    assert "stablehlo.case" in text                      # chosen by platform index
    back = export.deserialize(exp.serialize())
    assert back.platforms == tuple(platforms)
    x = rand(rng, 512)
    want = np.sin(x.astype(np.float64)) * 2 + 1          # the cpu variant: the interpreter
    np.testing.assert_allclose(back.call(jnp.asarray(x)), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(exp.call(jnp.asarray(x)), _fn()(x), rtol=0, atol=0)


def test_cuda_variant_is_what_a_cuda_only_export_holds():
    both = _export(["cpu", "cuda"]).mlir_module()
    cuda = _export(["cuda"]).mlir_module()
    call = [ln.strip() for ln in cuda.splitlines() if TRITON_CALL in ln]
    assert len(call) == 1
    ttir = call[0].split('ir = "', 1)[1].split('"', 1)[0]
    assert ttir in both
