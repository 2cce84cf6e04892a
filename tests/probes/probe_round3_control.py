"""Probe, round 3 (issue 32): control flow with odd trip counts, scoped and
scratch buffers, masked loads/stores, pl.ds edges, atomics, transformations
(vmap, grad, jvp, scan, threads), debug_print/debug_check, pl.kernel meshes,
matmuls, and compiler/interpret parameters with bad values, on each
interpreter that takes them.

References: NumPy (float64) or the same kernel under JAX's Pallas
``interpret=True``; a case whose input must be refused has none. Cases that
print, switch process-wide state or may hang run in their own process; cases
on a plugin's interpreter are ``slow``."""

import dataclasses
import functools
import importlib
import threading

import jax
import jax.experimental.pallas as jpl
import jax.numpy as jnp
import numpy as np
from jax import lax

import pallas_frontend as pl
from probes.common import Case
from probes.probe_wrong_results import _capture_stdout
from probes.probe_round3_structure import NEEDS, _named, _sds, _x, interpret_of

F32 = jnp.float32
ALL4 = ("builtin", "triton", "tpu", "mgpu")
ALL3 = ("builtin", "triton", "tpu")
BT = ("builtin", "triton")
BP = ("builtin", "tpu")
B = ("builtin",)
SHAPE = (8, 128)


def _call(interp, kernel, out_shape, **kw):
    return pl.pallas_call(kernel, out_shape=out_shape, interpret=interpret_of(interp), **kw)


# --- control flow ---------------------------------------------------------------------

def fori_static(rng, interp, lo, hi):
    x = _x(rng, *SHAPE)

    @_named("k_fori_static")
    def kernel(x_ref, o_ref):
        o_ref[...] = lax.fori_loop(lo, hi, lambda i, v: v * 0.5 + i.astype(F32), x_ref[...])
    want = x.astype(np.float64)
    for i in range(lo, hi):
        want = want * 0.5 + i
    return (lambda: _call(interp, kernel, _sds(SHAPE))(x)), want


def fori_dynamic(rng, interp, n):
    x = _x(rng, *SHAPE)

    @_named("k_fori_dynamic")
    def kernel(n_ref, x_ref, o_ref):
        o_ref[...] = lax.fori_loop(0, n_ref[0], lambda i, v: v + 1.5, x_ref[...])
    want = x + 1.5 * max(n, 0)
    return (lambda: _call(interp, kernel, _sds(SHAPE))(np.array([n], np.int32), x)), want


def while_doubling(rng, interp):
    x = np.abs(_x(rng, *SHAPE)) + 0.1

    @_named("k_while_odd")
    def kernel(x_ref, o_ref, c_ref):
        def cond(c):
            return jnp.max(c[1]) < 1000.0

        def body(c):
            return c[0] + 1, c[1] * 3
        n, v = lax.while_loop(cond, body, (jnp.int32(0), x_ref[...]))
        o_ref[...] = v
        c_ref[...] = jnp.full(c_ref.shape, n, jnp.int32)
    v, n = x.astype(np.float64), 0
    while v.max() < 1000.0:
        v, n = v * 3, n + 1
    f = _call(interp, kernel, (_sds(SHAPE), _sds((8, 128), jnp.int32)))
    return (lambda: f(x)), (v, np.full((8, 128), n, np.int32))


def pl_loop_step(rng, interp, lo, hi, step):
    x = _x(rng, *SHAPE)

    def make(m):
        @_named("k_pl_loop")
        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...]

            @m.loop(lo, hi, step=step)
            def _(i):
                o_ref[...] = o_ref[...] * 0.5 + i.astype(F32)
        return kernel
    ours = _call(interp, make(pl), _sds(SHAPE))
    theirs = jpl.pallas_call(make(jpl), out_shape=_sds(SHAPE), interpret=True)
    return (lambda: ours(x)), np.asarray(theirs(x))


def switch_by_program(rng, interp):
    x = _x(rng, 24, 128)

    @_named("k_switch")
    def kernel(x_ref, o_ref):
        branches = [lambda v: v + 1, lambda v: v * v, lambda v: -v]
        o_ref[...] = lax.switch(pl.program_id(0) % 3, branches, x_ref[...])
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    f = _call(interp, kernel, _sds((24, 128)), grid=(3,), in_specs=[spec], out_specs=spec)
    x64 = x.astype(np.float64)
    want = np.concatenate([x64[:8] + 1, x64[8:16] ** 2, -x64[16:]])
    return (lambda: f(x)), want


def switch_index_out_of_range(rng, interp):
    x = _x(rng, *SHAPE)

    @_named("k_switch_clamp")
    def kernel(n_ref, x_ref, o_ref):
        o_ref[...] = lax.switch(n_ref[0], [lambda v: v + 1, lambda v: v * 2], x_ref[...])
    f = _call(interp, kernel, _sds(SHAPE))
    # lax.switch clamps its index into range
    return (lambda: f(np.array([7], np.int32), x)), x * 2


def when_vector_any(rng, interp):
    x = _x(rng, *SHAPE)

    @_named("k_when_any")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

        @pl.when(jnp.any(x_ref[...] > 100.0))
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)

        @pl.when(jnp.all(x_ref[...] < 100.0))
        def _():
            o_ref[...] += 1
    return (lambda: _call(interp, kernel, _sds(SHAPE))(x)), x + 1


def nested_when_in_loop(rng, interp):
    x = _x(rng, *SHAPE)

    @_named("k_nested_when")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

        def body(i, c):
            @pl.when(i % 3 == 1)
            def _():
                o_ref[...] = o_ref[...] * 2

            @pl.when(i == 6)
            def _():
                o_ref[...] = o_ref[...] - 1
            return c
        lax.fori_loop(0, 7, body, 0)
    return (lambda: _call(interp, kernel, _sds(SHAPE))(x)), x.astype(np.float64) * 4 - 1


def cond_tuple(rng, interp):
    x = _x(rng, *SHAPE)

    @_named("k_cond_tuple")
    def kernel(x_ref, o_ref, p_ref):
        a, b = lax.cond(x_ref[0, 0] > 0, lambda v: (v + 1, v.astype(jnp.int32)),
                        lambda v: (v - 1, (-v).astype(jnp.int32)), x_ref[...])
        o_ref[...] = a
        p_ref[...] = b
    pos = x[0, 0] > 0
    want = (x + (1 if pos else -1), (x if pos else -x).astype(np.int32))
    f = _call(interp, kernel, (_sds(SHAPE), _sds(SHAPE, jnp.int32)))
    return (lambda: f(x)), want


# --- scoped buffers and scratch ---------------------------------------------------------

def _vmem(shape, dtype=F32):
    import pallas_tpu
    return pallas_tpu.VMEM(shape, dtype)


def run_scoped_acc(rng, interp):
    x = _x(rng, *SHAPE)

    @_named("k_scoped_acc")
    def kernel(x_ref, o_ref):
        def body(acc):
            acc[...] = jnp.zeros_like(acc)
            for k in range(3):
                acc[...] += x_ref[...] * k
            o_ref[...] = acc[...]
        pl.run_scoped(body, _vmem(SHAPE))
    return (lambda: _call(interp, kernel, _sds(SHAPE))(x)), x.astype(np.float64) * 3


