"""Every public name of the seed's frontend API, each with a numeric check
against NumPy on fresh random data where it computes something."""

import dataclasses
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
from conftest import rand
from pallas_frontend.backend_api import API_VERSION

SDS = jax.ShapeDtypeStruct


def run1(kernel, x, out=None, **kw):
    return pl.pallas_call(kernel, out_shape=SDS(x.shape, x.dtype) if out is None else out, **kw)(x)


# --- utilities -----------------------------------------------------------------

def test_cdiv_align_next_power_of_2_strides(rng):
    a, b = (int(v) for v in rng.integers(1, 1000, 2))
    assert pl.cdiv(a, b) == -(-a // b)
    assert int(pl.cdiv(jnp.int32(a), jnp.int32(b))) == -(-a // b)
    assert pl.align_to(a, 8) % 8 == 0 and 0 <= pl.align_to(a, 8) - a < 8
    assert [pl.next_power_of_2(v) for v in (0, 1, 3, 8, 9)] == [1, 1, 4, 8, 16]
    with pytest.raises(ValueError, match="non-negative"):
        pl.next_power_of_2(-1)
    shape = tuple(int(v) for v in rng.integers(1, 6, 3))
    assert pl.strides_from_shape(shape) == tuple(s // 4 for s in np.zeros(shape, np.float32).strides)


def test_empty_empty_like_empty_ref_like_broadcast_to(rng):
    x = rand(rng, 8, 16)

    def kernel(x_ref, o_ref):
        scratch = pl.empty((8, 16), jnp.float32)          # contents unspecified: overwrite
        scratch = scratch.at[...].set(x_ref[...])
        tree = pl.empty_like({"a": SDS((8,), jnp.float32)})
        assert tree["a"].shape == (8,)
        r = pl.empty_ref_like(SDS((8, 16), jnp.float32))
        r[...] = scratch * 3.0
        o_ref[...] = r[...] + pl.broadcast_to(x_ref[0, :], (8, 16))

    out = run1(kernel, x)
    np.testing.assert_allclose(out, 3 * x.astype(np.float64) + x[0], rtol=1e-6)


def test_empty_ref_like_keeps_memory_space():
    ref = jax.jit(lambda: pl.empty_ref_like(pl.ANY((4,), jnp.float32)))
    assert isinstance(pl.ANY((4,), jnp.float32), pl.MemoryRef)
    assert pl.MemorySpace.ANY((2, 3), jnp.int8).shape == (2, 3)
    del ref


# --- control flow ----------------------------------------------------------------

def test_loop_without_and_with_carry_step_unroll(rng):
    x = rand(rng, 16, 8)

    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.zeros_like(o_ref)

        @pl.loop(0, 16, step=2)
        def _(i):                              # even rows, doubled
            o_ref[pl.ds(i, 1), :] = 2.0 * x_ref[pl.ds(i, 1), :]

        @pl.loop(1, 16, step=2, unroll=2)
        def _(i):                              # odd rows, negated
            o_ref[pl.ds(i, 1), :] = -x_ref[pl.ds(i, 1), :]

        total = pl.loop(0, 16, init_carry=jnp.zeros((8,), jnp.float32))(
            lambda i, acc: acc + x_ref[i, :])
        o_ref[0, :] = total

    out = np.asarray(run1(kernel, x))
    x64 = x.astype(np.float64)
    expect = np.where((np.arange(16) % 2 == 0)[:, None], 2 * x64, -x64)
    expect[0] = x64.sum(0)
    np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-5)


def test_loop_with_traced_bounds_and_negative_step(rng):
    x = rand(rng, 8)

    def kernel(x_ref, o_ref):
        n = pl.program_id(0) + 8                 # traced upper bound
        acc = pl.loop(0, n, init_carry=jnp.float32(0))(lambda i, a: a + x_ref[i])
        back = pl.loop(7, -1, step=-1, init_carry=jnp.float32(0))(lambda i, a: a * 0.5 + x_ref[i])
        o_ref[0] = acc
        o_ref[1] = back

    out = np.asarray(pl.pallas_call(kernel, out_shape=SDS((2,), jnp.float32), grid=(1,))(x))
    back = 0.0
    for i in range(7, -1, -1):
        back = back * 0.5 + float(x[i])
    np.testing.assert_allclose(out, [x.astype(np.float64).sum(), back], rtol=1e-5)


@pytest.mark.parametrize("step", [1, 2, 3])
def test_loop_traced_bounds_static_step_runs_range_and_matches_jax_jaxpr(rng, step):
    """A static positive step with traced bounds: the trip count is JAX's own
    (ceil by truncating division, no max with 0), so ours' jaxpr is JAX's; a
    zero or negative span still runs nothing."""
    from jax.experimental import pallas as jax_pl
    x = rand(rng, 16)
    bounds = [(int(a), int(b)) for a, b in rng.integers(-4, 17, (6, 2))] + [(5, 5), (9, 2)]

    def kernel(x_ref, o_ref):
        for k, (a, b) in enumerate(bounds):
            lo, hi = pl.program_id(0) + a, pl.program_id(0) + b
            o_ref[k] = pl.loop(lo, hi, step=step, init_carry=jnp.float32(0))(
                lambda i, acc: acc * 0.5 + x_ref[jnp.clip(i, 0, 15)] + i.astype(jnp.float32))

    out = np.asarray(pl.pallas_call(kernel, out_shape=SDS((len(bounds),), jnp.float32),
                                    grid=(1,))(x))
    want = []
    for a, b in bounds:
        acc = 0.0
        for i in range(a, b, step):
            acc = acc * 0.5 + float(x[min(max(i, 0), 15)]) + i
        want.append(acc)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)

    def loop_of(loop_fn):
        def f(lo, hi):
            return loop_fn(lo, hi, step=step, init_carry=jnp.int32(0))(lambda i, c: c + i)
        return str(jax.make_jaxpr(f)(jnp.int32(1), jnp.int32(9)))
    assert loop_of(pl.loop) == loop_of(jax_pl.loop)


def test_when_python_bool_and_traced(rng):
    x = rand(rng, 4, 8)

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

        @pl.when(True)
        def _():
            o_ref[...] += 1.0

        @pl.when(False)
        def _():
            o_ref[...] += 1000.0

        @pl.when(pl.program_id(0) >= 2)
        def _():
            o_ref[...] *= 10.0

    spec = pl.BlockSpec((None, 8), lambda i: (i, 0))
    out = run1(kernel, x, grid=(4,), in_specs=[spec], out_specs=spec)
    expect = x.astype(np.float64) + 1
    expect[2:] *= 10
    np.testing.assert_allclose(out, expect, rtol=1e-6)


def test_run_scoped_and_with_scoped(rng):
    x = rand(rng, 8, 8)

    def kernel(x_ref, o_ref):
        def body(tmp, *, other):
            tmp[...] = x_ref[...] * 2.0
            other[...] = tmp[...].sum(0)
            return other[...]
        col = pl.run_scoped(body, pl.ANY((8, 8), jnp.float32), other=SDS((8,), jnp.float32))

        @pl.with_scoped(pl.ANY((8,), jnp.float32))
        def add_col(scale, t):          # the caller's args come first, then the Refs
            t[...] = col + 1.0
            o_ref[...] = x_ref[...] * scale + t[...]

        assert callable(add_col)        # JAX's idiom: the decorator returns a function
        add_col(1.0)

    out = run1(kernel, x)
    np.testing.assert_allclose(out, x.astype(np.float64) + 2 * x.astype(np.float64).sum(0) + 1,
                               rtol=1e-5, atol=1e-5)


def test_multiple_of_is_identity(rng):
    x = rand(rng, 64)

    def kernel(x_ref, o_ref):
        @pl.loop(0, 4)
        def _(k):
            start = pl.multiple_of(k * 16, 16)
            o_ref[pl.ds(start, 16)] = x_ref[pl.ds(start, 16)] * 3.0

    np.testing.assert_allclose(run1(kernel, x), 3 * x.astype(np.float64), rtol=1e-6)


def test_get_global_only_inside_a_kernel():
    # (inside a kernel: tests/test_hardening.py::test_get_global_persists_across_grid_points...)
    with pytest.raises(RuntimeError, match="pl.get_global can only be called inside a kernel"):
        pl.get_global(pl.ANY((1,), jnp.int32))


# --- debugging -------------------------------------------------------------------

def test_debug_print(rng, capfd):
    x = rand(rng, 4)

    def kernel(x_ref, o_ref):
        pl.debug_print("program {} sum {}", pl.program_id(0), x_ref[...].sum())
        o_ref[...] = x_ref[...]

    spec = pl.BlockSpec((2,), lambda i: (i,))
    out = run1(kernel, x, grid=(2,), in_specs=[spec], out_specs=spec)
    jax.effects_barrier()
    printed = capfd.readouterr().out
    assert "program 0 sum" in printed and "program 1 sum" in printed
    assert f"{float(x[2:].sum()):.4f}"[:5] in printed
    np.testing.assert_array_equal(out, x)


def test_debug_print_checks_placeholders():
    def kernel(o_ref):
        pl.debug_print("two {} {}", 1)
    with pytest.raises(ValueError, match="2 placeholders but 1 arguments"):
        pl.pallas_call(kernel, out_shape=SDS((1,), jnp.float32))()


def test_debug_check_off_by_default_and_on_when_enabled(rng):
    x = np.abs(rand(rng, 8)) + 1.0

    def kernel(x_ref, o_ref):
        pl.debug_check(jnp.all(x_ref[...] < 0), "values must be negative")
        o_ref[...] = x_ref[...]

    assert pl.enable_debug_checks.value is False
    np.testing.assert_array_equal(run1(kernel, x), x)           # disabled: no check
    with pl.enable_debug_checks(True):
        assert pl.enable_debug_checks.value is True
        with pytest.raises(Exception, match="values must be negative"):
            jax.block_until_ready(run1(kernel, x))
        np.testing.assert_array_equal(run1(kernel, -x), -x)      # holds: runs normally


# --- semaphores ------------------------------------------------------------------

def test_semaphores_in_the_interpreter(rng):
    x = rand(rng, 4)

    def kernel(x_ref, o_ref, sem):
        sem[...] = jnp.zeros((), jnp.int32)
        pl.semaphore_signal(sem, 3)
        pl.semaphore_wait(sem, 2)
        o_ref[...] = x_ref[...] * pl.semaphore_read(sem).astype(jnp.float32)   # 3 - 2 = 1

    out = run1(kernel, x, scratch_shapes=[pl.ANY((), jnp.int32)])
    np.testing.assert_array_equal(out, x)

    def blocked(x_ref, o_ref, sem):
        sem[...] = jnp.zeros((), jnp.int32)
        pl.semaphore_wait(sem, 1)
        o_ref[...] = x_ref[...]
    with pytest.raises(Exception, match="semaphore_wait would block forever"):
        jax.block_until_ready(run1(blocked, x, scratch_shapes=[pl.ANY((), jnp.int32)]))


def test_semaphore_array_views_with_traced_index(rng):
    x = rand(rng, 4)

    def kernel(x_ref, o_ref, sems):
        sems[...] = jnp.zeros((2,), jnp.int32)
        i = pl.program_id(0) % 2                           # a traced index into the array
        pl.semaphore_signal(sems.at[i], 5)
        pl.semaphore_signal(sems.at[1 - i], 2)
        pl.semaphore_wait(sems.at[i], 4)                   # leaves 1 in sems[i]
        got = pl.semaphore_read(sems.at[i]) * 10 + pl.semaphore_read(sems.at[1 - i])
        o_ref[...] = x_ref[...] * got.astype(jnp.float32)   # 12

    out = run1(kernel, x, grid=(2,), scratch_shapes=[pl.ANY((2,), jnp.int32)])
    np.testing.assert_allclose(out, 12 * x.astype(np.float64), rtol=1e-6)
    with pytest.raises(ValueError, match=r"array of \(2,\) semaphores; pick one"):
        run1(lambda x_ref, o_ref, sems: pl.semaphore_signal(sems), x,
             scratch_shapes=[pl.ANY((2,), jnp.int32)])


# --- block dims ----------------------------------------------------------------------

def test_element_dims_with_padding_sliding_window(rng):
    """Each output block of 8 sums a window of 10 inputs starting 1 before it."""
    x = rand(rng, 32)

    def kernel(x_ref, o_ref):
        w = x_ref[...]
        w = jnp.where(jnp.isnan(w), 0.0, w)                        # padding reads unspecified
        o_ref[...] = jnp.stack([w[j:j + 3].sum() for j in range(8)])

    out = pl.pallas_call(
        kernel, out_shape=SDS((32,), jnp.float32), grid=(4,),
        in_specs=[pl.BlockSpec((pl.Element(10, (1, 1)),), lambda i: (i * 8,))],
        out_specs=pl.BlockSpec((8,), lambda i: (i,)))(x)
    padded = np.concatenate([[0.0], x.astype(np.float64), [0.0]])
    expect = np.array([padded[k:k + 3].sum() for k in range(32)])
    np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-6)


