"""Inputs that used to crash, run silently wrong, or differ from JAX (issue 11)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
from conftest import rand

SDS = jax.ShapeDtypeStruct


def copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def double_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


# --- grid axes of size 0 ----------------------------------------------------------

def test_empty_grid_from_cdiv_returns_the_empty_output():
    bs = 8
    x = jnp.zeros((0,), jnp.float32)
    out = pl.pallas_call(copy_kernel, SDS((0,), jnp.float32), grid=(pl.cdiv(0, bs),),
                         in_specs=[pl.BlockSpec((bs,), lambda i: (i,))],
                         out_specs=pl.BlockSpec((bs,), lambda i: (i,)))(x)
    assert out.shape == (0,) and out.dtype == jnp.float32


def test_zero_axis_leaves_an_aliased_output_untouched(rng):
    x = rand(rng, 16)
    out = pl.pallas_call(double_kernel, SDS((16,), jnp.float32), grid=(0, 2),
                         in_specs=[pl.BlockSpec((8,), lambda i, j: (j,))],
                         out_specs=pl.BlockSpec((8,), lambda i, j: (j,)),
                         input_output_aliases={0: 0})(x)
    np.testing.assert_array_equal(np.asarray(out), x)   # no grid point ran: x, not 2x


def test_vmap_over_an_empty_batch(rng):
    f = pl.pallas_call(double_kernel, SDS((16,), jnp.float32), grid=(2,),
                       in_specs=[pl.BlockSpec((8,), lambda i: (i,))],
                       out_specs=pl.BlockSpec((8,), lambda i: (i,)))
    out = jax.vmap(f)(jnp.zeros((0, 16), jnp.float32))
    assert out.shape == (0, 16)
    # and a non-empty batch still runs
    x = rand(rng, 3, 16)
    np.testing.assert_allclose(jax.vmap(f)(x), 2 * x.astype(np.float64), rtol=1e-6)


# --- seed behaviours ----------------------------------------------------------------

def run1(kernel, x, **kw):
    return pl.pallas_call(kernel, out_shape=SDS(x.shape, x.dtype), **kw)(x)


def test_semaphores_start_at_zero(rng):
    x = rand(rng, 4)

    def kernel(x_ref, o_ref, sem):         # no explicit initialisation
        pl.semaphore_signal(sem, 3)
        pl.semaphore_wait(sem, 2)
        o_ref[...] = x_ref[...] * pl.semaphore_read(sem).astype(jnp.float32)  # 3 - 2 = 1

    out = run1(kernel, x, scratch_shapes=[pl.ANY((), jnp.int32)])
    np.testing.assert_array_equal(out, x)


def test_semaphore_deadlock_has_its_own_error(rng):
    x = rand(rng, 4)

    def kernel(x_ref, o_ref, sem):
        pl.semaphore_signal(sem, 1)
        pl.semaphore_wait(sem, 2)
        o_ref[...] = x_ref[...]

    with pytest.raises(pl.SemaphoreDeadlockError, match="semaphore_wait would block forever"):
        jax.block_until_ready(run1(kernel, x, scratch_shapes=[pl.ANY((), jnp.int32)]))


def test_semaphore_signal_takes_a_traced_device_id_and_checks_the_type(rng):
    x = rand(rng, 4)

    def kernel(x_ref, o_ref, sem):
        pl.semaphore_signal(sem, 1, device_id=pl.program_id(0),
                            device_id_type=pl.DeviceIdType.LOGICAL)
        o_ref[...] = x_ref[...]

    # The sequential interpreter cannot signal another device: a clear refusal,
    # not a TypeError about an unhashable tracer.
    with pytest.raises(NotImplementedError, match="semaphore_signal to another device"):
        run1(kernel, x, grid=(2,), scratch_shapes=[pl.ANY((), jnp.int32)])

    def bad_type(x_ref, o_ref, sem):
        pl.semaphore_signal(sem, 1, device_id=0, device_id_type="ring")
        o_ref[...] = x_ref[...]
    with pytest.raises(ValueError, match="device_id_type must be pl.DeviceIdType.MESH or"):
        run1(bad_type, x, scratch_shapes=[pl.ANY((), jnp.int32)])


def test_with_scoped_is_a_decorator_returning_a_callable(rng):
    x = rand(rng, 8)

    def kernel(x_ref, o_ref):
        @pl.with_scoped(pl.ANY((8,), jnp.float32), acc=pl.ANY((8,), jnp.float32))
        def scaled(factor, tmp, acc):
            tmp[...] = x_ref[...] * factor
            acc[...] = tmp[...] + 1.0
            return acc[...]
        o_ref[...] = scaled(3.0) + scaled(-1.0)

    out = run1(kernel, x)
    np.testing.assert_allclose(out, 2 * x.astype(np.float64) + 2.0, rtol=1e-6)


@pytest.mark.parametrize("n", [np.int64(10), np.int32(10), 10])
def test_cdiv_and_align_to_of_numpy_ints_are_python_ints(n, rng):
    assert pl.cdiv(n, 4) == 3 and type(pl.cdiv(n, 4)) is int
    assert pl.align_to(n, 4) == 12 and type(pl.align_to(n, 4)) is int
    x = rand(rng, 12)
    out = pl.pallas_call(double_kernel, SDS((12,), jnp.float32), grid=(pl.cdiv(np.int64(12), 4),),
                         in_specs=[pl.BlockSpec((4,), lambda i: (i,))],
                         out_specs=pl.BlockSpec((4,), lambda i: (i,)))(x)
    np.testing.assert_allclose(out, 2 * x.astype(np.float64), rtol=1e-6)


def test_failed_debug_check_raises_kernel_check_error_with_the_message(rng):
    x = np.abs(rand(rng, 16)) + 1.0

    def kernel(x_ref, o_ref):
        pl.debug_check(jnp.all(x_ref[...] < 0), "inputs must be negative")
        o_ref[...] = x_ref[...]

    with pl.enable_debug_checks(True):
        with pytest.raises(pl.KernelCheckError, match="inputs must be negative"):
            jax.block_until_ready(run1(kernel, x))
        np.testing.assert_array_equal(run1(kernel, -x), -x)


def test_bare_enable_debug_checks_sets_the_flag():
    assert pl.enable_debug_checks.value is False
    try:
        pl.enable_debug_checks(True)
        assert pl.enable_debug_checks.value is True
        with pl.enable_debug_checks(False):
            assert pl.enable_debug_checks.value is False
        assert pl.enable_debug_checks.value is True
    finally:
        pl.enable_debug_checks(False)
    assert pl.enable_debug_checks.value is False


def test_debug_print_without_placeholders_prints_the_values_after(rng, capfd):
    x = rand(rng, 4)

    def kernel(x_ref, o_ref):
        pl.debug_print("first:", x_ref[0])
        o_ref[...] = x_ref[...]

    jax.block_until_ready(run1(kernel, x))
    out = capfd.readouterr().out
    assert f"first: {x[0]}" in out or f"first: {float(x[0]):.7}" in out, out


def test_get_global_persists_across_grid_points_in_the_interpreter(rng):
    x = rand(rng, 4, 8)

    def kernel(x_ref, o_ref):
        sem = pl.get_global(pl.ANY((), jnp.int32))
        pl.semaphore_signal(sem, 2)
        # program i sees 2 * (i + 1): the global carries over from earlier points
        o_ref[...] = x_ref[...] * pl.semaphore_read(sem).astype(jnp.float32)

    out = pl.pallas_call(kernel, SDS((4, 8), jnp.float32), grid=(4,),
                         in_specs=[pl.BlockSpec((1, 8), lambda i: (i, 0))],
                         out_specs=pl.BlockSpec((1, 8), lambda i: (i, 0)))(x)
    expect = x.astype(np.float64) * (2 * (np.arange(4) + 1))[:, None]
    np.testing.assert_allclose(out, expect, rtol=1e-6)


@pytest.mark.parametrize("interpret", [1, "yes", 1.0])
def test_interpret_that_is_not_a_mode(interpret, rng):
    with pytest.raises(TypeError, match=r"is not a mode: pass interpret=True") as e:
        pl.pallas_call(copy_kernel, SDS((4,), jnp.float32), interpret=interpret)
    assert "pallas-frontend[" not in str(e.value)


def test_jax_own_params_objects_are_named_as_such(monkeypatch):
    from jax.experimental.pallas import tpu as pltpu

    from pallas_frontend import registry
    # as where pallas_tpu is not installed (it adopts JAX's InterpretParams)
    monkeypatch.setattr(registry, "backends", lambda: {})
    with pytest.raises(TypeError, match=r"JAX's own jax\.experimental\.pallas\.tpu\.CompilerParams"
                       r".*Use pallas_tpu\.CompilerParams") as e:
        pl.pallas_call(copy_kernel, SDS((4,), jnp.float32), compiler_params=pltpu.CompilerParams())
    assert "pallas-frontend[jax]" not in str(e.value)
    with pytest.raises(TypeError, match=r"jax\.experimental\.pallas\.tpu\.InterpretParams.*"
                       r"Use pallas_tpu\.InterpretParams"):
        pl.pallas_call(copy_kernel, SDS((4,), jnp.float32), interpret=pltpu.InterpretParams())


@pytest.mark.parametrize("make", [lambda: pl.Blocked(0), lambda: pl.Blocked(-5),
                                  lambda: pl.Element(-4), lambda: pl.Element(0),
                                  lambda: pl.BoundedSlice(0), lambda: pl.Blocked(2.5)])
def test_bad_block_sizes_are_refused_when_constructed(make):
    with pytest.raises(ValueError, match="the block size must be a positive int"):
        make()


def test_negative_out_shape_and_scratch_dims_are_refused():
    with pytest.raises(ValueError, match=r"out_shape has shape \(4, -1\): every dim must be"):
        pl.pallas_call(copy_kernel, SDS((4, -1), jnp.float32))
    with pytest.raises(ValueError, match=r"scratch has shape \(-3,\)"):
        pl.ANY((-3,), jnp.float32)
    with pytest.raises(ValueError, match=r"scratch_shapes\[0\] has shape \(-2,\)"):
        pl.pallas_call(lambda x, o, s: None, SDS((4,), jnp.float32),
                       scratch_shapes=[SDS((-2,), jnp.float32)])(jnp.ones(4))


# --- forward mode -----------------------------------------------------------------

def poly_kernel(x_ref, y_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = x * x * y_ref[...] + 3.0 * x


def poly_call(n=32, bs=8):
    spec = pl.BlockSpec((bs,), lambda i: (i,))
    return pl.pallas_call(poly_kernel, SDS((n,), jnp.float32), grid=(n // bs,),
                          in_specs=[spec, spec], out_specs=spec)


def test_jacfwd(rng):
    x, y = rand(rng, 32), rand(rng, 32)
    jac = jax.jacfwd(lambda a: poly_call()(a, y))(x)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    np.testing.assert_allclose(jac, np.diag(2 * x64 * y64 + 3), rtol=1e-5, atol=1e-6)


def test_vmap_of_jvp_with_an_unbatched_primal(rng):
    x, y, dxs = rand(rng, 32), rand(rng, 32), rand(rng, 5, 32)
    f = poly_call()
    primal, tangents = jax.vmap(lambda t: jax.jvp(lambda a: f(a, y), (x,), (t,)),
                                out_axes=(None, 0))(dxs)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    np.testing.assert_allclose(primal, x64 * x64 * y64 + 3 * x64, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tangents, (2 * x64 * y64 + 3) * dxs, rtol=1e-5, atol=1e-5)


def test_linearize_runs_forward_mode(rng):
    x, y, dx = rand(rng, 32), rand(rng, 32), rand(rng, 32)
    out, f_lin = jax.linearize(lambda a: poly_call()(a, y), x)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    np.testing.assert_allclose(out, x64 * x64 * y64 + 3 * x64, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(f_lin(dx), (2 * x64 * y64 + 3) * dx, rtol=1e-5, atol=1e-5)


def test_jvp_of_a_kernel_with_an_integer_output(rng):
    x, dx = rand(rng, 16), rand(rng, 16)

    def kernel(x_ref, o_ref, n_ref):
        o_ref[...] = jnp.sin(x_ref[...])
        n_ref[...] = (x_ref[...] > 0).astype(jnp.int32)

    f = pl.pallas_call(kernel, (SDS((16,), jnp.float32), SDS((16,), jnp.int32)))
    (o, n), (do, dn) = jax.jvp(f, (x,), (dx,))
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(o, np.sin(x64), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(n, (x > 0).astype(np.int32))
    np.testing.assert_allclose(do, np.cos(x64) * dx, rtol=1e-5, atol=1e-6)
    assert dn.dtype == jax.dtypes.float0


def test_grad_without_custom_vjp_says_what_to_do(rng):
    x, y = rand(rng, 32), rand(rng, 32)
    with pytest.raises(NotImplementedError, match=r"poly_kernel.*wrap the call in jax.custom_vjp"):
        jax.grad(lambda a: poly_call()(a, y).sum())(x)


# --- shard_map with check_vma=True (the default) ------------------------------------

def _mesh():
    from jax.sharding import Mesh
    devices = jax.devices("cpu")
    assert len(devices) >= 4, "tests/conftest.py asks XLA for 4 CPU devices"
    return Mesh(np.array(devices[:4]), ("x",))


def _sharded(f, in_specs, out_specs):
    return jax.jit(jax.shard_map(f, mesh=_mesh(), in_specs=in_specs, out_specs=out_specs))


BLOCK8 = pl.BlockSpec((8,), lambda i: (i,))


def test_shard_map_python_scalar_and_program_id(rng):
    from jax.sharding import PartitionSpec as P
    x = rand(rng, 4 * 16)

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0 + pl.program_id(0).astype(jnp.float32)

    f = pl.pallas_call(kernel, SDS((16,), jnp.float32), grid=(2,), in_specs=[BLOCK8],
                       out_specs=BLOCK8)
    out = _sharded(f, P("x"), P("x"))(x)
    pid = np.tile(np.repeat([0.0, 1.0], 8), 4)
    np.testing.assert_allclose(out, 2 * x.astype(np.float64) + pid, rtol=1e-6)


def test_shard_map_sharded_meets_replicated_operand(rng):
    from jax.sharding import PartitionSpec as P
    x, w = rand(rng, 4 * 16), rand(rng, 16)

    def kernel(w_ref, x_ref, o_ref):       # the replicated operand comes first
        o_ref[...] = w_ref[...] * x_ref[...]

    f = pl.pallas_call(kernel, SDS((16,), jnp.float32), grid=(2,), in_specs=[BLOCK8, BLOCK8],
                       out_specs=BLOCK8)
    out = _sharded(f, (P(), P("x")), P("x"))(w, x)
    np.testing.assert_allclose(out, np.tile(w.astype(np.float64), 4) * x, rtol=1e-6)


def test_shard_map_zero_initialised_scratch_and_accumulator(rng):
    from jax.sharding import PartitionSpec as P
    x = rand(rng, 4 * 16)

    def kernel(x_ref, o_ref, acc_ref):
        @pl.when(pl.program_id(0) == 0)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)
            o_ref[...] = jnp.zeros_like(o_ref)
        acc_ref[...] += x_ref[...]
        o_ref[...] += acc_ref[...]

    f = pl.pallas_call(kernel, SDS((8,), jnp.float32), grid=(2,), in_specs=[BLOCK8],
                       out_specs=pl.BlockSpec((8,), lambda i: (0,)),
                       scratch_shapes=[pl.ANY((8,), jnp.float32)])
    out = _sharded(f, P("x"), P("x"))(x)
    blocks = x.astype(np.float64).reshape(4, 2, 8)
    expect = (blocks[:, 0] + (blocks[:, 0] + blocks[:, 1])).reshape(-1)   # acc after 1, then 2
    np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-6)


# --- out-of-block Ref accesses ------------------------------------------------------

def blocked_call(kernel, n=256, bs=128):
    spec = pl.BlockSpec((bs,), lambda i: (i,))
    return pl.pallas_call(kernel, SDS((n,), jnp.float32), grid=(n // bs,), in_specs=[spec],
                          out_specs=spec)


def test_static_index_outside_the_block_is_refused_naming_the_line(rng):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]
        o_ref[0] = x_ref[200]          # the block has 128 elements

    line = kernel.__code__.co_firstlineno + 2
    with pytest.raises(pl.RefIndexError, match=rf"test_hardening.py:{line}: the kernel reads the "
                       r"block Ref of args\[0\] at 200 in dim 0, but that dim has 128"):
        blocked_call(kernel)(rand(rng, 256))


def test_static_negative_index_counts_from_the_end_as_numpy(rng):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]
        o_ref[-1] = x_ref[-128] * 2     # block elements 127 and 0

    x = rand(rng, 256)
    want = x.astype(np.float64).reshape(2, 128)
    want[:, -1] = 2 * want[:, 0]
    np.testing.assert_allclose(np.asarray(blocked_call(kernel)(x)), want.reshape(-1), rtol=1e-6)

    def below(x_ref, o_ref):
        o_ref[-129] = 0.0               # past the start even counted from the end
    with pytest.raises(pl.RefIndexError, match=r"writes the block Ref of outputs at -129"):
        blocked_call(below)(x)


def test_static_slice_past_the_block_is_refused_naming_the_line(rng):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]
        o_ref[pl.ds(120, 16)] = jnp.zeros((16,), jnp.float32)

    line = kernel.__code__.co_firstlineno + 2
    with pytest.raises(pl.RefIndexError, match=rf"test_hardening.py:{line}: Out of bound slice"):
        blocked_call(kernel)(rand(rng, 256))


def test_dynamic_slice_past_the_block_raises_under_debug_checks(rng):
    x = rand(rng, 256)

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]
        o_ref[pl.ds(120 + pl.program_id(0), 8)] = jnp.zeros((8,), jnp.float32)  # i=1: 121..128

    line = kernel.__code__.co_firstlineno + 2
    call = blocked_call(kernel)
    jax.block_until_ready(call(x))         # checks off: runs (what it writes is unspecified)
    with pl.enable_debug_checks(True):     # the same call, now traced with checks
        with pytest.raises(pl.KernelCheckError, match=rf"Out-of-range Ref access at "
                           rf".*test_hardening.py:{line}: the kernel writes the block Ref of "
                           r"outputs with a dynamic index outside dim 0 \(size 128\)"):
            jax.block_until_ready(call(x))


def test_dynamic_index_in_a_loop_body_under_debug_checks(rng):
    x = rand(rng, 256)

    def reads_past_the_end(x_ref, o_ref):
        def body(j, c):
            o_ref[j] = x_ref[j * 2]          # j * 2 reaches 254
            return c
        jax.lax.fori_loop(0, 128, body, 0)

    def in_range(x_ref, o_ref):
        def body(j, c):
            o_ref[j] = x_ref[127 - j] + 1.0
            return c
        jax.lax.fori_loop(0, 128, body, 0)

    with pl.enable_debug_checks(True):
        with pytest.raises(pl.KernelCheckError, match=r"reads a Ref of shape \(128,\) with a "
                           r"dynamic index outside dim 0"):
            jax.block_until_ready(blocked_call(reads_past_the_end)(x))
        out = blocked_call(in_range)(x)
    expect = x.astype(np.float64).reshape(2, 128)[:, ::-1].reshape(-1) + 1.0
    np.testing.assert_allclose(out, expect, rtol=1e-6)
