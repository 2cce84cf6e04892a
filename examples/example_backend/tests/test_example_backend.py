"""The example backend's own tests (run where it is installed)."""

import jax
import jax.numpy as jnp
import numpy as np

import pallas_frontend as pl
import pallas_example_backend as ex


def _accumulating_sum(rows, cols, block_rows, **call):
    """Sums row blocks into one output row with the backend's own primitive."""
    def body(x, o):
        @pl.when(pl.program_id(0) == 0)
        def _():
            o[...] = jnp.zeros_like(o)
        ex.accumulate(o, x[...].sum(axis=0, keepdims=True))
    return pl.pallas_call(body, jax.ShapeDtypeStruct((1, cols), jnp.float32),
                          grid=(rows // block_rows,),
                          in_specs=[pl.BlockSpec((block_rows, cols), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((1, cols), lambda i: (0, 0)), **call)


def test_discovered_through_its_entry_point():
    from pallas_frontend import registry
    assert registry.origin("example").distribution == "pallas-example-backend"
    assert isinstance(pl.get_backend("example"), ex.ExampleBackend)


def test_own_primitive_runs_on_this_backend():
    x = np.random.default_rng().standard_normal((64, 16)).astype(np.float32)
    got = _accumulating_sum(64, 16, 8, compiler_params=ex.CompilerParams())(x)
    np.testing.assert_allclose(got, x.astype(np.float64).sum(0, keepdims=True), rtol=1e-5, atol=1e-5)


def test_own_primitive_runs_in_the_reference_interpreter_through_its_rule():
    """The backend registered an interpret rule for its primitive, so the
    frontend's interpreter accepts and runs kernels that use it."""
    x = np.random.default_rng().standard_normal((64, 16)).astype(np.float32)
    got = _accumulating_sum(64, 16, 8, interpret=True)(x)
    np.testing.assert_allclose(got, x.astype(np.float64).sum(0, keepdims=True), rtol=1e-5, atol=1e-5)