def test_squeezed_and_none_dims(rng):
    x = rand(rng, 3, 4, 16)

    def kernel(x_ref, o_ref):
        assert x_ref.shape == (16,)
        o_ref[...] = x_ref[...] * 2.0

    for sq in (None, pl.Squeezed(), pl.squeezed):
        spec = pl.BlockSpec((sq, sq, 16), lambda i, j: (i, j, 0))
        out = run1(kernel, x, grid=(3, 4), in_specs=[spec], out_specs=spec)
        np.testing.assert_allclose(out, 2 * x.astype(np.float64), rtol=1e-6)


def test_bounded_slice_ragged_rows(rng):
    """Grid point i covers rows [starts[i], starts[i]+sizes[i]) of a ragged layout,
    visited back to front, so an unmasked write of a block's 8 rows would
    clobber rows an earlier point wrote."""
    x = rand(rng, 20, 4)
    starts, sizes = [15, 8, 5, 0], [5, 7, 3, 5]

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 100.0 * (pl.program_id(0) + 1).astype(jnp.float32)

    def index_map(i):
        # index maps may not capture arrays, so the tables are spelled as selects
        start = jnp.select([i == k for k in range(4)], starts)
        size = jnp.select([i == k for k in range(4)], sizes)
        return pl.ds(start, size), 0

    spec = pl.BlockSpec((pl.BoundedSlice(8), 4), index_map)
    out = pl.pallas_call(kernel, out_shape=SDS(x.shape, x.dtype), grid=(4,), in_specs=[spec],
                         out_specs=spec)(x)
    expect = x.astype(np.float64).copy()
    for i, (s0, n) in enumerate(zip(starts, sizes)):
        expect[s0:s0 + n] += 100.0 * (i + 1)
    np.testing.assert_allclose(out, expect, rtol=1e-6)


