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
