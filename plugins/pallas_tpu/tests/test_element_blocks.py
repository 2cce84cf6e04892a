"""``pl.Element`` block dims on pallas_tpu, where JAX's TPU lowering takes
them: every dim of such a block an Element (or squeezed), no low padding
(Mosaic has none; JAX's TPU interpreter would read the window unshifted).
A halo stencil over an operand padded in HBM compiles for v5e and runs in
TPU interpret mode, equal to JAX's Pallas there and to NumPy in float64."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu
from pallas_frontend.backend_api import BackendCapabilityError

BATCH, ROWS, COLS = 2, 64, 256
BR, BC = 16, 128          # output block
HR, HC = 8, 128           # halo: rows (a sublane tile), columns (a lane tile)


def _stencil_program(Pl, T, interpret=False, compiler_params=None):
    """out[b, r, c] = 4 x[b, r, c] - x[b, r-1, c] - x[b, r+1, c] - x[b, r, c-1] - x[b, r, c+1]
    on x padded by (HR, HC) in HBM: each step reads an overlapping
    (BR + 2 HR, BC + 2 HC) window of element offsets (i BR, j BC); the batch dim
    is squeezed."""
    def kernel(x_ref, o_ref):
        x = x_ref[...]
        centre = x[HR:HR + BR, HC:HC + BC]
        o_ref[...] = (4.0 * centre - x[HR - 1:HR - 1 + BR, HC:HC + BC]
                      - x[HR + 1:HR + 1 + BR, HC:HC + BC]
                      - x[HR:HR + BR, HC - 1:HC - 1 + BC] - x[HR:HR + BR, HC + 1:HC + 1 + BC])
    window = Pl.BlockSpec((None, Pl.Element(BR + 2 * HR), Pl.Element(BC + 2 * HC)),
                          lambda b, i, j: (b, i * BR, j * BC))
    kw = {} if compiler_params is None else dict(compiler_params=compiler_params)
    return lambda x_padded: Pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((BATCH, ROWS, COLS), jnp.float32),
        grid=(BATCH, ROWS // BR, COLS // BC), in_specs=[window],
        out_specs=Pl.BlockSpec((None, BR, BC), lambda b, i, j: (b, i, j)),
        interpret=interpret, **kw)(x_padded)


def _padded_input():
    x = np.random.default_rng().standard_normal((BATCH, ROWS, COLS)).astype(np.float32)
    return x, np.pad(x, ((0, 0), (HR, HR), (HC, HC)))


def _numpy_stencil(x):
    p = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1)))
    return (4 * p[:, 1:-1, 1:-1] - p[:, :-2, 1:-1] - p[:, 2:, 1:-1]
            - p[:, 1:-1, :-2] - p[:, 1:-1, 2:])


@pytest.mark.parametrize("mode", ["tpu_interpret", "builtin_interpreter"])
def test_halo_stencil_matches_numpy_and_jax(mode):
    from jax.experimental import pallas as jpl
    from jax.experimental.pallas import tpu as jpltpu
    x, xp = _padded_input()
    interpret = pltpu.InterpretParams() if mode == "tpu_interpret" else True
    ours = np.asarray(jax.jit(_stencil_program(pl, pltpu, interpret))(xp))
    np.testing.assert_allclose(ours, _numpy_stencil(x), rtol=1e-5, atol=1e-5)
    theirs = np.asarray(jax.jit(_stencil_program(jpl, jpltpu, jpltpu.InterpretParams()))(xp))
    np.testing.assert_array_equal(ours, theirs)


def test_halo_stencil_compiles_for_v5e_as_jax_does(aot_compile):
    from jax.experimental import pallas as jpl
    from jax.experimental.pallas import tpu as jpltpu
    xp = jnp.zeros((BATCH, ROWS + 2 * HR, COLS + 2 * HC), jnp.float32)
    for Pl, T, params in ((pl, pltpu, pltpu.CompilerParams()), (jpl, jpltpu, None)):
        _, text = aot_compile(_stencil_program(Pl, T, compiler_params=params), xp)
        assert "tpu_custom_call" in text


def _overhanging_program(Pl, padding, compiler_params=None, interpret=False):
    """out[r] = x[r] + x[r + 1]: the last window reaches HR rows past the array."""
    def kernel(x_ref, o_ref):
        x = x_ref[...]
        o_ref[...] = x[0:BR] + x[1:BR + 1]
    window = Pl.BlockSpec((Pl.Element(BR + HR, padding), Pl.Element(COLS)),
                          lambda i: (i * BR, 0))
    kw = {} if compiler_params is None else dict(compiler_params=compiler_params)
    return lambda x: Pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((ROWS, COLS), jnp.float32), grid=(ROWS // BR,),
        in_specs=[window], out_specs=Pl.BlockSpec((BR, COLS), lambda i: (i, 0)),
        interpret=interpret, **kw)(x)


def test_high_padding_compiles_for_v5e_as_jax_does(aot_compile):
    from jax.experimental import pallas as jpl
    from jax.experimental.pallas import tpu as jpltpu
    x = jnp.zeros((ROWS, COLS), jnp.float32)
    for Pl, params in ((pl, pltpu.CompilerParams()), (jpl, None)):
        _, text = aot_compile(_overhanging_program(Pl, (0, HR), params), x)
        assert "tpu_custom_call" in text


def test_low_padding_is_refused_by_name(aot_compile):
    x = jnp.zeros((ROWS, COLS), jnp.float32)
    for interpret in (pltpu.InterpretParams(), False):
        with pytest.raises(BackendCapabilityError, match="low padding 8"):
            kw = dict(interpret=interpret) if interpret else dict(
                compiler_params=pltpu.CompilerParams())
            if interpret:
                _overhanging_program(pl, (HR, 0), **kw)(x)
            else:
                aot_compile(_overhanging_program(pl, (HR, 0), **kw), x)


def test_element_beside_a_blocked_dim_is_refused_for_mosaic_as_in_jax(aot_compile):
    from jax.experimental import pallas as jpl

    def program(Pl, params=None):
        spec = Pl.BlockSpec((Pl.Element(BR + HR), COLS), lambda i: (i * BR, 0))
        kw = {} if params is None else dict(compiler_params=params)
        return lambda x: Pl.pallas_call(
            lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[:BR]),
            out_shape=jax.ShapeDtypeStruct((ROWS, COLS), jnp.float32), grid=(ROWS // BR,),
            in_specs=[spec], out_specs=Pl.BlockSpec((BR, COLS), lambda i: (i, 0)), **kw)(x)
    x = jnp.zeros((ROWS + HR, COLS), jnp.float32)
    with pytest.raises(BackendCapabilityError, match="every dim must be an Element or squeezed"):
        aot_compile(program(pl, pltpu.CompilerParams()), x)
    with pytest.raises(Exception, match="All block dimensions must be Elements"):
        aot_compile(program(jpl), x)
