"""``pltpu.VMEM.like(x)`` / ``pl.ANY.like(x)``: a buffer typed after ``x``, as
JAX's ``MemorySpace.like`` (JAX's test_memory_space_like), usable as scratch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu


@pytest.mark.parametrize("space", [pltpu.VMEM, pltpu.SMEM, pltpu.HBM, pl.ANY])
@pytest.mark.parametrize("make", [
    lambda s, d: jax.ShapeDtypeStruct(s, d),
    lambda s, d: jnp.zeros(s, d),
    lambda s, d: jax.core.ShapedArray(s, d),
])
def test_like_takes_shape_and_dtype(space, make):
    rng = np.random.default_rng()
    shape = tuple(int(n) for n in rng.integers(1, 9, size=int(rng.integers(1, 4))))
    dtype = rng.choice([np.float32, np.int32, np.int8, jnp.bfloat16])
    ref = space.like(make(shape, dtype))
    assert (ref.shape, ref.dtype) == (shape, np.dtype(dtype))
    assert (ref.inner_aval.shape, ref.inner_aval.dtype) == (shape, np.dtype(dtype))
    assert ref.memory_space == space


def test_like_scratch_in_a_kernel():
    x = jnp.asarray(np.random.default_rng().standard_normal((16, 128)), jnp.float32)

    def k(x_ref, o_ref, tmp_ref):
        tmp_ref[...] = x_ref[...] * 2.0
        o_ref[...] = tmp_ref[...] + 1.0
    got = pl.pallas_call(k, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                         scratch_shapes=[pltpu.VMEM.like(x)],
                         interpret=pltpu.InterpretParams(chip_checks=False))(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(x, np.float64) * 2 + 1, rtol=1e-6)


@pytest.mark.parametrize("space", [pltpu.VMEM, pl.ANY])
def test_like_refuses_what_has_no_shape(space):
    with pytest.raises(TypeError, match=r"\.like\(x\): x must have a shape and a dtype"):
        space.like((8, 128))