def test_blocked_dim_objects_and_whole_array_default(rng):
    x, w = rand(rng, 16, 8), rand(rng, 8)
    spec = pl.BlockSpec((pl.Blocked(4), 8), lambda i: (i, 0))
    out = pl.pallas_call(lambda a, b, o: o.__setitem__(..., a[...] - b[...]),
                         out_shape=SDS(x.shape, x.dtype), grid=(4,),
                         in_specs=[spec, pl.BlockSpec()],        # w: whole array, block 0
                         out_specs=spec)(x, w)
    np.testing.assert_allclose(out, x.astype(np.float64) - w, rtol=1e-6)


# --- specs and params ------------------------------------------------------------------

def test_blockspec_fields_and_buffered():
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0), memory_space=pl.ANY,
                        pipeline_mode=pl.Buffered(3))
    assert spec.pipeline_mode.buffer_count == 3 and spec.memory_space is pl.ANY
    assert spec.replace(block_shape=(16, 128)).block_shape == (16, 128)
    with pytest.raises(TypeError):
        pl.BlockSpec((8,), lambda i: (i,), pl.ANY)      # memory_space is keyword-only
    with pytest.raises(ValueError, match="buffer_count"):
        pl.Buffered(0)
    assert pl.HOST is pl.MemorySpace.HOST and pl.ANY is pl.MemorySpace.ANY