def run_scoped_value(rng, interp):
    x = _x(rng, *SHAPE)

    @_named("k_scoped_value")
    def kernel(x_ref, o_ref):
        def body(a, b):
            a[...] = x_ref[...] + 1
            b[...] = a[...] * 2
            return b[...] - a[...]
        o_ref[...] = pl.run_scoped(body, _vmem(SHAPE), _vmem(SHAPE))
    return (lambda: _call(interp, kernel, _sds(SHAPE))(x)), x + 1


def nested_run_scoped(rng, interp):
    x = _x(rng, *SHAPE)

    @_named("k_nested_scoped")
    def kernel(x_ref, o_ref):
        def outer(a):
            a[...] = x_ref[...] * 2

            def inner(b):
                b[...] = a[...] + 3
                o_ref[...] = b[...] * a[...]
            pl.run_scoped(inner, _vmem(SHAPE))
        pl.run_scoped(outer, _vmem(SHAPE))
    x64 = x.astype(np.float64)
    return (lambda: _call(interp, kernel, _sds(SHAPE))(x)), (x64 * 2 + 3) * x64 * 2


def scratch_running_sum(rng, interp):
    x = _x(rng, 32, 128)

    @_named("k_scratch_sum")
    def kernel(x_ref, o_ref, acc):
        @pl.when(pl.program_id(0) == 0)
        def _():
            acc[...] = jnp.zeros_like(acc)
        acc[...] += x_ref[...]
        o_ref[...] = acc[...]
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    f = _call(interp, kernel, _sds((32, 128)), grid=(4,), in_specs=[spec], out_specs=spec,
              scratch_shapes=[_vmem((8, 128))])
    want = np.cumsum(x.astype(np.float64).reshape(4, 8, 128), axis=0).reshape(32, 128)
    return (lambda: f(x)), want


def scratch_dict(rng, interp):
    x = _x(rng, *SHAPE)

    @_named("k_scratch_kw")
    def kernel(x_ref, o_ref, *, tmp, cnt):
        tmp[...] = x_ref[...] * 2
        cnt[...] = jnp.ones_like(cnt)
        o_ref[...] = tmp[...] + cnt[...].astype(F32)
    f = _call(interp, kernel, _sds(SHAPE),
              scratch_shapes={"tmp": _vmem(SHAPE), "cnt": _vmem(SHAPE, jnp.int32)})
    return (lambda: f(x)), x * 2 + 1


def scratch_zero_size(rng, interp):
    x = _x(rng, *SHAPE)

    @_named("k_scratch_empty")
    def kernel(x_ref, o_ref, e):
        o_ref[...] = x_ref[...] - 1
    f = _call(interp, kernel, _sds(SHAPE), scratch_shapes=[_vmem((0, 128))])
    return (lambda: f(x)), x - 1


def run_scoped_any_space(rng, interp):
    x = _x(rng, 8, 8)

    @_named("k_scoped_any")
    def kernel(x_ref, o_ref):
        def body(t):
            t[...] = x_ref[...].T
            o_ref[...] = t[...] + x_ref[...]
        pl.run_scoped(body, pl.ANY((8, 8), F32))
    return (lambda: _call(interp, kernel, _sds((8, 8)))(x)), x.T + x


# --- masked loads and stores, pl.ds ------------------------------------------------------

def masked_load_2d(rng, interp, other):
    import pallas_triton as pt
    x = _x(rng, 16, 32)
    lim = int(rng.integers(1, 16))

    @_named("k_mload2d")
    def kernel(n_ref, x_ref, o_ref):
        rows = lax.broadcasted_iota(jnp.int32, (16, 32), 0)
        o_ref[...] = pt.load(x_ref, mask=rows < n_ref[0], other=other)
    want = np.where(np.arange(16)[:, None] < lim, x, np.float32(other))
    f = _call(interp, kernel, _sds((16, 32)))
    return (lambda: f(np.array([lim], np.int32), x)), want


def masked_store_partial(rng, interp):
    import pallas_triton as pt
    x = _x(rng, 64)
    y = _x(rng, 64)

    @_named("k_mstore")
    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = y_ref[...]
        pt.store(o_ref, x_ref[...] * 10, mask=x_ref[...] > 0)
    return (lambda: _call(interp, kernel, _sds((64,)))(x, y)), np.where(x > 0, x * 10, y)


def masked_load_all_off(rng, interp):
    import pallas_triton as pt
    x = _x(rng, 64)

    @_named("k_mload_off")
    def kernel(x_ref, o_ref):
        o_ref[...] = pt.load(x_ref, mask=jnp.zeros((64,), jnp.bool_), other=-7.0)
    return (lambda: _call(interp, kernel, _sds((64,)))(x)), np.full(64, -7.0, np.float32)


def masked_load_bad_mask(rng, interp):
    import pallas_triton as pt
    x = _x(rng, 64)

    @_named("k_mload_badmask")
    def kernel(x_ref, o_ref):
        o_ref[...] = pt.load(x_ref, mask=jnp.ones((32,), jnp.bool_), other=0.0)
    return (lambda: _call(interp, kernel, _sds((64,)))(x)), None


def masked_store_dynamic_slice(rng, interp):
    import pallas_triton as pt
    x = _x(rng, 64)
    start = int(rng.integers(0, 56))

    @_named("k_mstore_ds")
    def kernel(s_ref, x_ref, o_ref):
        o_ref[...] = jnp.zeros_like(o_ref)
        s = s_ref[0]
        lanes = jnp.arange(8) + s
        pt.store(o_ref.at[pl.ds(s, 8)], x_ref[pl.ds(s, 8)] + 1, mask=lanes % 2 == 0)
    want = np.zeros(64, np.float32)
    for k in range(start, start + 8):
        if k % 2 == 0:
            want[k] = x[k] + 1
    f = _call(interp, kernel, _sds((64,)))
    return (lambda: f(np.array([start], np.int32), x)), want


def ds_case(rng, interp, name, index, rows, expect_jax=True):
    """A read ``x_ref[index(module)]`` of ``rows`` rows into an output; the
    reference is JAX's interpreter on the same kernel (None where JAX refuses
    it too, or where the index must be refused)."""
    x = _x(rng, 16, 128)

    def make(m):
        @_named(name)
        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[index(m)] * 2
        return kernel
    ours = _call(interp, make(pl), _sds((rows, 128)))
    want = None
    if expect_jax:
        try:
            want = np.asarray(jpl.pallas_call(make(jpl), out_shape=_sds((rows, 128)),
                                              interpret=True)(x))
        except Exception:    # noqa: BLE001 -- JAX refuses it: any clear error is right
            want = None
    return (lambda: ours(x)), want


# --- atomics ---------------------------------------------------------------------------------

def atomic_add_blocks(rng, interp):
    import pallas_triton as pt
    x = _x(rng, 64)
    init = _x(rng, 16)

    @_named("k_atomic_add")
    def kernel(x_ref, i_ref, o_ref):
        pt.atomic_add(o_ref, pl.ds(0, 16), x_ref[...])
    spec = pl.BlockSpec((16,), lambda i: (i,))
    full = pl.BlockSpec((16,), lambda i: (0,))
    f = _call(interp, kernel, _sds((16,)), grid=(4,), in_specs=[spec, full], out_specs=full,
              input_output_aliases={1: 0})
    want = init.astype(np.float64) + x.astype(np.float64).reshape(4, 16).sum(0)
    return (lambda: jax.jit(f)(x, init)), (lambda got: np.allclose(got, want, rtol=1e-5,
                                                                   atol=1e-5) or f"{got[:4]}")


