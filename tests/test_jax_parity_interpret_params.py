"""JAX's GPU kernels pass ``compiler_params=plgpu.CompilerParams(...)`` *and*
``interpret=True``; on CPU JAX interprets them. Ours must too: JAX's own files
(jax/experimental/pallas/ops/gpu), only the Pallas imports swapped, against
JAX running the same files unmodified, on fresh random inputs."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import jax_ops  # noqa: E402
import jax_ops_cases  # noqa: E402
from jax_ops_copy import shipped  # noqa: E402

pallas_triton = pytest.importorskip("pallas_triton")
import pallas_frontend as pl  # noqa: E402

CASES = {c.name: c for c in jax_ops_cases.GPU_CASES}


@pytest.mark.parametrize("name,grad", [("gpu.layer_norm", False), ("gpu.layer_norm", True),
                                       ("gpu.softmax", False),
                                       ("gpu.decode_attention.mqa(start_idx)", False)])
def test_jax_gpu_kernel_with_compiler_params_interprets(name, grad):
    if not shipped(CASES[name].module):     # JAX 0.12.1 dropped its Triton-style GPU ops
        pytest.skip(f"JAX {jax.__version__} does not ship "
                    f"jax.experimental.pallas.ops.{CASES[name].module}")
    row = jax_ops.run_case(CASES[name], "small", grad,
                           seed=np.random.SeedSequence().entropy % 2**32, repeats=0)
    assert row["jax"] == "ok", row["jax_error"]
    assert row["ours"] == "ok", row["ours_error"]
    assert row["rel"] <= 1e-5


def _double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def _call(params):
    x = np.random.default_rng().standard_normal(256).astype(np.float32)
    f = pl.pallas_call(_double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                       interpret=True, compiler_params=params)
    return x, f(x)


def test_interpret_true_uses_the_interpreter_with_triton_params():
    x, got = _call(pallas_triton.CompilerParams(num_warps=4, num_stages=2))
    np.testing.assert_allclose(np.asarray(got), 2 * x.astype(np.float64), rtol=1e-6)


@pytest.mark.parametrize("field,value", [("num_warps", "4"), ("num_stages", 2.5),
                                         ("enable_fp_fusion", 1)])
def test_interpret_true_still_checks_the_params_fields(field, value):
    with pytest.raises(TypeError, match=f"CompilerParams.{field} must be"):
        _call(pallas_triton.CompilerParams(**{field: value}))