def test_gridspec_forms():
    assert pl.GridSpec(4).grid == (4,)
    gs = pl.GridSpec((("a", 2), ("b", 3)))
    assert gs.grid == (2, 3) and gs.grid_names == ("a", "b")
    assert pl.GridSpec([2, 3], in_specs=[None]).in_specs == (None,)


def test_compiler_params_and_cost_estimate_and_metadata(rng, capsys):
    @dataclasses.dataclass(frozen=True)
    class MyParams(pl.CompilerParams):
        num_widgets: int = 2

    p = MyParams().replace(num_widgets=5)
    assert p.num_widgets == 5
    ce = pl.CostEstimate(flops=10, transcendentals=0, bytes_accessed=64)
    assert b'"flops": 10' in ce.to_json()
    x = rand(rng, 16)
    out = run1(lambda a, o: o.__setitem__(..., a[...] * 2.0), x, cost_estimate=ce,
               metadata={"owner": "tests"}, name="doubler", debug=True)
    np.testing.assert_allclose(out, 2 * x.astype(np.float64), rtol=1e-6)
    printed = capsys.readouterr().out
    assert "KernelIR v%d.%d 'doubler'" % API_VERSION in printed and "backend: interpret" in printed


def test_metadata_takes_numbers_as_jax_does(rng):
    # tokamax's gmm_v2 passes int and float values; a list is refused before anything runs
    x = rand(rng, 16)
    out = run1(lambda a, o: o.__setitem__(..., a[...] + 1.0), x,
               metadata={"tile_m": 128, "scale": 0.5, "owner": "tests"})
    np.testing.assert_allclose(out, x.astype(np.float64) + 1.0, rtol=1e-6)
    with pytest.raises(TypeError, match="str, int or float values"):
        run1(lambda a, o: o.__setitem__(..., a[...]), x, metadata={"tiles": [1, 2]})