def atomic_int_ops(rng, interp, op):
    import pallas_triton as pt
    x = rng.integers(-1000, 1000, 32).astype(np.int32)
    init = rng.integers(-1000, 1000, 32).astype(np.int32)
    fn = {"max": pt.atomic_max, "min": pt.atomic_min, "xchg": pt.atomic_xchg,
          "and": pt.atomic_and, "or": pt.atomic_or, "xor": pt.atomic_xor}[op]

    @_named(f"k_atomic_{op}")
    def kernel(x_ref, i_ref, o_ref, old_ref):
        old_ref[...] = fn(o_ref, pl.ds(0, 32), x_ref[...])
    npf = {"max": np.maximum, "min": np.minimum, "xchg": lambda a, b: b,
           "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op]
    f = _call(interp, kernel, (_sds((32,), jnp.int32), _sds((32,), jnp.int32)),
              input_output_aliases={1: 0})
    return (lambda: jax.jit(f)(x, init)), (npf(init, x), init)


def atomic_cas(rng, interp):
    import pallas_triton as pt
    init = rng.integers(0, 4, 16).astype(np.int32)
    val = rng.integers(10, 20, 16).astype(np.int32)

    @_named("k_atomic_cas")
    def kernel(v_ref, i_ref, o_ref, old_ref):
        for k in range(16):
            old_ref[k] = pt.atomic_cas(o_ref.at[k], jnp.int32(2), v_ref[k])
    f = _call(interp, kernel, (_sds((16,), jnp.int32), _sds((16,), jnp.int32)),
              input_output_aliases={1: 0})
    return (lambda: jax.jit(f)(val, init)), (np.where(init == 2, val, init), init)


def atomic_add_masked(rng, interp):
    import pallas_triton as pt
    x = _x(rng, 32)
    init = _x(rng, 32)

    @_named("k_atomic_mask")
    def kernel(x_ref, i_ref, o_ref):
        pt.atomic_add(o_ref, pl.ds(0, 32), x_ref[...], mask=x_ref[...] < 0)
    f = _call(interp, kernel, _sds((32,)), input_output_aliases={1: 0})
    return (lambda: jax.jit(f)(x, init)), init + np.where(x < 0, x, 0)


# --- transformations ------------------------------------------------------------------------

def _square_call(interp, name="k_square_grid"):
    @_named(name)
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * x_ref[...] + 1
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    return _call(interp, kernel, _sds((16, 128)), grid=(2,), in_specs=[spec], out_specs=spec)


def vmap_axis1(rng, interp):
    x = _x(rng, 16, 3, 128)
    f = _square_call(interp, "k_vmap_axis1")
    return (lambda: jax.vmap(f, in_axes=1, out_axes=2)(x)), np.transpose(
        x.astype(np.float64) ** 2 + 1, (0, 2, 1))


def vmap_vmap_jit(rng, interp):
    x = _x(rng, 2, 3, 16, 128)
    f = _square_call(interp, "k_vmap2")
    return (lambda: jax.jit(jax.vmap(jax.vmap(f)))(x)), x.astype(np.float64) ** 2 + 1


def grad_of_call(rng, interp):
    x = _x(rng, 16, 128)
    f = _square_call(interp, "k_grad")
    return (lambda: jax.grad(lambda v: f(v).sum())(x)), 2 * x.astype(np.float64)


def jvp_grid(rng, interp):
    x, t = _x(rng, 16, 128), _x(rng, 16, 128)
    f = _square_call(interp, "k_jvp_grid")
    return (lambda: jax.jvp(f, (x,), (t,))), (x.astype(np.float64) ** 2 + 1,
                                               2 * x.astype(np.float64) * t)


def scan_over_call(rng, interp):
    x = _x(rng, 16, 128) * 0.1
    f = _square_call(interp, "k_scan")

    def step(c, _):
        c = f(c) * 0.5
        return c, c.sum()
    want_c, want_s = x.astype(np.float64), []
    for _ in range(4):
        want_c = (want_c ** 2 + 1) * 0.5
        want_s.append(want_c.sum())
    return (lambda: lax.scan(step, x, None, length=4)), (want_c, np.array(want_s))


def remat_cond_call(rng, interp):
    x = _x(rng, 16, 128)
    f = _square_call(interp, "k_remat")
    g = jax.jit(jax.checkpoint(lambda v: lax.cond(v[0, 0] > 0, f, lambda u: -u, v)))
    want = x.astype(np.float64) ** 2 + 1 if x[0, 0] > 0 else -x
    return (lambda: g(x)), want


def threads_concurrent(rng, interp):
    xs = [_x(rng, 16, 128) for _ in range(6)]
    f = jax.jit(_square_call(interp, "k_threads"))

    def thunk():
        out = [None] * len(xs)

        def work(k):
            out[k] = np.asarray(f(xs[k]))
        ts = [threading.Thread(target=work, args=(k,)) for k in range(len(xs))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return out
    return thunk, [x.astype(np.float64) ** 2 + 1 for x in xs]


def retrace_shapes(rng, interp):
    xs = [_x(rng, n) for n in (8, 24, 5)]

    @_named("k_retrace")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] - 2

    def thunk():
        return [_call(interp, kernel, _sds(x.shape))(x) for x in xs]
    return thunk, [x - 2 for x in xs]


# --- debug ------------------------------------------------------------------------------------

def debug_print_types(rng, interp):
    a = jnp.asarray(_x(rng, 4), jnp.bfloat16)
    b = jnp.asarray(rng.integers(-128, 127, 4), jnp.int8)

    @_named("k_print_types")
    def kernel(a_ref, b_ref, o_ref):
        pl.debug_print("bf={} i8={} b={}", a_ref[1], b_ref[2], b_ref[3] > 0)
        o_ref[...] = a_ref[...].astype(F32)
    f = _call(interp, kernel, _sds((4,)))
    want = _capture_stdout(lambda: jax.jit(lambda u, v: jax.debug.print(
        "bf={} i8={} b={}", u[1], v[2], v[3] > 0))(a, b)).strip()
    if interp == "triton":     # README: tl.device_print, the format's text as a prefix, per value
        values = [str(np.asarray(a[1], np.float32)), str(int(b[2])), str(bool(b[3] > 0))]
        return (lambda: _capture_stdout(lambda: f(a, b))), (
            lambda got: all(v in got for v in values) or f"printed {got!r}, values {values}")
    return (lambda: _capture_stdout(lambda: f(a, b))), (
        lambda got: got.strip() == want or f"printed {got.strip()!r}, JAX prints {want!r}")


def debug_check_passes(rng, interp):
    x = _x(rng, *SHAPE)

    @_named("k_check_ok")
    def kernel(x_ref, o_ref):
        pl.debug_check(jnp.all(jnp.isfinite(x_ref[...])), "finite input")
        o_ref[...] = x_ref[...] * 2

    def thunk():
        with pl.enable_debug_checks(True):
            return _call(interp, kernel, _sds(SHAPE))(x)
    return thunk, x * 2


def debug_check_then_valid(rng, interp):
    x = _x(rng, 16, 128)

    @_named("k_check_then")
    def kernel(x_ref, o_ref):
        pl.debug_check(x_ref[0, 0] < 1e6, "first element small")
        o_ref[...] = x_ref[...] + 1
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))

    def thunk():
        with pl.enable_debug_checks(True):
            f = _call(interp, kernel, _sds((16, 128)), grid=(2,), in_specs=[spec],
                      out_specs=spec)
            bad = x.copy()
            bad[8, 0] = 1e9
            try:
                jax.block_until_ready(f(bad))
                return "the failing check did not raise"
            except Exception as err:     # noqa: BLE001
                if "first element small" not in str(err):
                    return f"unexpected error: {err}"
            return f(x)
    return thunk, x + 1


