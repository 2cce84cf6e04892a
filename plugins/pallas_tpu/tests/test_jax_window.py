"""The JAX window (0.10 to 0.12): what the user asks of ours that an older
JAX lacks is refused in one line naming the JAX release that has it, where it
is written (never a TypeError from inside JAX); on a JAX that has it, it works."""

import re

import jax
import jax.numpy as jnp
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu
from pallas_frontend.jax_window import JAX_VERSION
from pallas_tpu import _jax_private


def _needs(what: str, since: str) -> str:
    """The line (the frontend puts the kernel's name and line before it)."""
    return re.escape(f"{what} needs JAX {since} or newer; this is JAX {jax.__version__}.")


def _jax_has(minimum: str) -> bool:
    return JAX_VERSION >= tuple(int(p) for p in minimum.split("."))


def test_interpret_option_of_a_newer_jax():
    """``on_race`` came with JAX 0.12; the default is every JAX's behaviour."""
    from jax.experimental.pallas import tpu as jax_tpu
    assert pltpu.InterpretParams().to_jax() == jax_tpu.InterpretParams()
    if _jax_has("0.12"):
        assert pltpu.InterpretParams(on_race="warn").to_jax().on_race == "warn"
        return
    with pytest.raises(NotImplementedError,
                       match=_needs("pallas_tpu.InterpretParams(on_race='warn')", "0.12")):
        pltpu.InterpretParams(on_race="warn")


def _copy_kernel(body):
    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                          scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)],
                          interpret=True)


def test_annotate():
    def body(x_ref, o_ref, v_ref):
        v_ref[...] = x_ref[...]
        o_ref[...] = pltpu.annotate(v_ref, no_store=True)[...]
    x = jnp.arange(8 * 128, dtype=jnp.float32).reshape(8, 128)
    if _jax_has("0.11"):
        assert (_copy_kernel(body)(x) == x).all()
        return
    with pytest.raises(NotImplementedError,
                       match=_needs("pallas_tpu.annotate (Mosaic access assumptions)", "0.11")):
        _copy_kernel(body)(x)


def test_barrier_semaphore_tag():
    """Without a tag every JAX of the window has it; a tag needs JAX 0.11."""
    if _jax_private.barrier_semaphore_takes_tag():
        assert _jax_has("0.11")
        return

    def body(x_ref, o_ref, v_ref):
        pltpu.get_barrier_semaphore(tag="mine")
    with pytest.raises(NotImplementedError,
                       match=_needs("pallas_tpu.get_barrier_semaphore(tag=...)", "0.11")):
        _copy_kernel(body)(jnp.zeros((8, 128), jnp.float32))


def test_bitcast_along_the_minormost_dim():
    """The built-in interpreter bitcasts along any dim on every JAX; TPU
    interpret mode and Mosaic go through JAX's pltpu.bitcast, which takes
    ``dim`` from JAX 0.12."""
    def body(x_ref, o_ref):
        o_ref[...] = pltpu.bitcast(x_ref[...], jnp.float32, -1)
    x = jnp.arange(16 * 128, dtype=jnp.int32).reshape(16, 128)

    def call(interpret):
        return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
                              interpret=interpret)(x)
    want = jax.lax.bitcast_convert_type(x, jnp.float32)
    assert (call(True) == want).all()
    if _jax_private.bitcast_takes_dim():
        assert (call(pltpu.InterpretParams()) == want).all()
        return
    with pytest.raises(NotImplementedError, match=_needs(
            "pallas_tpu.bitcast along the minormost dim (dim=-1) on TPU", "0.12")):
        call(pltpu.InterpretParams())


def test_has_memory_space_on_tpu():
    """The interpreters answer on every JAX; Mosaic is asked through JAX's
    pltpu.has_memory_space, which came with JAX 0.12."""
    from pallas_tpu import aot

    def body(x_ref, o_ref):
        o_ref[...] = jnp.where(pltpu.has_memory_space(x_ref, pltpu.HBM), 1.0, 0.0) \
            * jnp.ones((8, 128), jnp.float32)

    def call(x, **kw):
        return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                              in_specs=[pl.BlockSpec(memory_space=pltpu.ANY)], **kw)(x)
    x = jnp.zeros((8, 128), jnp.float32)
    assert (call(x, interpret=True) == 1.0).all()
    compiled = lambda a: call(a, compiler_params=pltpu.CompilerParams())   # noqa: E731
    if _jax_has("0.12"):
        assert "tpu_custom_call" in aot.lower_for_tpu(compiled, x).as_text()
        return
    with pytest.raises(NotImplementedError, match=_needs(
            "pallas_tpu.has_memory_space on TPU (JAX's pltpu.has_memory_space)", "0.12")):
        aot.lower_for_tpu(compiled, x)


def test_with_memory_space_constraint():
    """A concrete array comes back as it is on every JAX (JAX 0.10 itself
    cannot run the constraint outside a trace); the host needs JAX 0.11."""
    x = jnp.ones((8, 128), jnp.float32)
    assert pltpu.with_memory_space_constraint(x, pltpu.VMEM) is x
    to_host = jax.jit(lambda a: pltpu.with_memory_space_constraint(a, pl.HOST))
    if _jax_has("0.11"):
        jax.make_jaxpr(to_host)(x)
        return
    with pytest.raises(NotImplementedError, match=_needs(
            "pallas_tpu.with_memory_space_constraint to pallas_frontend.HOST", "0.11")):
        jax.make_jaxpr(to_host)(x)


@pytest.mark.parametrize("level", ["O0", "O3"])
def test_compiler_params_opt_level(level):
    # JAX's SparseCore tests pass opt_level= (JAX 0.11 and newer have the field)
    params = pltpu.CompilerParams(opt_level=level)
    if JAX_VERSION >= (0, 11):
        assert params.to_jax().opt_level == level
        assert pltpu.CompilerParams().to_jax().opt_level is None
    else:
        with pytest.raises(NotImplementedError,
                           match=r"^pallas_tpu.CompilerParams\(opt_level='O\d'\) needs JAX 0.11"):
            params.to_jax()
