"""``plgpu.alloc_semaphore``: GMEM semaphores made outside a kernel and passed
to ``pallas_mgpu.kernel`` as operands (and ``jax.Ref`` operands in general).

Compared with JAX's ``plgpu.alloc_semaphore`` + ``plgpu.kernel`` on the same
inputs: lowered for cuda over abstract H100s (the same GPU, NVVM and LLVM
operations, as often, and the same inline PTX), and run in JAX's Mosaic GPU
interpret mode and under ``interpret=True`` wherever JAX's runs (failing with
JAX's error where JAX's fails)."""

import re
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as jpl
from jax_window import jplgpu  # JAX's plgpu (with 0.10's GPU interpret API)

import pallas_frontend as pf
import pallas_mgpu
from pallas_mgpu import _jax_private
from jax_window import plgpu_op

# the tests that compare with JAX's own alloc_semaphore
JAX_ALLOC_SEMAPHORE = plgpu_op("alloc_semaphore")

P = jax.sharding.PartitionSpec
H100 = jax.sharding.AbstractDevice(device_kind="NVIDIA H100 80GB HBM3", platform="gpu",
                                   num_cores=132)
SIDES = {"jax": (jplgpu, jpl), "ours": (pallas_mgpu, pf)}


def _bodies(plgpu, pl):
    """Kernels taking (semaphores, x) as JAX's alloc_semaphore docstring passes them."""
    def unused(sems, x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0 + 1.0

    def signal_wait(sems, x_ref, o_ref):
        pl.semaphore_signal(sems.at[0], 3)
        pl.semaphore_wait(sems.at[0], 3)
        o_ref[...] = x_ref[...] + 1.0

    def mgpu_signal_wait(sems, x_ref, o_ref):
        plgpu.semaphore_signal(sems.at[1], 2)
        plgpu.semaphore_wait(sems.at[1], 2, decrement=False)
        o_ref[...] = x_ref[...] - 1.0

    def read(sems, x_ref, o_ref):
        o_ref[...] = x_ref[...] + pl.semaphore_read(sems.at[1]).astype(jnp.float32)
    return {"unused": unused, "signal_wait": signal_wait, "mgpu_signal_wait": mgpu_signal_wait,
            "read": read}


def _with_new_semaphores(side, body_name, interpret=None, shape=(2,)):
    plgpu, pl = SIDES[side]
    body = _bodies(plgpu, pl)[body_name]

    def f(x):
        sems = plgpu.alloc_semaphore(shape)
        kernel = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              interpret=interpret)
        return kernel(sems, x)
    return f


def _summary(module: str):
    ops = Counter(re.findall(r'"stable_mosaic_gpu\.((?:nvvm|gpu|llvm)\.[a-z_.0-9]+)"\(', module))
    asm = Counter(re.findall(r'asm_string = "([^"]*)"', module))
    return ops, asm


def _lowered(fn, shape, dtype, devices=1, spec=P()):
    mesh = jax.sharding.AbstractMesh((devices,), ("x",), abstract_device=H100)
    if devices > 1:
        fn = jax.shard_map(fn, mesh=mesh, in_specs=P("x"), out_specs=spec, check_vma=False)
    x = jax.ShapeDtypeStruct(shape, dtype, sharding=jax.sharding.NamedSharding(mesh, spec))
    with jax.sharding.use_abstract_mesh(mesh):
        lowered = jax.jit(fn).trace(x).lower(lowering_platforms=("cuda",))
    return [_summary(m) for m in _jax_private.mosaic_gpu_modules(lowered)]


def test_alloc_semaphore_is_a_zeroed_int32_ref_in_a_semaphore_space():
    got = {}

    @jax.jit
    def f():
        sems = pallas_mgpu.alloc_semaphore((3,))
        got["aval"] = jax.typeof(sems)
        return sems[...]
    assert np.array_equal(f(), np.zeros(3, np.int32))
    aval = got["aval"]
    assert aval.shape == (3,) and aval.dtype == jnp.int32
    assert aval.memory_space == pallas_mgpu.SemaphoreType.REGULAR((3,))
    assert jax.jit(lambda: pallas_mgpu.alloc_semaphore()[...])().shape == ()
    with pytest.raises(ValueError, match="negative"):
        pallas_mgpu.alloc_semaphore((-1,))


