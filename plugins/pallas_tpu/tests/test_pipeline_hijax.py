"""emit_pipeline over operands of a hijax type (JAX's ``HiType``), as JAX
0.10.2's ``PipelineHijaxTest``: the pipeline buffers a Pair operand's blocks
in a Pair buffer and copies them with the type's own dma_start/dma_wait. Run
in TPU interpret mode against NumPy, and compiled device-less for a v5e."""

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))
from hijax_pair import Pair, PairType  # noqa: E402

pytestmark = pytest.mark.skipif(PairType is None, reason="this JAX has no hijax types")

STEPS, ROWS = 4, 8


@pytest.fixture(autouse=True)
def pair_dmas_through_pallas_tpu(monkeypatch):
    monkeypatch.setattr(PairType, "async_copy", staticmethod(pltpu.make_async_copy))


def _kernel(x_hbm, y_hbm, o_hbm, q_hbm):
    def body(x_ref, y_ref, o_ref, q_ref):
        o_ref[...] = x_ref[...]            # a Pair block
        q_ref[...] = y_ref[...] + 1.0      # a plain block beside it

    fwd = pl.BlockSpec((ROWS, 128), lambda i: (i, 0))
    rev = pl.BlockSpec((ROWS, 128), lambda i: (STEPS - 1 - i, 0))
    pltpu.emit_pipeline(body, grid=(STEPS,), in_specs=(fwd, fwd),
                        out_specs=(rev, fwd))(x_hbm, y_hbm, o_hbm, q_hbm)


def _launch(a, b, y, interpret):
    hbm = pl.BlockSpec(memory_space=pltpu.ANY)
    out, q = pl.pallas_call(
        _kernel, in_specs=(hbm, hbm), out_specs=(hbm, hbm),
        out_shape=(PairType(a.shape, a.dtype), jax.ShapeDtypeStruct(y.shape, y.dtype)),
        interpret=interpret)(Pair(a, b), y)
    return out.a, out.b, q


def _data(seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((STEPS * ROWS, 128)).astype(np.float32) for _ in range(3)]


def _reversed_blocks(x):
    return x.reshape(STEPS, ROWS, 128)[::-1].reshape(x.shape)


def test_pipeline_copies_pair_blocks_in_tpu_interpret_mode():
    a, b, y = _data(0)
    oa, ob, q = _launch(*map(jnp.asarray, (a, b, y)), interpret=pltpu.InterpretParams())
    np.testing.assert_array_equal(np.asarray(oa), _reversed_blocks(a))
    np.testing.assert_array_equal(np.asarray(ob), _reversed_blocks(b))
    np.testing.assert_allclose(np.asarray(q), y.astype(np.float64) + 1.0, rtol=1e-6)


def test_pipeline_over_a_pair_compiles_for_v5e(aot_compile):
    a, b, y = _data(1)
    compiled, text = aot_compile(lambda *xs: _launch(*xs, interpret=False), a, b, y)
    assert compiled is not None and "tpu_custom_call" in text
    # the Pair's two arrays are two operands (and two results) of the one kernel
    assert text.count("tensor<32x128xf32>") >= 6
