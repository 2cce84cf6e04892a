"""Negative layer: errors name the backend, the primitive and the fix."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
from pallas_frontend import backend_api, registry

pytestmark = pytest.mark.negative

# A primitive owned by a backend that is never installed: every backend under
# test must refuse it in check(), before lowering.
FOREIGN_OWNER = "conformance_foreign"
foreign_p = backend_api.kernel_primitive("conformance_foreign_op", owner=FOREIGN_OWNER)
foreign_p.def_abstract_eval(lambda x: x)


def test_foreign_primitive_is_refused_by_check(call_kernel, pallas_backend):
    def body(x, o):
        o[...] = foreign_p.bind(x[...])

    def builder(**call):
        return pl.pallas_call(body, jax.ShapeDtypeStruct((8,), jnp.float32), name="foreign", **call)
    f = call_kernel(builder)
    with pytest.raises(backend_api.BackendCapabilityError) as info:
        jax.jit(f).lower(np.ones(8, np.float32)).compile()
    msg = str(info.value)
    assert "conformance_foreign_op" in msg and FOREIGN_OWNER in msg
    assert repr(pallas_backend.name) in msg or f"'{pallas_backend.name}'" in msg
    assert "test_negative.py" in msg   # the kernel's source line


def test_unknown_backend_name_is_named_with_no_false_install_hint(platform):
    with pytest.raises(backend_api.BackendUnavailableError,
                       match=r"No pallas_frontend backend named 'nosuch'") as info:
        registry.select_backend(platform=platform, interpret=False, compiler_params=None,
                                backend="nosuch")
    assert "pallas-frontend[" not in str(info.value)   # no extra exists for a third party


def test_out_of_range_block_fails_before_running(call_kernel):
    def builder(**call):
        return pl.pallas_call(
            lambda x, o: o.__setitem__(..., x[...]), jax.ShapeDtypeStruct((8,), jnp.float32),
            grid=(2,), in_specs=[pl.BlockSpec((8,), lambda i: (i,))],
            out_specs=pl.BlockSpec((8,), lambda i: (0,)), **call)
    with pytest.raises(pl.BlockIndexError, match="args\\[0\\]"):
        call_kernel(builder)(np.ones(8, np.float32))


@pytest.mark.parametrize("tag", sorted(backend_api.CAPABILITY_TAGS))
def test_capability_tag_is_checked(pallas_backend, call_options, rng, tag):
    """Undeclared: refused by check() before lowering. Declared: runs and
    matches NumPy. (A backend that declares no tags is not capability-checked.)"""
    from pallas_frontend.testing.capability_kernels import CAPABILITY_KERNELS, x64_for
    if not pallas_backend.capabilities:
        pytest.skip(f"backend {pallas_backend.name!r} declares no capability tags, so the "
                    "frontend does not check them (its own check() must)")
    with x64_for(tag):
        fn, operands, expected = CAPABILITY_KERNELS[tag](rng, **call_options)
        if tag not in pallas_backend.capabilities:
            with pytest.raises(backend_api.BackendCapabilityError, match="lacks capability"):
                jax.jit(fn).lower(*operands)
            return
        got = np.asarray(jax.block_until_ready(jax.jit(fn)(*operands)))
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def _tail_kernel(**call):
    """The beginner's grid: 1000 // 128 = 7 blocks of 128 over 1000 elements."""
    return pl.pallas_call(
        lambda x, o: o.__setitem__(..., x[...] * 2.0), jax.ShapeDtypeStruct((1000,), jnp.float32),
        grid=(1000 // 128,), in_specs=[pl.BlockSpec((128,), lambda i: (i,))],
        out_specs=pl.BlockSpec((128,), lambda i: (i,)), **call)


def test_unwritten_output_tail_is_named_before_the_backend_runs(call_kernel, rng):
    """Output coverage is the frontend's: the same warning on every backend, and
    an error under debug checks, before lowering (the written part is right)."""
    x = rng.standard_normal(1000).astype(np.float32)
    f = call_kernel(_tail_kernel)
    with pytest.warns(pl.UnwrittenOutputWarning, match=r"104 of its 1000 elements.*first at "
                      r"index \(896,\): grid \(7,\).*pl\.cdiv\(1000, 128\) = 8"):
        got = np.asarray(jax.block_until_ready(jax.jit(f)(x)))
    np.testing.assert_allclose(got[:896], x[:896].astype(np.float64) * 2.0, rtol=1e-6)
    with pl.enable_debug_checks(True), pytest.raises(pl.UnwrittenOutputError,
                                                     match=r"first at index \(896,\)"):
        jax.jit(call_kernel(_tail_kernel)).lower(x)