@JAX_ALLOC_SEMAPHORE
@pytest.mark.parametrize("body", ["unused", "signal_wait", "mgpu_signal_wait", "read"])
def test_kernel_on_alloc_semaphore_lowers_for_h100_as_jax(body):
    theirs = _lowered(_with_new_semaphores("jax", body), (2, 128), jnp.float32)
    ours = _lowered(_with_new_semaphores("ours", body), (2, 128), jnp.float32)
    assert ours == theirs
    if body != "unused":    # the semaphore really is used (an atomic or acquiring load)
        assert any(".sys." in s for s in ours[0][1]), ours[0][1]


def _remote_kernel(side):
    """JAX's docstring pattern: one semaphore per device, made outside the kernel;
    each device signals its slot on its peer, then waits on its own."""
    plgpu, pl = SIDES[side]

    def body(sems, x_ref, o_ref):
        me = jax.lax.axis_index("x")
        plgpu.semaphore_signal(sems.at[me], 1, device_id={"x": 1 - me})
        pl.semaphore_wait(sems.at[1 - me], 1)
        o_ref[...] = x_ref[...] + 1.0

    def f(x):
        sems = plgpu.alloc_semaphore((2,))
        return plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                            grid=(1,), grid_names=("blocks",))(sems, x)
    return f


@JAX_ALLOC_SEMAPHORE
def test_remote_signals_on_alloc_semaphore_lower_as_jax_over_two_h100s():
    theirs = _lowered(_remote_kernel("jax"), (256,), jnp.float32, devices=2, spec=P("x"))
    ours = _lowered(_remote_kernel("ours"), (256,), jnp.float32, devices=2, spec=P("x"))
    assert ours == theirs
    assert any("atom" in s or "red" in s for s in ours[0][1]), ours[0][1]


def _two_kernels(side):
    """A semaphore outliving one kernel: the first signals, the second waits."""
    plgpu, pl = SIDES[side]

    def first(sems, x_ref, o_ref):
        pl.semaphore_signal(sems.at[0], 2)
        o_ref[...] = x_ref[...] + 1.0

    def second(sems, x_ref, o_ref):
        pl.semaphore_wait(sems.at[0], 2)
        o_ref[...] = x_ref[...] * 3.0

    def f(x):
        sems = plgpu.alloc_semaphore((1,))
        out = jax.ShapeDtypeStruct(x.shape, x.dtype)
        y = plgpu.kernel(first, out_type=out)(sems, x)
        return plgpu.kernel(second, out_type=out)(sems, y)
    return f


@JAX_ALLOC_SEMAPHORE
def test_a_semaphore_shared_by_two_kernels_lowers_as_jax():
    theirs = _lowered(_two_kernels("jax"), (2, 128), jnp.float32)
    ours = _lowered(_two_kernels("ours"), (2, 128), jnp.float32)
    assert len(ours) == 2 and ours == theirs


def _pl_kernel_over_a_mesh(side):
    """``pl.kernel(body, mesh=plgpu.Mesh(...))`` on a semaphore from alloc_semaphore."""
    plgpu, pl = SIDES[side]

    def body(sems, x_ref, o_ref):
        pl.semaphore_signal(sems.at[1], 2)
        pl.semaphore_wait(sems.at[1], 2)
        o_ref[...] = x_ref[...] + 1.0

    def f(x):
        sems = plgpu.alloc_semaphore((2,))
        return pl.kernel(body, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                         mesh=plgpu.Mesh(grid=(1,), grid_names=("blocks",)))(sems, x)
    return f


@JAX_ALLOC_SEMAPHORE
def test_pl_kernel_over_a_mgpu_mesh_takes_alloc_semaphore_as_jax():
    theirs = _lowered(_pl_kernel_over_a_mesh("jax"), (2, 128), jnp.float32)
    ours = _lowered(_pl_kernel_over_a_mesh("ours"), (2, 128), jnp.float32)
    assert ours == theirs
    assert any(".sys." in s for s in ours[0][1]), ours[0][1]


@JAX_ALLOC_SEMAPHORE
def test_jaxs_own_semaphore_ref_is_taken_too():
    def ours_on_jaxs(x):
        body = _bodies(pallas_mgpu, pf)["signal_wait"]
        return pallas_mgpu.kernel(body, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype))(
            jplgpu.alloc_semaphore((2,)), x)
    theirs = _lowered(_with_new_semaphores("jax", "signal_wait"), (2, 128), jnp.float32)
    assert _lowered(ours_on_jaxs, (2, 128), jnp.float32) == theirs