def debug_check_in_loop(rng, interp):
    x = _x(rng, *SHAPE)

    @_named("k_check_loop")
    def kernel(x_ref, o_ref):
        def body(i, v):
            pl.debug_check(i < 3, "loop went past 3")
            return v + 1
        o_ref[...] = lax.fori_loop(0, 5, body, x_ref[...])

    def thunk():
        with pl.enable_debug_checks(True):
            return _call(interp, kernel, _sds(SHAPE))(x)
    return thunk, None


def debug_checks_other_thread(rng, interp):
    x = _x(rng, *SHAPE)

    @_named("k_check_thread")
    def kernel(x_ref, o_ref):
        pl.debug_check(x_ref[0, 0] > 1e30, "always fails")
        o_ref[...] = x_ref[...]
    barrier = threading.Barrier(2)

    def other():
        with pl.enable_debug_checks(False):
            barrier.wait()
            barrier.wait()

    def thunk():
        t = threading.Thread(target=other)
        t.start()
        try:
            with pl.enable_debug_checks(True):
                barrier.wait()
                try:
                    return _call(interp, kernel, _sds(SHAPE))(x)
                finally:
                    barrier.wait()
        finally:
            t.join()
    return thunk, None


# --- meshes -----------------------------------------------------------------------------------

class _Mesh:
    def __init__(self, **axes):
        self.shape = dict(axes)


def kernel_mesh_new_ref(rng, interp):
    x = _x(rng, 4, 128)

    def thunk():
        ref = jax.new_ref(jnp.asarray(x))

        @_named("k_mesh_ref")
        def body(r):
            c = pl.program_id("core")
            r[pl.ds(c, 1), :] = r[pl.ds(c, 1), :] * (c + 2).astype(F32)
        pl.kernel(body, mesh=_Mesh(core=4), interpret=interpret_of(interp))(ref)
        return ref[...]
    return thunk, x * np.arange(2, 6)[:, None]


def kernel_mesh_2axes(rng, interp):
    x = _x(rng, 2, 3, 128)

    @_named("k_mesh2")
    def body(x_ref, o_ref):
        a, b = pl.program_id("a"), pl.program_id("b")
        o_ref[a, b] = x_ref[a, b] + (a * 10 + b).astype(F32)
    f = pl.kernel(body, _sds((2, 3, 128)), mesh=_Mesh(a=2, b=3), interpret=interpret_of(interp))
    return (lambda: f(x)), x + (np.arange(2)[:, None, None] * 10 + np.arange(3)[None, :, None])


def kernel_mpmd(rng, interp):
    x = _x(rng, 4, 128)

    @_named("k_mpmd_a")
    def first(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    @_named("k_mpmd_b")
    def second(x_ref, o_ref):
        o_ref[...] += 1
    f = pl.kernel([first, second], _sds((4, 128)), mesh=[_Mesh(c=1), _Mesh(c=1)],
                  interpret=interpret_of(interp))
    return (lambda: f(x)), x * 2 + 1


def kernel_mesh_zero(rng, interp):
    x = _x(rng, 4, 128)

    @_named("k_mesh_zero")
    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    f = pl.kernel(body, _sds((4, 128)), mesh=_Mesh(c=0), interpret=interpret_of(interp))
    return (lambda: f(x)), None


def core_map_new_ref(rng, interp):
    import warnings
    x = _x(rng, 8, 128)

    @jax.jit
    def f(v):
        ref = jax.new_ref(v)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            core_map = pl.core_map

        @core_map(_Mesh(c=1), interpret=interpret_of(interp))
        def k_core_map():
            ref[...] = jnp.sin(ref[...]) + 2
        return ref[...]
    return (lambda: f(x)), np.sin(x.astype(np.float64)) + 2


def tpu_core_mesh(rng, interp):
    import pallas_tpu
    x = _x(rng, 8, 128)
    mesh = pallas_tpu.create_tensorcore_mesh("core", num_cores=1)

    @_named("k_core_mesh")
    def body(x_ref, o_ref):
        o_ref[...] = jnp.tanh(x_ref[...])
    f = pl.kernel(body, _sds((8, 128)), mesh=mesh, interpret=interpret_of(interp))
    return (lambda: f(x)), np.tanh(x.astype(np.float64))


# --- matmuls and other kernel ops -------------------------------------------------------------

def dot_case(rng, interp, kind):
    m, k, n = 32, 64, 16
    if kind == "int8":
        a = rng.integers(-128, 128, (m, k)).astype(np.int8)
        b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    else:
        a, b = _x(rng, m, k), _x(rng, k, n)
    dt = {"f32": F32, "bf16": jnp.bfloat16, "int8": jnp.int8, "tn": F32}[kind]
    acc = jnp.int32 if kind == "int8" else F32

    @_named(f"k_dot_{kind}")
    def kernel(a_ref, b_ref, o_ref):
        if kind == "tn":
            o_ref[...] = lax.dot_general(a_ref[...], b_ref[...], (((0,), (0,)), ((), ())),
                                         preferred_element_type=F32,
                                         precision=lax.Precision.HIGHEST)
        else:
            o_ref[...] = jnp.dot(a_ref[...], b_ref[...], preferred_element_type=acc,
                                 precision=lax.Precision.HIGHEST)
    a_in, b_in = jnp.asarray(a, dt), jnp.asarray(b, dt)
    if kind == "tn":
        a_in = jnp.asarray(a.T.copy(), dt)
        a = a.T.copy().T
    want = np.asarray(a_in, np.float64).T @ np.asarray(b_in, np.float64) if kind == "tn" else \
        np.asarray(a_in, np.float64) @ np.asarray(b_in, np.float64)
    f = _call(interp, kernel, _sds((m, n), acc))
    tol = 1e-2 if kind == "bf16" else 1e-4
    if kind == "int8":
        return (lambda: f(a_in, b_in)), want.astype(np.int32)
    return (lambda: f(a_in, b_in)), (lambda got: np.allclose(got, want, rtol=tol, atol=tol * 8)
                                     or f"max err {np.abs(np.asarray(got) - want).max()}")


def iota_where(rng, interp):
    x = _x(rng, *SHAPE)

    @_named("k_iota_where")
    def kernel(x_ref, o_ref):
        r = lax.broadcasted_iota(jnp.int32, SHAPE, 0)
        c = lax.broadcasted_iota(jnp.int32, SHAPE, 1)
        o_ref[...] = jnp.where((r + c) % 3 == 0, x_ref[...], -x_ref[...] * 2)
    r, c = np.meshgrid(np.arange(8), np.arange(128), indexing="ij")
    return (lambda: _call(interp, kernel, _sds(SHAPE))(x)), np.where((r + c) % 3 == 0, x, -x * 2)


def reshape_broadcast(rng, interp):
    x = _x(rng, 8, 16)

    @_named("k_reshape")
    def kernel(x_ref, o_ref):
        v = x_ref[...].reshape(2, 4, 16)
        o_ref[...] = (v.sum(axis=1)[:, None, :] + v).reshape(8, 16)
    v = x.astype(np.float64).reshape(2, 4, 16)
    return (lambda: _call(interp, kernel, _sds((8, 16)))(x)), (
        v.sum(1)[:, None, :] + v).reshape(8, 16)


def pl_broadcast(rng, interp):
    x = _x(rng, 1, 128)

    @_named("k_pl_broadcast")
    def kernel(x_ref, o_ref):
        o_ref[...] = pl.broadcast_to(x_ref[...], SHAPE) * 2
    return (lambda: _call(interp, kernel, _sds(SHAPE))(x)), np.broadcast_to(x * 2, SHAPE)


def multiple_of_slice(rng, interp):
    x = _x(rng, 64, 128)

    @_named("k_multiple_of")
    def kernel(x_ref, o_ref):
        i = pl.program_id(0)
        o_ref[...] = x_ref[pl.ds(pl.multiple_of(i * 8, 8), 8), :] + 1
    f = _call(interp, kernel, _sds((64, 128)), grid=(8,),
              in_specs=[pl.BlockSpec((64, 128), lambda i: (0, 0))],
              out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)))
    return (lambda: f(x)), x + 1


