"""``pl.kernel`` given one Ref twice refuses, naming both arguments, as
``jax.jit`` does (issue 24, defect 5: ``a += 1; b += 10`` gave 10, not 11)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
from conftest import rand


class _Mesh:
    shape = {"x": 1}


def _bump(a, b):
    a[...] += 1
    b[...] += 10


def test_jax_refuses_the_same_ref_twice(rng):
    r = jax.new_ref(jnp.asarray(rand(rng, 4)))
    with pytest.raises(ValueError, match="only one reference"):
        jax.jit(_bump)(r, r)


def test_same_ref_twice_is_refused(rng):
    x = rand(rng, 4)
    r = jax.new_ref(jnp.asarray(x))
    with pytest.raises(ValueError, match=r"pl.kernel\(_bump\).*argument 0 .*argument 1"):
        pl.kernel(_bump, mesh=_Mesh(), interpret=True)(r, r)
    np.testing.assert_array_equal(r[...], x)     # nothing ran


def test_same_ref_twice_in_a_pytree_under_jit(rng):
    x = rand(rng, 4)

    @jax.jit
    def f(x):
        r = jax.new_ref(x)
        pl.kernel(lambda d: _bump(d["p"], d["q"]), mesh=_Mesh(), interpret=True)({"p": r, "q": r})
        return r[...]

    with pytest.raises(ValueError, match=r"argument 0\.p and as argument 0\.q"):
        f(x)


def test_distinct_refs_each_keep_their_update(rng):
    x, y = rand(rng, 4), rand(rng, 4)
    a, b = jax.new_ref(jnp.asarray(x)), jax.new_ref(jnp.asarray(y))
    pl.kernel(_bump, mesh=_Mesh(), interpret=True)(a, b)
    np.testing.assert_allclose(a[...], x.astype(np.float64) + 1, rtol=1e-6)
    np.testing.assert_allclose(b[...], y.astype(np.float64) + 10, rtol=1e-6)
