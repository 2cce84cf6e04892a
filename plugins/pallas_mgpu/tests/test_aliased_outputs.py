"""Aliased outputs on pallas_mgpu: plgpu.kernel has no aliasing, so a visited
output block starts empty (not as the input's values). A body that writes the
whole block first matches NumPy; one that reads the block first, or writes it
only under a condition, is refused in check() with the fix (before, the round-3
probe found both silently wrong: NaN read through `o += x`, and blocks left
unwritten under pl.when not keeping the input)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_mgpu as plgpu
from pallas_frontend.backend_api import BackendCapabilityError

IP = {"interpret": plgpu.InterpretParams()}
N, BLOCK = 512, 128


def _aliased(body):
    spec = pl.BlockSpec((BLOCK,), lambda i: (i,))
    return pl.pallas_call(body, jax.ShapeDtypeStruct((N,), jnp.float32), grid=(N // BLOCK,),
                          in_specs=[spec, spec], out_specs=spec,
                          input_output_aliases={0: 0}, **IP)


def test_whole_block_written_first_matches_numpy(rng):
    def body(x, y, o):
        o[...] = x[...]
        o[...] += y[...] * 2
    x, y = (rng.standard_normal(N).astype(np.float32) for _ in range(2))
    got = np.asarray(_aliased(body)(x, y))
    np.testing.assert_allclose(got, x.astype(np.float64) + 2 * y.astype(np.float64), rtol=1e-6)


def _accumulate(x, y, o):
    o[...] += y[...]


def _every_other_block(x, y, o):
    @pl.when(pl.program_id(0) % 2 == 0)
    def _():
        o[...] = y[...]


@pytest.mark.parametrize("body", [_accumulate, _every_other_block])
def test_reading_or_conditionally_writing_an_aliased_output_is_refused(rng, body):
    x, y = (rng.standard_normal(N).astype(np.float32) for _ in range(2))
    with pytest.raises(BackendCapabilityError, match=rf"output 0, aliased to input 0, .*"
                                                     rf"(?s:.*)write the whole block first"):
        _aliased(body)(x, y)