def program_id_bad_axis(rng, interp):
    x = _x(rng, *SHAPE)

    @_named("k_pid_axis")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + pl.program_id(2).astype(F32)
    return (lambda: _call(interp, kernel, _sds(SHAPE), grid=(2,),
                          in_specs=[pl.BlockSpec(SHAPE, lambda i: (0, 0))],
                          out_specs=pl.BlockSpec(SHAPE, lambda i: (0, 0)))(x)), None


def sort_take(rng, interp):
    x = _x(rng, 4, 32)
    idx = rng.integers(0, 32, 16).astype(np.int32)

    @_named("k_sort_take")
    def kernel(x_ref, i_ref, s_ref, t_ref):
        s_ref[...] = jnp.sort(x_ref[...], axis=1)
        t_ref[...] = jnp.take(x_ref[...], i_ref[...], axis=1)
    f = _call(interp, kernel, (_sds((4, 32)), _sds((4, 16))))
    return (lambda: f(x, idx)), (np.sort(x, 1), x[:, idx])


def closure_constant(rng, interp, kind):
    x = _x(rng, *SHAPE)
    c = _x(rng, *SHAPE)
    const = jnp.asarray(c) if kind == "jnp" else c

    @_named(f"k_closure_{kind}")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + const
    return (lambda: _call(interp, kernel, _sds(SHAPE))(x)), x + c


def out_shape_odd(rng, interp, kind):
    x = _x(rng, 16)

    @_named(f"k_out_{kind}")
    def kernel(x_ref, o_ref):
        o_ref[...] = (x_ref[...] + 1).astype(o_ref.dtype)
    shape = {"f64": jax.ShapeDtypeStruct((16,), np.float64), "array": jnp.zeros(16, F32),
             "np_array": np.zeros(16, np.float32)}[kind]
    return (lambda: _call(interp, kernel, shape)(x)), x + 1


def int64_input(rng, interp):
    x = rng.integers(-2 ** 20, 2 ** 20, 16)        # int64: JAX without x64 makes it int32

    @_named("k_int64_in")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 3
    return (lambda: _call(interp, kernel, _sds((16,), jnp.int32))(x)), (x * 3).astype(np.int32)


def x64_float64(rng, interp):
    x = rng.standard_normal(64) * 5

    @_named("k_f64_exp")
    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.exp(x_ref[...]) - x_ref[...] * 1e-9
    f = _call(interp, kernel, _sds((64,), jnp.float64))
    want = np.exp(x) - x * 1e-9
    return (lambda: f(jnp.asarray(x, jnp.float64))), (
        lambda got: (np.asarray(got).dtype == np.float64
                     and np.allclose(got, want, rtol=1e-13, atol=0)) or f"{np.asarray(got)[:3]}")


def x64_int64_map(rng, interp):
    x = rng.standard_normal(32).astype(np.float32)

    @_named("k_i64_map")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2
    spec = pl.BlockSpec((8,), lambda i: (jnp.int64(3) - i.astype(jnp.int64),))
    f = _call(interp, kernel, _sds((32,)), grid=(4,), in_specs=[spec],
              out_specs=pl.BlockSpec((8,), lambda i: (i,)))
    return (lambda: f(x)), x.reshape(4, 8)[::-1].reshape(32) * 2


def semaphore_balanced(rng, interp):
    import pallas_tpu
    x = _x(rng, *SHAPE)

    @_named("k_sem_ok")
    def kernel(x_ref, o_ref, sem):
        pl.semaphore_signal(sem, 3)
        pl.semaphore_wait(sem, 2)
        pl.semaphore_wait(sem, 1)
        o_ref[...] = x_ref[...] + pl.semaphore_read(sem).astype(F32)
    f = _call(interp, kernel, _sds(SHAPE), scratch_shapes=[pallas_tpu.SemaphoreType.REGULAR])
    return (lambda: f(x)), x


def kernel_raises(rng, interp):
    x = _x(rng, 8)

    @_named("k_raises")
    def kernel(x_ref, o_ref):
        raise KeyError("user bug 42")
    return (lambda: _call(interp, kernel, _sds((8,)))(x)), None


def wrong_arg_count(rng, interp):
    x = _x(rng, 8)

    @_named("k_arg_count")
    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] + y_ref[...]
    return (lambda: _call(interp, kernel, _sds((8,)))(x)), None


def varargs_kernel(rng, interp):
    xs = [_x(rng, 8) for _ in range(3)]

    @_named("k_varargs")
    def kernel(*refs, **unused):
        refs[-1][...] = refs[0][...] * refs[1][...] - refs[2][...]
    return (lambda: _call(interp, kernel, _sds((8,)))(*xs)), xs[0].astype(
        np.float64) * xs[1] - xs[2]


def ragged_k_matmul(rng, interp):
    m, k, n, bk = 16, 100, 32, 32
    a, b = _x(rng, m, k), _x(rng, k, n)

    @_named("k_ragged_k")
    def kernel(a_ref, b_ref, o_ref):
        kk = pl.program_id(0)

        @pl.when(kk == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
        col = kk * bk + lax.broadcasted_iota(jnp.int32, (m, bk), 1)
        row = kk * bk + lax.broadcasted_iota(jnp.int32, (bk, n), 0)
        av = jnp.where(col < k, a_ref[...], 0.0)        # the padded tail is undefined: mask it
        bv = jnp.where(row < k, b_ref[...], 0.0)
        o_ref[...] += jnp.dot(av, bv, preferred_element_type=F32,
                              precision=lax.Precision.HIGHEST)
    f = _call(interp, kernel, _sds((m, n)), grid=(pl.cdiv(k, bk),),
              in_specs=[pl.BlockSpec((m, bk), lambda kk: (0, kk)),
                        pl.BlockSpec((bk, n), lambda kk: (kk, 0))],
              out_specs=pl.BlockSpec((m, n), lambda kk: (0, 0)))
    want = a.astype(np.float64) @ b.astype(np.float64)
    return (lambda: f(a, b)), (lambda got: np.allclose(got, want, rtol=1e-4, atol=1e-3)
                               or f"max err {np.abs(np.asarray(got) - want).max()}")


def accumulate_into_alias(rng, interp):
    x, acc = _x(rng, 4, 8, 128), _x(rng, 8, 128)

    @_named("k_acc_alias")
    def kernel(x_ref, acc_ref, o_ref):
        o_ref[...] += x_ref[...]
    f = _call(interp, kernel, _sds((8, 128)), grid=(4,),
              in_specs=[pl.BlockSpec((None, 8, 128), lambda i: (i, 0, 0)),
                        pl.BlockSpec((8, 128), lambda i: (0, 0))],
              out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)), input_output_aliases={1: 0})
    return (lambda: jax.jit(f)(x, acc)), acc.astype(np.float64) + x.astype(np.float64).sum(0)


