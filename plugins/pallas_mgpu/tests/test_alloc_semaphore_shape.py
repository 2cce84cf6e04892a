"""``pallas_mgpu.alloc_semaphore`` takes its shape as JAX does: an int, or a
tuple or list of ints. It rounded ``(2.5,)`` to ``(2,)`` and split ``"12"`` into
``(1, 2)`` (issue 39); JAX refuses both. A bool size is refused too (JAX takes
True as 1; here it is taken for a mistake). The reference for the refusals is
JAX's own shape check (``jax.numpy.zeros``)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_mgpu


def _shape_of(shape):
    got = {}

    @jax.jit
    def f():
        sems = pallas_mgpu.alloc_semaphore(shape)
        got["shape"] = jax.typeof(sems).shape
        return sems[...]
    f()
    return got["shape"]


@pytest.mark.parametrize("shape, what", [
    ((2.5,), r"shape \(2\.5,\) has 2\.5 \(a float\) at dimension 0"),
    ((2.0,), r"has 2\.0 \(a float\) at dimension 0"),
    ((3, 1.5), r"has 1\.5 \(a float\) at dimension 1"),
    ("12", r"shape must be an int or a tuple of ints, got '12' \(a str\)"),
    (b"12", r"got b'12' \(a bytes\)"),
    (2.5, r"got 2\.5 \(a float\)"),
    ((True,), r"has True \(a bool\)"),
    ({2: 3}, r"\(a dict\)"),
])
def test_a_shape_jax_refuses_is_refused_naming_it_and_the_fix(shape, what):
    if not isinstance(shape, (tuple, bool)):
        with pytest.raises(TypeError):
            jnp.zeros(shape, jnp.int32)            # JAX refuses it too
    with pytest.raises(TypeError, match=what + r".*e\.g\. alloc_semaphore\(\(2,\)\)"):
        pallas_mgpu.alloc_semaphore(shape)


def test_jax_refuses_float_sizes_too():
    for shape in [(2.5,), (2.0,), (3, 1.5)]:
        with pytest.raises(TypeError):
            jnp.zeros(shape, jnp.int32)


@pytest.mark.parametrize("shape, want", [
    (3, (3,)), ((2, 4), (2, 4)), ([5], (5,)), ((np.int64(2), np.int32(3)), (2, 3)), ((), ()),
])
def test_int_shapes_are_taken(shape, want):
    assert _shape_of(shape) == want == jnp.zeros(shape).shape


def test_a_negative_size_names_the_fix():
    with pytest.raises(ValueError, match=r"negative size.*alloc_semaphore\(\(2,\)\)"):
        pallas_mgpu.alloc_semaphore((2, -1))
