"""The distribution's face: entry point, hook, params, selection."""

from importlib.metadata import entry_points

import jax
import jax.numpy as jnp
import numpy as np

import pallas_frontend as pl
import pallas_triton as pt
from pallas_frontend.backend_api import ENTRY_POINT_GROUP


def test_entry_point_loads_the_hook_module():
    (ep,) = [e for e in entry_points(group=ENTRY_POINT_GROUP) if e.name == "triton"]
    module = ep.load()
    backend = module.pallas_frontend_backend()
    assert backend.name == "triton" and backend.version == pt.__version__
    assert backend.compiler_params_type is pt.CompilerParams
    assert backend.interpret_params_type is pt.InterpretParams


def test_compiler_params_are_frontend_params():
    p = pt.CompilerParams(num_warps=8, num_stages=2)
    assert isinstance(p, pl.CompilerParams) and p.BACKEND == "triton"
    assert p.triton_options() == {"enable_fp_fusion": True, "num_warps": 8, "num_stages": 2}


def test_interpret_params_select_triton_on_cpu(rng, capsys):
    x = rng.standard_normal(16).astype(np.float32)

    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 3.0
    out = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((16,), jnp.float32), debug=True,
                         interpret=pt.InterpretParams())(x)
    assert "backend: triton" in capsys.readouterr().out
    np.testing.assert_allclose(np.asarray(out), x.astype(np.float64) * 3, rtol=1e-6)


def test_call_options_interpret_on_cpu_launch_on_gpus():
    backend = pl.get_backend("triton")
    assert isinstance(backend.call_options("cpu")["interpret"], pt.InterpretParams)
    for platform in ("cuda", "rocm", "gpu"):   # XLA's Triton custom call launches there
        assert isinstance(backend.call_options(platform)["compiler_params"], pt.CompilerParams)


def test_jvp_kernel_generates_tangent_sums(rng):
    # The JVP kernel of x*x contains add_any (the sum of the two tangent products).
    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] * x_ref[...]
    f = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((64,), jnp.float32), grid=(2,),
                       in_specs=[pl.BlockSpec((32,), lambda i: (i,))],
                       out_specs=pl.BlockSpec((32,), lambda i: (i,)), interpret=pt.InterpretParams())
    x, t = (rng.standard_normal(64).astype(np.float32) for _ in range(2))
    primal, tangent = jax.jvp(f, (x,), (t,))
    np.testing.assert_allclose(np.asarray(primal), x.astype(np.float64) ** 2, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(tangent), 2 * x.astype(np.float64) * t, rtol=1e-6)


def test_float64_kernel_keeps_double_precision(rng):
    # x survives the round trip through 1 + x*1e-8 to ~1e-8 in float64; float32 would
    # round 1 + x*1e-8 to 1 (error ~|x|).
    def body(x_ref, o_ref):
        o_ref[...] = (x_ref[...] * 1e-8 + 1.0 - 1.0) * 1e8
    x = rng.standard_normal(128)
    with jax.enable_x64(True):
        out = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((128,), jnp.float64),
                             interpret=pt.InterpretParams())(x)
        assert out.dtype == np.float64
        np.testing.assert_allclose(np.asarray(out), x, rtol=0, atol=1e-6)