def scalar_output(rng, interp):
    x = _x(rng, 8, 128)

    @_named("k_scalar_out")
    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.sum(x_ref[...])
    return (lambda: _call(interp, kernel, _sds(()))(x)), x.astype(np.float64).sum()


def last_program_only(rng, interp):
    x = _x(rng, 32, 128)

    @_named("k_last_only")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

        @pl.when(pl.program_id(0) == pl.num_programs(0) - 1)
        def _():
            o_ref[...] = -x_ref[...]
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    f = _call(interp, kernel, _sds((32, 128)), grid=(4,), in_specs=[spec], out_specs=spec)
    want = x.copy()
    want[24:] *= -1
    return (lambda: f(x)), want


def bool_blocks(rng, interp):
    a = rng.integers(0, 2, (16, 128)).astype(bool)

    @_named("k_bool_blocks")
    def kernel(a_ref, o_ref):
        o_ref[...] = jnp.logical_not(a_ref[...]) | (pl.program_id(0) == 1)
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    f = _call(interp, kernel, _sds((16, 128), jnp.bool_), grid=(2,), in_specs=[spec],
              out_specs=spec)
    want = ~a
    want[8:] = True
    return (lambda: f(a)), want


def store_dtype_mismatch(rng, interp):
    x = _x(rng, *SHAPE)

    @_named("k_store_dtype")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]            # float32 into an int32 Ref
    return (lambda: _call(interp, kernel, _sds(SHAPE, jnp.int32))(x)), None


def store_shape_mismatch(rng, interp):
    x = _x(rng, *SHAPE)

    @_named("k_store_shape")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[:4]
    return (lambda: _call(interp, kernel, _sds(SHAPE))(x)), None


def dynamic_row_loop(rng, interp):
    x = _x(rng, *SHAPE)

    @_named("k_row_loop")
    def kernel(x_ref, o_ref):
        def body(i, c):
            o_ref[i, :] = x_ref[7 - i, :] * (i + 1).astype(F32)
            return c
        lax.fori_loop(0, 8, body, 0, unroll=True)
    return (lambda: _call(interp, kernel, _sds(SHAPE))(x)), x[::-1] * np.arange(1, 9)[:, None]


def write_twice(rng, interp):
    x = _x(rng, *SHAPE)

    @_named("k_write_twice")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 100
        o_ref[2:5, :] = x_ref[2:5, :] - 1
    want = x * 100
    want[2:5] = x[2:5] - 1
    return (lambda: _call(interp, kernel, _sds(SHAPE))(x)), want


def parallel_semantics_reduction(rng, interp):
    import pallas_tpu
    x = _x(rng, 16, 256)

    @_named("k_par_red")
    def kernel(x_ref, o_ref):
        @pl.when(pl.program_id(1) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
        o_ref[...] += x_ref[...]
    f = _call(interp, kernel, _sds((16, 128)), grid=(2, 2),
              in_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, j))],
              out_specs=pl.BlockSpec((8, 128), lambda i, j: (i, 0)),
              compiler_params=pallas_tpu.CompilerParams(
                  dimension_semantics=("parallel", "arbitrary")))
    return (lambda: f(x)), x[:, :128].astype(np.float64) + x[:, 128:]


# --- parameters with bad values -------------------------------------------------------------

def params_case(rng, interp, make_params, where="compiler_params"):
    x = _x(rng, *SHAPE)

    @_named("k_bad_params")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1

    def thunk():
        kw = {where: make_params()}
        if where == "interpret":
            return pl.pallas_call(kernel, out_shape=_sds(SHAPE), **kw)(x)
        return pl.pallas_call(kernel, out_shape=_sds(SHAPE), interpret=interpret_of(interp),
                              **kw)(x)
    return thunk, None


def _plugin_params(plugin, **kw):
    """CompilerParams of ``plugin``, made when the case runs: collecting the cases
    must not need the plugin (the frontend-only tox envs have none)."""
    def make():
        return importlib.import_module(plugin).CompilerParams(**kw)
    return make


def _triton_params(**kw):
    return _plugin_params("pallas_triton", **kw)


def _tpu_params(**kw):
    return _plugin_params("pallas_tpu", **kw)


def _tpu_interpret(**kw):
    return lambda: importlib.import_module("pallas_tpu").InterpretParams(**kw)


def tpu_dim_semantics(rng, interp, sem):
    import pallas_tpu
    x = _x(rng, 16, 128)

    @_named("k_dim_sem")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    f = _call(interp, kernel, _sds((16, 128)), grid=(2,), in_specs=[spec], out_specs=spec,
              compiler_params=pallas_tpu.CompilerParams(dimension_semantics=sem))
    return (lambda: f(x)), x * 2


def cost_estimate_case(rng, interp, make):
    x = _x(rng, 8)

    @_named("k_cost")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2
    return (lambda: _call(interp, kernel, _sds((8,)), cost_estimate=make())(x)), x * 2


# --- the table ----------------------------------------------------------------------------------

def _on(interps, cid, fn, names=None, uses=None, **kw):
    """One case per interpreter; ``uses``: the plugin whose API the kernel calls
    (the built-in interpreter runs it too, where that plugin is installed)."""
    names = names or (f"k_{cid}",)
    return [Case(f"{i}-{cid}", functools.partial(fn, interp=i), names, needs=NEEDS[i] or uses,
                 slow=i != "builtin", **kw) for i in interps]


def _p(cid, interps, fn, names=("k_bad_params",), **kw):
    return _on(interps, cid, fn, names, **kw)


X64 = {"JAX_ENABLE_X64": "1", "JAX_PLATFORMS": "cpu"}
P = functools.partial

