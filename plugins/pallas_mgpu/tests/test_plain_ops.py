"""JAX's plgpu operations provided by ``pallas_mgpu.plain_ops`` (stores,
atomics, reductions, ``barrier_test``, prefetch, ``cp.async`` wait, dependent
launch, ``print_layout``): each kernel gives the same result
as JAX's in Mosaic GPU interpret mode where JAX's interpreter runs the
operation (``store``, ``async_prefetch``), and otherwise lowers for an H100 to
the same Mosaic GPU operations, as often, as JAX's kernel written with JAX's
names. Where JAX's interpreter has no rule (atomics, reductions, ...), ours
fails there as JAX's does."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import mosaic_gpu as jax_plgpu

import pallas_mgpu
from h100_ops import mosaic_ops, sharded_lowered_module

LIBS = {"ours": pallas_mgpu, "jax": jax_plgpu}


@pytest.fixture
def rng():
    return np.random.default_rng()


def _call(lib, body, out, scratch=(), interpret=None, **kw):
    return lib.kernel(body, out_type=out, scratch_types=list(scratch), interpret=interpret, **kw)


def _lowered_ops(lib, make_body, shape, dtype, scratch_of=lambda lib: (), out_shape=None,
                 **kernel_kw):
    """Operation counts of the Mosaic GPU module lowered for an H100 (no-op
    casts left out: ``h100_ops.mosaic_ops``)."""
    out = jax.ShapeDtypeStruct(shape if out_shape is None else out_shape, dtype)
    fn = _call(lib, make_body(lib), out, scratch_of(lib), **kernel_kw)
    return mosaic_ops(sharded_lowered_module(fn, jax.ShapeDtypeStruct(shape, dtype)))


def _store(lib):
    def body(x_ref, o_ref):
        lib.store(o_ref, x_ref[...] * 2.0)
    return body


def _prefetch(lib):
    def body(x_ref, o_ref):
        lib.async_prefetch(x_ref)
        o_ref[...] = x_ref[...] + 1.0
    return body


@pytest.mark.parametrize("make_body, expected", [
    (_store, lambda x: 2.0 * x), (_prefetch, lambda x: x + 1.0)])
def test_interpret_mode_matches_jax_and_numpy(make_body, expected, rng):
    x = rng.standard_normal((256,)).astype(np.float32)
    out = jax.ShapeDtypeStruct(x.shape, x.dtype)
    got = {side: np.asarray(_call(lib, make_body(lib), out,
                                  interpret=lib.InterpretGPUParams())(x))
           for side, lib in LIBS.items()}
    np.testing.assert_array_equal(got["ours"], got["jax"])
    np.testing.assert_allclose(got["ours"], expected(x.astype(np.float64)), rtol=1e-6)


def _atomic(name):
    def make(lib):
        def body(x_ref, o_ref):
            getattr(lib, name)(o_ref, x_ref[...])
        return body
    return make


def _reduction(name):
    def make(lib):
        def body(x_ref, o_ref):
            o_ref[...] = getattr(lib, name)(x_ref[...])     # all axes: a scalar
        return body
    return make


def _statements(lib):
    def body(x_ref, o_ref):
        lib.griddepcontrol_wait()
        v = x_ref[...]
        lib.print_layout("x: {}", v)
        o_ref[...] = v
        lib.griddepcontrol_launch_dependents()
    return body


def _barrier_test(lib):
    def body(x_ref, o_ref, smem, bar):
        lib.copy_gmem_to_smem(x_ref, smem, bar)
        done = lib.barrier_test(bar)
        lib.barrier_wait(bar)
        o_ref[...] = jax.lax.cond(done, lambda: smem[...], lambda: smem[...] * 2.0)
    return body


CASES = {
    # (Mosaic GPU has float32 atomics for add only, under JAX too)
    "atomic_add": (_atomic("atomic_add"), jnp.float32, None),
    **{n: (_atomic(n), jnp.int32, None)
       for n in ("atomic_max", "atomic_min", "atomic_and", "atomic_or", "atomic_xor")},
    **{n: (_reduction(n), jnp.float32, ()) for n in ("sum", "max", "min", "prod")},
    "statements": (_statements, jnp.float32, None),
}


@pytest.mark.parametrize("case", CASES)
def test_lowers_for_h100_as_jax(case):
    make_body, dtype, out_shape = CASES[case]
    shape = (128, 64)
    ours = _lowered_ops(pallas_mgpu, make_body, shape, dtype, out_shape=out_shape)
    theirs = _lowered_ops(jax_plgpu, make_body, shape, dtype, out_shape=out_shape)
    assert ours == theirs and ours


def test_barrier_test_lowers_for_h100_as_jax():
    scratch = lambda lib: (lib.SMEM((128, 64), jnp.float32), lib.Barrier())
    ours = _lowered_ops(pallas_mgpu, _barrier_test, (128, 64), jnp.float32, scratch)
    theirs = _lowered_ops(jax_plgpu, _barrier_test, (128, 64), jnp.float32, scratch)
    assert ours == theirs and ours


def _cp_async_wait(lib):
    def body(x_ref, o_ref):
        lib.wait_gmem_to_smem(0)
        o_ref[...] = x_ref[...]
    return body


def test_cp_async_wait_is_refused_for_h100_as_by_jax():
    messages = {}
    for side, lib in LIBS.items():
        with pytest.raises(ValueError, match="pre-Hopper") as info:
            _lowered_ops(lib, _cp_async_wait, (128, 64), jnp.float32)
        messages[side] = str(info.value).split(": ", 1)[-1] if side == "ours" else str(info.value)
    assert messages["ours"] == messages["jax"]


def test_reductions_refuse_keepdims():
    with pytest.raises(NotImplementedError, match="keepdims"):
        pallas_mgpu.sum(jnp.zeros((4, 4)), axis=1, keepdims=True)


@pytest.mark.parametrize("name", ["sum", "atomic_add"])
def test_where_jax_interpreter_has_no_rule_ours_fails_as_jax(name, rng):
    make_body, dtype, out_shape = CASES[name]
    x = rng.standard_normal((128, 64)).astype(np.float32)
    errors = {}
    for side, lib in LIBS.items():
        with pytest.raises(Exception) as info:
            _call(lib, make_body(lib), jax.ShapeDtypeStruct(
                      x.shape if out_shape is None else out_shape, x.dtype),
                  interpret=lib.InterpretGPUParams())(x)
        errors[side] = type(info.value)
    assert errors["ours"] is errors["jax"]

