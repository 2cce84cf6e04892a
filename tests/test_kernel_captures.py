"""What a kernel body may close over, on the built-in interpreter (issue 41,
JAX's tpu_pallas_state_test): ``pl.kernel`` takes traced scalars (as JAX's
core_map does) and dict scratch by keyword; arrays are refused with JAX's
words; ``pallas_call`` refuses a traced scalar (it raised a TypeError from
inside the lowering); a ``core_map`` over no Ref is refused."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl

SDS = jax.ShapeDtypeStruct


@dataclasses.dataclass
class CoreMesh:
    shape: dict


def test_kernel_body_may_close_over_a_traced_scalar(rng):
    x = rng.standard_normal((6, 8, 16)).astype(np.float32)

    @jax.jit
    def rows(x, i, scale):
        @pl.kernel(out_type=SDS((2, 8, 16), jnp.float32), mesh=CoreMesh({"c": 2}),
                   interpret=True)
        def kernel(x_ref, o_ref):
            c = pl.program_id("c")
            o_ref[c] = x_ref[i + c] * scale
        return kernel(x)

    for i in range(5):
        scale = np.float32(rng.standard_normal())
        np.testing.assert_allclose(np.asarray(rows(x, i, scale)),
                                   x[i:i + 2].astype(np.float64) * float(scale), rtol=1e-6)


def test_kernel_scratch_given_as_a_dict_is_passed_by_name(rng):
    x = rng.standard_normal((8, 16)).astype(np.float32)

    def body(x_ref, o_ref, *, acc):
        acc[...] = x_ref[...] * 2.0
        o_ref[...] = acc[...] + 1.0

    out = pl.kernel(body, out_type=SDS(x.shape, x.dtype), mesh=CoreMesh({"c": 1}),
                    scratch_types=dict(acc=pl.MemorySpace.ANY(x.shape, x.dtype)),
                    interpret=True)(x)
    np.testing.assert_allclose(np.asarray(out), 2 * x.astype(np.float64) + 1, rtol=1e-6)


def test_kernel_body_closing_over_an_array_is_refused():
    @jax.jit
    def f(x):
        y = x * 2

        @pl.kernel(out_type=SDS(x.shape, x.dtype), mesh=CoreMesh({"c": 1}), interpret=True)
        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...] + y
        return kernel(x)
    with pytest.raises(ValueError, match=r"captures non-Ref constants \[f32\[8\]\]. You should "
                                         r"pass them as inputs"):
        f(jnp.zeros(8, jnp.float32))


def test_pallas_call_closing_over_a_traced_scalar_is_refused():
    @jax.jit
    def f(x, s):
        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...] * s
        return pl.pallas_call(kernel, out_shape=SDS(x.shape, x.dtype), interpret=True)(x)
    with pytest.raises(ValueError, match=r"captures constants \[f32\[\]\]. You should pass them "
                                         r"as inputs"):
        f(jnp.zeros(8, jnp.float32), 2.0)


def test_pallas_call_closing_over_a_concrete_scalar_still_runs(rng):
    x = rng.standard_normal(8).astype(np.float32)
    s = np.float32(rng.standard_normal())

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * jnp.float32(s)
    out = jax.jit(pl.pallas_call(kernel, out_shape=SDS(x.shape, x.dtype), interpret=True))(x)
    np.testing.assert_allclose(np.asarray(out), x.astype(np.float64) * float(s), rtol=1e-6)


def test_core_map_over_no_ref_is_refused():
    with pytest.warns(DeprecationWarning):
        core_map = pl.core_map

    def f(x):
        def inner(refs):
            del refs

            @core_map(CoreMesh({"c": 1}), interpret=True)
            def _():
                pass
        return pl.run_state(inner)((x, jnp.zeros_like(x)))[1]
    with pytest.raises(ValueError, match=r"closes over no Ref.*Attempted to lower core_map "
                                         r"without discharging\."):
        jax.jit(f)(jnp.zeros(8, jnp.float32))


def test_core_map_body_may_close_over_traced_scalars(rng):
    """JAX 0.10.2's test_can_partition_grid: a grid size passed to the jitted
    function reaches the core_map body (was 'may close over Refs only')."""
    x = rng.standard_normal((6, 8, 16)).astype(np.float32)

    @jax.jit
    def rows(x, i, scale):
        x_ref, o_ref = jax.new_ref(x), jax.new_ref(jnp.zeros((2, 8, 16), jnp.float32))

        @pl.core_map(CoreMesh({"c": 2}), interpret=True)
        def _():
            c = jax.lax.axis_index("c")
            o_ref[c] = x_ref[i + c] * scale + np.float32(1.5)
        return o_ref[...]

    for i in rng.permutation(5)[:3]:
        scale = np.float32(rng.standard_normal())
        np.testing.assert_allclose(np.asarray(rows(x, np.int32(i), scale)),
                                   x[i:i + 2].astype(np.float64) * float(scale) + 1.5,
                                   rtol=1e-6)


def test_core_map_body_closing_over_an_array_is_refused():
    @jax.jit
    def f(x):
        o_ref, y = jax.new_ref(jnp.zeros_like(x)), x * 2

        @pl.core_map(CoreMesh({"c": 1}), interpret=True)
        def body():
            o_ref[...] = o_ref[...] + y
        return o_ref[...]
    with pytest.raises(ValueError, match=r"core_map body at .*test_kernel_captures.py:\d+ "
                                         r"captures non-scalar array constants \[f32\[8\]\]"):
        f(jnp.zeros(8, jnp.float32))