CASES = [
    *_p("fori_zero_trip", ALL4, P(fori_static, lo=3, hi=3), ("k_fori_static",)),
    *_p("fori_negative_trip", ALL4, P(fori_static, lo=5, hi=2), ("k_fori_static",)),
    *_p("fori_odd_trip", ALL4, P(fori_static, lo=-3, hi=4), ("k_fori_static",)),
    *[c for n in (0, 7, -3) for c in _p(f"fori_dynamic_{n}".replace("-", "m"), ALL3,
                                        P(fori_dynamic, n=n), ("k_fori_dynamic",))],
    *_p("while_odd", ALL4, while_doubling, ("k_while_odd",), tol=1e-5),
    *_p("pl_loop_step3", ALL4, P(pl_loop_step, lo=1, hi=11, step=3), ("k_pl_loop",)),
    *_p("pl_loop_empty", ALL3, P(pl_loop_step, lo=4, hi=4, step=2), ("k_pl_loop",)),
    *_p("pl_loop_neg_step", B, P(pl_loop_step, lo=10, hi=0, step=-3), ("k_pl_loop",),
        either=True, expect_error=True),
    *_p("switch_by_program", ALL4, switch_by_program, ("k_switch",)),
    *_p("switch_index_clamped", ALL4, switch_index_out_of_range, ("k_switch_clamp",)),
    *_p("when_vector_any", ALL4, when_vector_any, ("k_when_any",)),
    *_p("nested_when_in_loop", ALL4, nested_when_in_loop, ("k_nested_when",)),
    *_p("cond_tuple", ALL4, cond_tuple, ("k_cond_tuple",)),
    *_p("run_scoped_acc", BP, run_scoped_acc, ("k_scoped_acc",), uses="pallas_tpu"),
    *_p("run_scoped_value", BP, run_scoped_value, ("k_scoped_value",), uses="pallas_tpu"),
    *_p("nested_run_scoped", BP, nested_run_scoped, ("k_nested_scoped",), uses="pallas_tpu"),
    *_p("run_scoped_any", ALL3, run_scoped_any_space, ("k_scoped_any",)),
    *_p("scratch_running_sum", BP, scratch_running_sum, ("k_scratch_sum",),
        uses="pallas_tpu", tol=1e-5),
    *_p("scratch_dict", BP, scratch_dict, ("k_scratch_kw",), uses="pallas_tpu"),
    *_p("scratch_zero_size", BP, scratch_zero_size, ("k_scratch_empty",),
        uses="pallas_tpu", either=True),
    *_p("masked_load_nan_other", BT, P(masked_load_2d, other=float("nan")), ("k_mload2d",),
        uses="pallas_triton"),
    *_p("masked_load_neg_other", BT, P(masked_load_2d, other=-0.0), ("k_mload2d",),
        uses="pallas_triton"),
    *_p("masked_store_partial", BT, masked_store_partial, ("k_mstore",), uses="pallas_triton"),
    *_p("masked_load_all_off", BT, masked_load_all_off, ("k_mload_off",), uses="pallas_triton"),
    *_p("masked_load_bad_mask", BT, masked_load_bad_mask, ("k_mload_badmask",),
        uses="pallas_triton",
        expect_error=True),
    *_p("masked_store_dyn_slice", BT, masked_store_dynamic_slice, ("k_mstore_ds",),
        uses="pallas_triton"),
    *_p("ds_stride2", ALL4, P(ds_case, name="k_ds_stride", rows=4, index=lambda m: (
        m.ds(1, 4, 2), slice(None))), ("k_ds_stride",)),
    *_p("ds_static_negative", ALL3, P(ds_case, name="k_ds_neg", rows=4, index=lambda m: (
        m.ds(-2, 4), slice(None))), ("k_ds_neg",), either=True, expect_error=True),
    *_p("ds_oversized", ALL4, P(ds_case, name="k_ds_big", rows=20, index=lambda m: (
        m.ds(0, 20), slice(None)), expect_jax=False), ("k_ds_big",), expect_error=True),
    *_p("ds_past_end", ALL3, P(ds_case, name="k_ds_end", rows=4, index=lambda m: (
        m.ds(14, 4), slice(None)), expect_jax=False), ("k_ds_end",), expect_error=True),
    *_p("index_static_negative", ALL3, P(ds_case, name="k_neg_idx", rows=4, index=lambda m: (
        slice(-4, None), slice(None))), ("k_neg_idx",), either=True, expect_error=True),
    *_p("ds_size_zero", B, P(ds_case, name="k_ds_zero", rows=0, index=lambda m: (
        m.ds(3, 0), slice(None))), ("k_ds_zero",), either=True, expect_error=True),
    *_p("atomic_add_blocks", BT, atomic_add_blocks, ("k_atomic_add",), uses="pallas_triton"),
    *[c for op in ("max", "min", "xchg", "and", "or", "xor")
      for c in _p(f"atomic_{op}", BT, P(atomic_int_ops, op=op), (f"k_atomic_{op}",),
                  uses="pallas_triton")],
    *_p("atomic_cas", BT, atomic_cas, ("k_atomic_cas",), uses="pallas_triton"),
    *_p("atomic_add_masked", BT, atomic_add_masked, ("k_atomic_mask",), uses="pallas_triton"),
    *_p("vmap_axis1", ALL4, vmap_axis1, ("k_vmap_axis1",)),
    *_p("vmap_vmap_jit", BP, vmap_vmap_jit, ("k_vmap2",)),
    *_p("grad_of_call", B, grad_of_call, ("k_grad",), either=True, expect_error=True),
    *_p("jvp_grid", BP, jvp_grid, ("k_jvp_grid",)),
    *_p("scan_over_call", BP, scan_over_call, ("k_scan",), tol=1e-4),
    *_p("remat_cond_call", BP, remat_cond_call, ("k_remat",)),
    *_p("threads_concurrent", ALL3, threads_concurrent, ("k_threads",)),
    *_p("retrace_shapes", ALL4, retrace_shapes, ("k_retrace",)),
    *_p("debug_print_types", ("builtin", "triton", "tpu"), debug_print_types,
        ("k_print_types",), subprocess=True),
    *_p("debug_check_passes", BP, debug_check_passes, ("k_check_ok",), subprocess=True),
    *_p("debug_check_then_valid", BP, debug_check_then_valid, ("k_check_then",),
        subprocess=True),
    *_p("debug_check_in_loop", BP, debug_check_in_loop, ("k_check_loop", "loop went past 3"),
        expect_error=True, subprocess=True),
    *_p("debug_checks_thread", B, debug_checks_other_thread, ("k_check_thread", "always fails"),
        expect_error=True, subprocess=True),
    *_p("kernel_mesh_new_ref", BP, kernel_mesh_new_ref, ("k_mesh_ref",)),
    *_p("kernel_mesh_2axes", BP, kernel_mesh_2axes, ("k_mesh2",)),
    *_p("kernel_mpmd", BP, kernel_mpmd, ("k_mpmd_a",), either=True, expect_error=True),
    *_p("kernel_mesh_zero", B, kernel_mesh_zero, ("k_mesh_zero",), either=True,
        expect_error=True),
    *_p("core_map_new_ref", BP, core_map_new_ref, ("k_core_map",), tol=1e-5),
    *_p("threads_concurrent_mgpu", ("mgpu",), threads_concurrent, ("k_threads",)),
    *_p("tpu_core_mesh", ("tpu",), tpu_core_mesh, ("k_core_mesh",)),
    *[c for kind in ("f32", "bf16", "int8", "tn")
      for c in _p(f"dot_{kind}", ALL4 if kind == "f32" else ALL3, P(dot_case, kind=kind),
                  (f"k_dot_{kind}",))],
    *_p("iota_where", ALL4, iota_where, ("k_iota_where",)),
    *_p("reshape_broadcast", ALL4, reshape_broadcast, ("k_reshape",), tol=1e-5),
    *_p("pl_broadcast", ALL4, pl_broadcast, ("k_pl_broadcast",)),
    *_p("multiple_of_slice", ALL4, multiple_of_slice, ("k_multiple_of",)),
    *_p("program_id_bad_axis", ALL4, program_id_bad_axis, ("k_pid_axis",), expect_error=True),
    *_p("sort_take", BP, sort_take, ("k_sort_take",), either=True, expect_error=True),
    *[c for kind in ("jnp", "np")
      for c in _p(f"closure_{kind}", ALL3, P(closure_constant, kind=kind),
                  (f"k_closure_{kind}",), either=True, expect_error=True)],
    *[c for kind in ("f64", "array", "np_array")
      for c in _p(f"out_shape_{kind}", B, P(out_shape_odd, kind=kind), (f"k_out_{kind}",),
                  either=True, expect_error=True)],
    *_p("int64_input", B, int64_input, ("k_int64_in",)),
    *_p("x64_float64", ("builtin", "triton"), x64_float64, ("k_f64_exp",), env=X64),
    *_p("x64_int64_map", BP, x64_int64_map, ("k_i64_map",), env=X64),
    *_p("semaphore_balanced", BP, semaphore_balanced, ("k_sem_ok",), uses="pallas_tpu"),
    *_p("kernel_raises", ALL4, kernel_raises, ("user bug 42",), expect_error=True),
    *_p("wrong_arg_count", B, wrong_arg_count, ("k_arg_count",), expect_error=True),
    *_p("varargs_kernel", ALL4, varargs_kernel, ("k_varargs",)),
    *_p("ragged_k_matmul", ALL4, ragged_k_matmul, ("k_ragged_k",)),
    *_p("accumulate_into_alias", ALL4, accumulate_into_alias, ("k_acc_alias",), tol=1e-5),
    *_p("scalar_output", ALL4, scalar_output, ("k_scalar_out",), tol=1e-4),
    *_p("last_program_only", ALL4, last_program_only, ("k_last_only",)),
    *_p("bool_blocks", ALL4, bool_blocks, ("k_bool_blocks",)),
    *_p("store_dtype_mismatch", ALL4, store_dtype_mismatch, ("k_store_dtype",),
        expect_error=True),
    *_p("store_shape_mismatch", ALL4, store_shape_mismatch, ("k_store_shape",),
        expect_error=True),
    *_p("dynamic_row_loop", ALL4, dynamic_row_loop, ("k_row_loop",)),
    *_p("write_twice", ALL4, write_twice, ("k_write_twice",)),
    *_p("parallel_semantics_reduction", BP, parallel_semantics_reduction, ("k_par_red",),
        uses="pallas_tpu", tol=1e-5),
    *_p("triton_num_warps_1024", ("triton",), P(params_case, make_params=_triton_params(
        num_warps=1024)), ("num_warps",), expect_error=True),
    *_p("triton_num_warps_0", ("triton",), P(params_case, make_params=_triton_params(
        num_warps=0)), ("num_warps",), expect_error=True),
    *_p("triton_num_warps_3", ("triton",), P(params_case, make_params=_triton_params(
        num_warps=3)), ("num_warps",), expect_error=True),
    *_p("triton_num_stages_neg", ("triton",), P(params_case, make_params=_triton_params(
        num_stages=-1)), ("num_stages",), expect_error=True),
    *_p("triton_num_ctas_0", ("triton",), P(params_case, make_params=_triton_params(
        num_ctas=0)), ("num_ctas",), expect_error=True),
    *_p("triton_maxnreg_neg", ("triton",), P(params_case, make_params=_triton_params(
        maxnreg=-5)), ("maxnreg",), expect_error=True),
    *_p("triton_precision_bogus", ("triton",), P(params_case, make_params=_triton_params(
        dot_input_precision="bogus")), ("dot_input_precision",), expect_error=True),
    *_p("triton_cc_negative", ("triton",), P(params_case, make_params=_triton_params(
        compute_capability=-1)), ("compute_capability",), expect_error=True),
    *_p("triton_ptx_version_0", ("triton",), P(params_case, make_params=_triton_params(
        ptx_version=0)), ("ptx_version",), expect_error=True),
    *_p("triton_num_warps_str", ("triton",), P(params_case, make_params=_triton_params(
        num_warps="4")), ("num_warps",), expect_error=True),
    *_p("tpu_dim_sem_bogus", ("tpu",), P(tpu_dim_semantics, sem=("bogus",)), ("bogus",),
        expect_error=True),
    *_p("tpu_dim_sem_too_long", ("tpu",), P(tpu_dim_semantics, sem=("parallel", "arbitrary")),
        ("k_dim_sem",), expect_error=True),
    *_p("tpu_dim_sem_ok", ("tpu",), P(tpu_dim_semantics, sem=("arbitrary",)), ("k_dim_sem",)),
    *_p("tpu_vmem_negative", ("tpu",), P(params_case, make_params=_tpu_params(
        vmem_limit_bytes=-1)), ("vmem_limit_bytes",), expect_error=True),
    *[Case(f"tpu-interp_{tag}", P(params_case, interp="tpu", make_params=_tpu_interpret(**kw),
                                  where="interpret"), (field,), expect_error=True,
           needs="pallas_tpu", slow=True)
      for tag, field, kw in (("oob_bogus", "out_of_bounds_reads",
                              {"out_of_bounds_reads": "bogus"}),
                             ("uninit_bogus", "uninitialized_memory",
                              {"uninitialized_memory": "bogus"}),
                             ("threads_zero", "num_cores_or_threads",
                              {"num_cores_or_threads": 0}),
                             ("dma_mode_bogus", "dma_execution_mode",
                              {"dma_execution_mode": "bogus"}))],
    *_p("interpret_string", B, P(params_case, make_params=lambda: "yes", where="interpret"),
        ("k_bad_params", "interpret"), expect_error=True),
    *_p("interpret_int2", B, P(params_case, make_params=lambda: 2, where="interpret"),
        ("k_bad_params", "interpret"), expect_error=True),
    *_p("compiler_params_dict", B, P(params_case, make_params=lambda: {"triton": {
        "num_warps": 4}}), ("k_bad_params", "compiler_params"), expect_error=True),
    *_p("compiler_params_str", B, P(params_case, make_params=lambda: "fast"),
        ("k_bad_params", "compiler_params"), expect_error=True),
    *_p("cost_negative", B, P(cost_estimate_case, make=lambda: pl.CostEstimate(
        flops=-1, transcendentals=0, bytes_accessed=0)), ("k_cost",), either=True,
        expect_error=True),
    *_p("cost_dict", B, P(cost_estimate_case, make=lambda: {"flops": 1}), ("k_cost",),
        expect_error=True),
]


# Reported defects not fixed by the end of the session (issue 32 round 3 report)
XFAIL = {
    "tpu-debug_check_in_loop":
        "TPU interpret: a failed pl.debug_check inside fori_loop does not name the kernel",
    "tpu-ds_static_negative":
        "pallas_tpu: static pl.ds(-2, 4) is not refused at trace time (JAX's IndexError at run time)",
    "tpu-interp_threads_zero":
        "pallas_tpu.InterpretParams(num_cores_or_threads=0): JAX's message, field not named",
    "triton-masked_load_bad_mask":
        "pallas_triton: a mask of the wrong shape fails inside Triton's interpreter, no kernel name",
}
CASES = [dataclasses.replace(c, xfail=XFAIL.get(c.id)) for c in CASES]
