"""``None`` leaves in operands, ``in_specs`` and ``scratch_shapes`` reach the
kernel as ``None`` in their positions, as in JAX. JAX's TPU paged attention
(its in_specs and scratch_shapes hold None for absent quantization scales) is
run from JAX's own file against JAX, plus the same call pattern in small."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import jax_ops  # noqa: E402
import jax_ops_cases  # noqa: E402

import pallas_frontend as pl  # noqa: E402
from jax.experimental import pallas as jax_pl  # noqa: E402

pytest.importorskip("pallas_tpu")
CASES = {c.name: c for c in jax_ops_cases.TPU_CASES}


@pytest.mark.parametrize("name", ["tpu.paged_attention",
                                  "tpu.paged_attention(inline_seq_dim=False)"])
def test_jax_tpu_paged_attention_file(name):
    row = jax_ops.run_case(CASES[name], "small", False,
                           seed=np.random.SeedSequence().entropy % 2**32, repeats=0)
    assert row["jax"] == "ok", row["jax_error"]
    assert row["ours"] == "ok", row["ours_error"]
    assert row["rel"] <= 1e-5


def _kernel(x_ref, scale_ref, o_ref, buf, no_buf, acc):
    # the positions of the None operand and the None scratch are kept
    assert scale_ref is None and no_buf is None
    buf[...] = x_ref[...] * 2
    acc[...] = buf[...] + 1
    o_ref[...] = acc[...]


@pytest.mark.parametrize("lib", [pl, jax_pl], ids=["ours", "jax"])
def test_none_operand_spec_and_scratch_keep_their_positions(lib):
    x = np.random.default_rng().standard_normal((16, 128)).astype(np.float32)
    spec = lib.BlockSpec((8, 128), lambda i: (i, 0))
    if lib is jax_pl:
        from jax.experimental.pallas import tpu as pltpu
        scratch = pltpu.VMEM((8, 128), np.float32)
        kw = dict(interpret=True)
    else:
        import pallas_tpu as pltpu
        scratch = pltpu.VMEM((8, 128), np.float32)
        kw = {}
    out = lib.pallas_call(
        _kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(2,),
        in_specs=[spec, None], out_specs=spec, scratch_shapes=(scratch, None, scratch), **kw,
    )(x, None)
    np.testing.assert_allclose(np.asarray(out), 2 * x.astype(np.float64) + 1, rtol=1e-6)