def _run(side, body, interpret, x):
    try:
        return np.asarray(jax.jit(_with_new_semaphores(side, body, interpret))(x))
    except Exception as e:     # JAX's interpreters cannot run every kernel here
        return e


@JAX_ALLOC_SEMAPHORE
@pytest.mark.parametrize("body", ["unused", "signal_wait", "read"])
def test_gpu_interpret_mode_runs_where_jaxs_does(body, rng):
    x = jnp.asarray(rng.standard_normal((2, 128)), jnp.float32)
    theirs = _run("jax", body, jplgpu.InterpretGPUParams(), x)
    ours = _run("ours", body, pallas_mgpu.InterpretParams(), x)
    if isinstance(theirs, Exception):
        # JAX 0.12's GPU interpreter signals or reads no GMEM semaphore
        assert isinstance(ours, type(theirs)), ours
        assert str(theirs).splitlines()[0] in str(ours)
    else:
        np.testing.assert_array_equal(ours, theirs)
        np.testing.assert_allclose(ours, np.asarray(x, np.float64) * 2 + 1, rtol=1e-6)
    if body == "unused":
        assert not isinstance(theirs, Exception)


@JAX_ALLOC_SEMAPHORE
@pytest.mark.parametrize("body", ["unused", "read"])
def test_interpret_true_runs_as_jaxs(body, rng):
    x = jnp.asarray(rng.standard_normal((2, 128)), jnp.float32)
    theirs = _run("jax", body, True, x)
    ours = _run("ours", body, True, x)
    assert not isinstance(theirs, Exception), theirs
    np.testing.assert_array_equal(ours, theirs)


def test_counts_outlive_the_kernel_under_the_builtin_interpreter(rng):
    # JAX's interpreters cannot signal a GMEM semaphore; the built-in one can
    x = jnp.asarray(rng.standard_normal((2, 128)), jnp.float32)
    inc = int(rng.integers(1, 9))

    def signal(sems, x_ref, o_ref):
        pf.semaphore_signal(sems.at[1], inc)
        o_ref[...] = x_ref[...]

    def read(sems, x_ref, o_ref):
        o_ref[...] = x_ref[...] + pf.semaphore_read(sems.at[1]).astype(jnp.float32)

    @jax.jit
    def f(x):
        sems = pallas_mgpu.alloc_semaphore((2,))
        out = jax.ShapeDtypeStruct(x.shape, x.dtype)
        y = pallas_mgpu.kernel(signal, out_type=out, interpret=True)(sems, x)
        return pallas_mgpu.kernel(read, out_type=out, interpret=True)(sems, y), sems[...]
    y, counts = f(x)
    np.testing.assert_array_equal(counts, [0, inc])
    np.testing.assert_allclose(y, np.asarray(x, np.float64) + inc, rtol=1e-6)


@JAX_ALLOC_SEMAPHORE
@pytest.mark.parametrize("interpret", ["gpu", "builtin"])
def test_a_jax_ref_operand_is_updated_in_place_as_under_jax(interpret, rng):
    x = jnp.asarray(rng.standard_normal((2, 128)), jnp.float32)
    acc0 = jnp.asarray(rng.standard_normal((2, 128)), jnp.float32)

    def run(side):
        plgpu, _ = SIDES[side]
        params = {"gpu": plgpu.InterpretGPUParams() if side == "jax"
                  else pallas_mgpu.InterpretParams(), "builtin": True}[interpret]

        def body(x_ref, acc_ref, o_ref):
            acc_ref[...] = acc_ref[...] + x_ref[...]
            o_ref[...] = x_ref[...] * 2.0

        @jax.jit
        def f(x, acc0):
            acc = jax.new_ref(acc0)
            o = plgpu.kernel(body, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
                             interpret=params)(x, acc)
            return o, acc[...]
        return f(x, acc0)
    (o_jax, acc_jax), (o_ours, acc_ours) = run("jax"), run("ours")
    np.testing.assert_array_equal(o_ours, o_jax)
    np.testing.assert_array_equal(acc_ours, acc_jax)
    np.testing.assert_allclose(acc_ours, np.asarray(acc0, np.float64) + np.asarray(x, np.float64),
                               rtol=1e-6)
