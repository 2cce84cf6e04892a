"""backend_api.parallel_grid_axes with a kernel that writes an input Ref: the
write is carried to later grid points (the frontend's sequential meaning), so
an axis along which such an input block is revisited is not parallel. A
backend that launches the axis' points at once (pallas_triton's programs)
would otherwise race on the block: silent wrong results on a GPU, hidden by
interpreters that happen to run programs in order."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
from pallas_frontend import backend_api, registry
from pallas_frontend.interpreter.backend import InterpreterBackend


class _Recording(InterpreterBackend):
    """The built-in interpreter, remembering parallel_grid_axes of each kernel it runs."""
    name = "recording_interpreter"

    def __init__(self):
        super().__init__()
        self.seen = []

    def check(self, kernel):
        self.seen.append(backend_api.parallel_grid_axes(kernel))
        return super().check(kernel)


@pytest.fixture
def recording():
    backend = registry.register_backend(_Recording())
    yield backend
    registry.unregister_backend(backend.name)


def _run(x, grid, in_map, backend):
    """``_bump_and_copy`` over ``grid`` (16-row blocks of a (16 * grid, 128) output)."""
    f = pl.pallas_call(_bump_and_copy, jax.ShapeDtypeStruct((16 * grid, 128), jnp.float32),
                       grid=(grid,), in_specs=[pl.BlockSpec((16, 128), in_map)],
                       out_specs=pl.BlockSpec((16, 128), lambda i: (i, 0)), backend=backend)
    return np.asarray(f(x))


def _bump_and_copy(x_ref, o_ref):
    x_ref[...] = x_ref[...] + 1.0
    o_ref[...] = x_ref[...]


def test_revisited_written_input_keeps_its_axis_sequential(recording, rng):
    x = rng.standard_normal((16, 128)).astype(np.float32)
    got = _run(x, 4, lambda i: (0, 0), recording.name)
    # each point sees the block as the previous point left it
    want = np.concatenate([x.astype(np.float64) + (i + 1) for i in range(4)])
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert recording.seen[-1] == (False,)


def test_written_input_with_its_own_block_per_point_stays_parallel(recording, rng):
    x = rng.standard_normal((64, 128)).astype(np.float32)
    got = _run(x, 4, lambda i: (i, 0), recording.name)
    np.testing.assert_allclose(got, x.astype(np.float64) + 1.0, rtol=1e-6)
    assert recording.seen[-1] == (True,)
