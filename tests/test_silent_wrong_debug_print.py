"""``pl.debug_print`` formats numbered fields as ``str.format`` and JAX's
``pl.debug_print`` do (issue 24, defect 9: ``"a={0} b={1}"`` printed
``a={{0}} b={{1}} {} {} 1.0 2.0``)."""

import jax
import jax.experimental.pallas as jpl
import jax.numpy as jnp
import pytest

import pallas_frontend as pl
from conftest import rand


def _printed(mod, fmt, x, capfd, grid=()):
    def kernel(x_ref, o_ref):
        mod.debug_print(fmt, x_ref[0], x_ref[1])
        o_ref[...] = x_ref[...]

    capfd.readouterr()
    mod.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=grid,
                    interpret=True)(x)
    jax.effects_barrier()
    return capfd.readouterr().out


@pytest.mark.parametrize("fmt", ["a={0} b={1}", "b={1} a={0} again {0}", "{1:.3f}|{0!r}",
                                 "{{literal}} {} and {}", "x={0:>12.2e}, y={1}"])
def test_formats_like_jax(rng, capfd, fmt):
    x = jnp.asarray(rand(rng, 2))
    want = _printed(jpl, fmt, x, capfd)
    assert want.strip()
    assert _printed(pl, fmt, x, capfd) == want


def test_numbered_fields_batched_over_a_grid(rng, capfd):
    x = jnp.asarray(rand(rng, 2))
    got = _printed(pl, "b={1} a={0}", x, capfd, grid=(3,))
    assert got.splitlines() == [f"b={x[1]} a={x[0]}"] * 3


@pytest.mark.parametrize("fmt, why", [("{0} {}", "mixes"), ("{a}", "has field"),
                                      ("{0}", "1 placeholders but 2"),
                                      ("{0} {2}", "2 placeholders but 2")])
def test_bad_fields_are_refused_before_running(fmt, why):
    def kernel(x_ref, o_ref):
        pl.debug_print(fmt, x_ref[0], x_ref[1])

    with pytest.raises(ValueError, match=why):
        pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((2,), jnp.float32))(
            jnp.ones(2, jnp.float32))