def test_interpret_true_runs_the_reference_interpreter(rng):
    x = rand(rng, 32)
    out = run1(lambda a, o: o.__setitem__(..., jnp.tanh(a[...])), x, interpret=True)
    np.testing.assert_allclose(out, np.tanh(x.astype(np.float64)), rtol=1e-5, atol=1e-6)


def test_pallas_call_p_is_the_primitive(rng):
    x = rand(rng, 8)
    jaxpr = jax.make_jaxpr(lambda x: run1(lambda a, o: o.__setitem__(..., a[...]), x))(x)
    assert "pallas_call" in str(jaxpr)
    assert pl.pallas_call_p.name == "pallas_call"


# --- pl.kernel and the deprecations ---------------------------------------------------------

@dataclasses.dataclass
class CoreMesh:
    shape: dict


def test_kernel_over_a_mesh(rng):
    x = rand(rng, 4, 32)

    @pl.kernel(out_type=SDS((4, 32), jnp.float32), mesh=CoreMesh({"core": 4}))
    def per_core(x_ref, o_ref):
        c = pl.program_id("core")
        o_ref[pl.ds(c, 1), :] = x_ref[pl.ds(c, 1), :] * (c + 1).astype(jnp.float32)

    np.testing.assert_allclose(per_core(x), x.astype(np.float64) * np.arange(1, 5)[:, None], rtol=1e-6)


def test_core_map_warns_and_still_works(rng):
    x = rand(rng, 8)
    with pytest.warns(DeprecationWarning, match="use pl.kernel"):
        core_map = pl.core_map

    @jax.jit
    def f(x):
        ref = jax.new_ref(x)

        @core_map(CoreMesh({"c": 1}))
        def _():
            ref[...] = ref[...] * 2.0 + 1.0
        return ref[...]

    np.testing.assert_allclose(f(x), 2 * x.astype(np.float64) + 1, rtol=1e-6)


def test_reciprocal_warns_with_replacement(rng):
    x = np.abs(rand(rng, 8)) + 0.5
    with pytest.warns(DeprecationWarning, match="pallas_tpu.reciprocal"):
        recip = pl.reciprocal
    np.testing.assert_allclose(recip(x, approx=True), 1 / x.astype(np.float64), rtol=1e-6)


@pytest.mark.parametrize("name,replacement", [("dot", "jax.numpy.dot"),
                                              ("debug_checks_enabled", "pl.enable_debug_checks.value")])
def test_removed_names_raise_attribute_error(name, replacement):
    with pytest.raises(AttributeError, match=replacement.replace(".", r"\.")):
        getattr(pl, name)


def test_slice_and_ds():
    s = pl.ds(3, 4)
    assert isinstance(s, pl.Slice) and (s.start, s.size) == (3, 4)
    assert pl.dslice is pl.ds
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pl.Slice(0, 2).size == 2


@pytest.mark.parametrize("shape", [(), (1,)])
def test_grid_size_from_a_concrete_jax_array_captured_by_jit(rng, shape):
    """JAX's test_dynamic_grid_and_aliasing makes its grid size with
    jax.random.randint outside the jit that launches the kernel: a concrete
    array, not a tracer, which ours once reshaped with jnp inside the trace
    (ConcretizationTypeError)."""
    steps = int(rng.integers(3, 9))
    size = jnp.full(shape, steps, jnp.int32)
    x = rand(rng, 8, 128)

    def kernel(x_ref, o_ref):
        @pl.when(pl.program_id(0) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
        o_ref[...] += x_ref[...]

    @jax.jit
    def f(x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(size,), in_specs=[pl.BlockSpec((8, 128), lambda i: (0, 0))],
                              out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
                              interpret=True)(x)
    np.testing.assert_allclose(f(x), steps * np.asarray(x, np.float64), rtol=1e-6)
