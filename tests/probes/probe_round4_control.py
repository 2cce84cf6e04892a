"""Probe, round 4 (issue 39 item 6): control flow and transformations that
rounds 1-3 did not try: ``pl.when`` nested three deep on data, with Python,
NumPy and integer predicates and a vector predicate; ``lax.cond`` on data;
``fori_loop`` with both bounds dynamic, unrolled, writing rows of a Ref; a
``while_loop`` whose condition reads a Ref; ``run_scoped`` in a loop and
returning a tuple; atomics on a backend without them; matmuls of odd shapes
(1x1, matrix-vector, 3x5x7, batched, NT, float16, int8 into int32, einsum);
``pl.debug_print`` with a format that does not match its arguments; and around
``pallas_call``: ``custom_vjp``, ``checkpoint``, ``jacfwd``, ``linearize``,
``vmap`` with ``in_axes=None``/``out_axes=1``/a 0-sized batch, ``lax.map``,
``scan`` of length 0, ``eval_shape``, ``make_jaxpr``, AOT ``lower().compile()``,
``disable_jit``, ``named_scope``; ``shard_map`` over 4 CPU devices.

References: NumPy float64, or JAX's Pallas ``interpret=True`` on the same
kernel; a case whose input must be refused has none. Cases that print or need
4 devices run in their own process; cases on a plugin's interpreter are
``slow``."""

# Counts (issue 39 round 4, 2026-12-06; seed 20261206), 175 cases over the four
# interpreters: before fixes 1 hang (builtin while_ref: a while condition reading a Ref
# the body writes never ended; JAX's interpret=True hangs too), 1 crash (tpu
# vmap_zero_batch: ZeroDivisionError in JAX's TPU interpreter); after fixes (a4a054f,
# 6c89841): 143 correct, 32 clear errors, 0 unhelpful, 0 crash, 0 hang, 0 silent-wrong.


import functools

import jax
import jax.experimental.pallas as jpl
import jax.numpy as jnp
import numpy as np
from jax import lax

import pallas_frontend as pl
from probes.common import Case
from probes.probe_round3_structure import NEEDS, _named, _sds, _x, interpret_of
from probes.probe_wrong_results import _capture_stdout

F32 = jnp.float32
ALL4 = ("builtin", "triton", "tpu", "mgpu")
ALL3 = ("builtin", "triton", "tpu")
BP = ("builtin", "tpu")
B = ("builtin",)
SHAPE = (8, 128)
P = functools.partial


def _call(interp, kernel, out_shape, **kw):
    return pl.pallas_call(kernel, out_shape=out_shape, interpret=interpret_of(interp), **kw)


def _close(want, tol=1e-4):
    want = np.asarray(want, np.float64)

    def check(got):
        got = np.asarray(got, np.float64)
        if got.shape != want.shape:
            return f"shape {got.shape}, want {want.shape}"
        if np.allclose(got, want, rtol=tol, atol=tol):
            return True
        return f"max error {np.abs(got - want).max()}"
    return check


# --- pl.when and cond -------------------------------------------------------------------

def when_nested(rng, interp):
    x = _x(rng, 4, 8, 128)

    @_named("k_when_nested")
    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.zeros_like(o_ref)
        v = x_ref[...]

        @pl.when(v[0, 0] > 0)
        def _():
            o_ref[...] += 1.0

            @pl.when(v[0, 1] > 0)
            def _():
                o_ref[...] += 10.0

                @pl.when(v[1, 0] > v[1, 1])
                def _():
                    o_ref[...] += 100.0
    spec = pl.BlockSpec((None, 8, 128), lambda i: (i, 0, 0))
    f = _call(interp, kernel, _sds((4, 8, 128)), grid=(4,), in_specs=[spec], out_specs=spec)
    want = np.zeros((4, 8, 128))
    for i in range(4):
        a, b, c = x[i, 0, 0] > 0, x[i, 0, 1] > 0, x[i, 1, 0] > x[i, 1, 1]
        want[i] = a * 1.0 + (a and b) * 10.0 + (a and b and c) * 100.0
    return (lambda: f(x)), want


def when_pred(rng, interp, pred, refuse=False):
    x = _x(rng, *SHAPE)

    def make(m):
        @_named("k_when_pred")
        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...]
            p = pred(m, x_ref)

            @m.when(p)
            def _():
                o_ref[...] = x_ref[...] * -2
        return kernel
    f = _call(interp, make(pl), _sds(SHAPE), grid=(3,))
    if refuse:
        return (lambda: f(x)), None
    try:
        want = np.asarray(jpl.pallas_call(make(jpl), out_shape=_sds(SHAPE), grid=(3,),
                                          interpret=True)(x))
    except Exception:       # noqa: BLE001 -- JAX refuses it: an error or a result will do
        want = None
    return (lambda: f(x)), want


PREDS = {
    "when_py_true": (lambda m, r: True, False),
    "when_py_false": (lambda m, r: False, False),
    "when_np_bool": (lambda m, r: np.bool_(True), False),
    "when_int_pred": (lambda m, r: m.program_id(0), None),
    "when_float_pred": (lambda m, r: r[0, 0], None),
    "when_vector_pred": (lambda m, r: r[...] > 0, True),
    "when_shape1_pred": (lambda m, r: r[0:1, 0] > 0, None),
}


def cond_on_data(rng, interp):
    x = _x(rng, 4, 8, 128)

    @_named("k_cond_data")
    def kernel(x_ref, o_ref):
        v = x_ref[...]
        o_ref[...] = lax.cond(jnp.sum(v) > 0, lambda a: jnp.exp(-a * a), lambda a: a * 3 - 1, v)
    spec = pl.BlockSpec((None, 8, 128), lambda i: (i, 0, 0))
    f = _call(interp, kernel, _sds((4, 8, 128)), grid=(4,), in_specs=[spec], out_specs=spec)
    x64 = x.astype(np.float64)
    want = np.stack([np.exp(-v * v) if v.sum() > 0 else v * 3 - 1 for v in x64])
    return (lambda: f(x)), _close(want)


# --- loops -------------------------------------------------------------------------------

def fori_both_dynamic(rng, interp, lo, hi):
    x = _x(rng, *SHAPE)

    @_named("k_fori_both")
    def kernel(b_ref, x_ref, o_ref):
        o_ref[...] = lax.fori_loop(b_ref[0], b_ref[1], lambda i, v: v * 0.5 + i.astype(F32),
                                   x_ref[...])
    want = x.astype(np.float64)
    for i in range(lo, hi):
        want = want * 0.5 + i
    f = _call(interp, kernel, _sds(SHAPE))
    return (lambda: f(np.array([lo, hi], np.int32), x)), _close(want, 1e-5)


def fori_unroll(rng, interp, unroll, dynamic=False):
    x = _x(rng, *SHAPE)

    @_named("k_fori_unroll")
    def kernel(n_ref, x_ref, o_ref):
        hi = n_ref[0] if dynamic else 5
        o_ref[...] = lax.fori_loop(0, hi, lambda i, v: v + i.astype(F32), x_ref[...],
                                   unroll=unroll)
    f = _call(interp, kernel, _sds(SHAPE))
    return (lambda: f(np.array([5], np.int32), x)), x + 10.0


def fori_row_writes(rng, interp):
    x = _x(rng, 16, 128)

    @_named("k_fori_rows")
    def kernel(x_ref, o_ref):
        def body(i, c):
            o_ref[pl.ds(15 - i, 1), :] = x_ref[pl.ds(i, 1), :] + c
            return c + 1.0
        lax.fori_loop(0, 16, body, 0.0)
    f = _call(interp, kernel, _sds((16, 128)))
    return (lambda: f(x)), x[::-1] + np.arange(16)[::-1, None]


def while_reads_ref(rng, interp):
    x = np.abs(_x(rng, *SHAPE)) + 0.5

    @_named("k_while_ref")
    def kernel(x_ref, o_ref, n_ref):
        o_ref[...] = x_ref[...]
        n_ref[...] = jnp.zeros_like(n_ref)

        def cond(_):
            return o_ref[0, 0] < 100.0

        def body(c):
            o_ref[...] = o_ref[...] * 2
            n_ref[...] += 1
            return c
        lax.while_loop(cond, body, 0)
    v, n = x.astype(np.float64), 0
    while v[0, 0] < 100.0:
        v, n = v * 2, n + 1
    f = _call(interp, kernel, (_sds(SHAPE), _sds(SHAPE, jnp.int32)))
    return (lambda: f(x)), (v, np.full(SHAPE, n, np.int32))


def scoped_in_loop(rng, interp):
    import pallas_tpu
    x = _x(rng, *SHAPE)

    @_named("k_scoped_loop")
    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.zeros_like(o_ref)

        def body(i, c):
            def scoped(tmp):
                tmp[...] = x_ref[...] * i.astype(F32)
                o_ref[...] += tmp[...]
            pl.run_scoped(scoped, pallas_tpu.VMEM(SHAPE, F32))
            return c
        lax.fori_loop(0, 4, body, 0)
    return (lambda: _call(interp, kernel, _sds(SHAPE))(x)), x.astype(np.float64) * 6


def scoped_tuple(rng, interp):
    import pallas_tpu
    x = _x(rng, *SHAPE)

    @_named("k_scoped_tuple")
    def kernel(x_ref, o_ref):
        def scoped(a, b):
            a[...] = x_ref[...] + 1
            b[...] = x_ref[...] * 2
            return a[...] * b[...], jnp.sum(b[...])
        prod, total = pl.run_scoped(scoped, pallas_tpu.VMEM(SHAPE, F32),
                                    pallas_tpu.VMEM(SHAPE, F32))
        o_ref[...] = prod + total
    x64 = x.astype(np.float64)
    return (lambda: _call(interp, kernel, _sds(SHAPE))(x)), _close((x64 + 1) * x64 * 2
                                                                    + (2 * x64).sum(), 1e-3)


def atomic_elsewhere(rng, interp):
    import pallas_triton as pt
    x = _x(rng, 16)

    @_named("k_atomic_elsewhere")
    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.zeros_like(o_ref)
        pt.atomic_add(o_ref, pl.ds(0, 16), x_ref[...])
    return (lambda: _call(interp, kernel, _sds((16,)))(x)), None


def atomic_dup_lanes(rng, interp):
    """atomic_add twice into the same block in one program, then a masked third."""
    import pallas_triton as pt
    x = _x(rng, 16)

    @_named("k_atomic_dup")
    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.zeros_like(o_ref)
        pt.atomic_add(o_ref, pl.ds(0, 16), x_ref[...])
        pt.atomic_add(o_ref, pl.ds(0, 16), x_ref[...] * 2)
        idx = lax.broadcasted_iota(jnp.int32, (16,), 0)
        pt.atomic_add(o_ref, pl.ds(0, 16), x_ref[...], mask=idx < 5)
    want = x.astype(np.float64) * 3
    want[:5] += x[:5]
    return (lambda: _call(interp, kernel, _sds((16,)))(x)), _close(want, 1e-5)


# --- matmuls -------------------------------------------------------------------------------

def dot_odd(rng, interp, kind):
    shapes = {"1x1": ((1, 1), (1, 1)), "matvec": ((8, 128), (128,)), "357": ((3, 5), (5, 7)),
              "batched": ((2, 8, 16), (2, 16, 8)), "nt": ((16, 32), (8, 32)),
              "f16": ((16, 32), (32, 16)), "int8": ((16, 32), (32, 16)),
              "einsum": ((4, 8, 16), (16, 8)), "vecvec": ((128,), (128,)),
              "int8_i8out": ((16, 32), (32, 16))}[kind]
    (sa, sb) = shapes
    if kind.startswith("int8"):
        a = rng.integers(-128, 128, sa).astype(np.int8)
        b = rng.integers(-128, 128, sb).astype(np.int8)
    else:
        a, b = _x(rng, *sa), _x(rng, *sb)
        if kind == "f16":
            a, b = a.astype(np.float16), b.astype(np.float16)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    hi = lax.Precision.HIGHEST

    def fn(u, v):
        if kind == "batched":
            return lax.dot_general(u, v, (((2,), (1,)), ((0,), (0,))), precision=hi,
                                   preferred_element_type=F32)
        if kind == "nt":
            return lax.dot_general(u, v, (((1,), (1,)), ((), ())), precision=hi,
                                   preferred_element_type=F32)
        if kind == "einsum":
            return jnp.einsum("bij,jk->bik", u, v, precision=hi, preferred_element_type=F32)
        if kind == "int8":
            return jnp.dot(u, v, preferred_element_type=jnp.int32)
        if kind == "int8_i8out":
            return jnp.dot(u, v)        # int8 result: JAX wraps
        return jnp.dot(u, v, precision=hi, preferred_element_type=F32)
    want = {"batched": lambda: np.einsum("bij,bjk->bik", a64, b64),
            "nt": lambda: a64 @ b64.T, "einsum": lambda: np.einsum("bij,jk->bik", a64, b64)
            }.get(kind, lambda: a64 @ b64)()
    out = jax.eval_shape(fn, a, b)

    @_named(f"k_dot_{kind}")
    def kernel(a_ref, b_ref, o_ref):
        o_ref[...] = fn(a_ref[...], b_ref[...])
    f = _call(interp, kernel, out)
    if kind == "int8":
        return (lambda: f(a, b)), want.astype(np.int32)
    if kind == "int8_i8out":
        return (lambda: f(a, b)), np.asarray(jax.jit(fn)(a, b))
    tol = 2e-2 if kind == "f16" else 1e-4
    return (lambda: f(a, b)), _close(want, tol * max(1.0, np.sqrt(sa[-1])))


# --- debug_print -----------------------------------------------------------------------

def print_mismatch(rng, interp, fmt, nargs):
    x = _x(rng, 8)

    @_named("k_print_fmt")
    def kernel(x_ref, o_ref):
        pl.debug_print(fmt, *[x_ref[k] for k in range(nargs)])
        o_ref[...] = x_ref[...]
    f = _call(interp, kernel, _sds((8,)))
    return (lambda: _capture_stdout(lambda: f(x))), None


def print_in_loop(rng, interp):
    x = _x(rng, 8)

    @_named("k_print_loop")
    def kernel(x_ref, o_ref):
        def body(i, c):
            pl.debug_print("step {}", i)
            return c
        lax.fori_loop(0, 3, body, 0)
        o_ref[...] = x_ref[...]
    f = _call(interp, kernel, _sds((8,)))
    return (lambda: _capture_stdout(lambda: f(x))), (
        lambda got: [ln.strip() for ln in got.strip().splitlines() if "step" in ln][-3:]
        == ["step 0", "step 1", "step 2"] or f"printed {got!r}")


# --- transformations ---------------------------------------------------------------------

def _square(interp, name="k_square"):
    @_named(name)
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * x_ref[...] + jnp.sin(x_ref[...])
    return lambda x: _call(interp, kernel, _sds(x.shape))(x)


def custom_vjp_case(rng, interp, remat=False):
    x = _x(rng, *SHAPE)
    sq = _square(interp, "k_cvjp_fwd")

    @_named("k_cvjp_bwd")
    def bwd_kernel(x_ref, g_ref, o_ref):
        o_ref[...] = g_ref[...] * (2 * x_ref[...] + jnp.cos(x_ref[...]))
    bwd_call = _call(interp, bwd_kernel, _sds(SHAPE))

    @jax.custom_vjp
    def f(v):
        return sq(v)

    def f_fwd(v):
        return sq(v), v

    def f_bwd(v, g):
        return (bwd_call(v, g),)
    f.defvjp(f_fwd, f_bwd)
    g = jax.checkpoint(f) if remat else f
    loss = lambda v: jnp.sum(g(v) * 0.5)
    x64 = x.astype(np.float64)
    return (lambda: jax.jit(jax.grad(loss))(x)), _close(0.5 * (2 * x64 + np.cos(x64)), 1e-4)


def jacfwd_case(rng, interp):
    x = _x(rng, 16)
    sq = _square(interp, "k_jacfwd")
    x64 = x.astype(np.float64)
    return (lambda: jax.jacfwd(sq)(x)), _close(np.diag(2 * x64 + np.cos(x64)), 1e-4)


def linearize_case(rng, interp):
    x, t = _x(rng, *SHAPE), _x(rng, *SHAPE)
    sq = _square(interp, "k_linearize")
    x64, t64 = x.astype(np.float64), t.astype(np.float64)

    def run():
        y, lin = jax.linearize(sq, x)
        return y, lin(t)
    return run, (_close(x64 * x64 + np.sin(x64)), _close((2 * x64 + np.cos(x64)) * t64))


def vmap_axes(rng, interp, kind):
    a = _x(rng, 3, 8, 128) if kind != "zero_batch" else _x(rng, 0, 8, 128)
    b = _x(rng, 8, 128)

    @_named("k_vmap_axes")
    def kernel(a_ref, b_ref, o_ref):
        o_ref[...] = a_ref[...] * 2 - b_ref[...]
    f = _call(interp, kernel, _sds(SHAPE))
    want = a * 2 - b
    if kind == "out_axes1":
        return (lambda: jax.vmap(f, in_axes=(0, None), out_axes=1)(a, b)), np.moveaxis(want, 0, 1)
    if kind == "in_axes2":
        a2 = np.moveaxis(a, 0, 2)
        return (lambda: jax.vmap(f, in_axes=(2, None))(a2, b)), want
    return (lambda: jax.vmap(f, in_axes=(0, None))(a, b)), want


def lax_map_case(rng, interp):
    x = _x(rng, 5, 8, 128)
    sq = _square(interp, "k_lax_map")
    x64 = x.astype(np.float64)
    return (lambda: lax.map(sq, x)), _close(x64 * x64 + np.sin(x64))


def scan_zero(rng, interp):
    x = _x(rng, *SHAPE)
    sq = _square(interp, "k_scan_zero")

    def run():
        c, ys = lax.scan(lambda c, _: (sq(c), c), x, None, length=0)
        return c, ys
    return run, (x, np.zeros((0, 8, 128), np.float32))


def eval_shape_case(rng, interp):
    x = _x(rng, 16, 128)

    @_named("k_eval_shape")
    def kernel(x_ref, o_ref, p_ref):
        o_ref[...] = x_ref[...]
        p_ref[...] = x_ref[...].astype(jnp.int32)
    f = _call(interp, kernel, (_sds((16, 128)), _sds((16, 128), jnp.int32)))

    def run():
        s = jax.eval_shape(f, x)
        return np.array([[d for d in v.shape] + [np.dtype(v.dtype).itemsize] for v in s])
    return run, np.array([[16, 128, 4], [16, 128, 4]])


def make_jaxpr_case(rng, interp):
    x = _x(rng, 16, 128)
    sq = _square(interp, "k_make_jaxpr")

    def run():
        text = str(jax.make_jaxpr(sq)(x))
        return np.array(["pallas_call" in text])
    return run, np.array([True])


def aot_case(rng, interp):
    x = _x(rng, 16, 128)
    sq = _square(interp, "k_aot")
    x64 = x.astype(np.float64)
    return (lambda: jax.jit(sq).lower(x).compile()(x)), _close(x64 * x64 + np.sin(x64))


def disable_jit_case(rng, interp):
    x = _x(rng, 16, 128)
    sq = _square(interp, "k_nojit")
    x64 = x.astype(np.float64)

    def run():
        with jax.disable_jit():
            return sq(x)
    return run, _close(x64 * x64 + np.sin(x64))


def named_scope_case(rng, interp):
    x = _x(rng, 16, 128)
    sq = _square(interp, "k_named_scope")
    x64 = x.astype(np.float64)

    def run():
        with jax.named_scope("outer scope/with slash"):
            return jax.jit(jax.named_call(sq, name="my call"))(x)
    return run, _close(x64 * x64 + np.sin(x64))


def shard_map_case(rng, interp, kind):
    from jax.sharding import Mesh, PartitionSpec as PS
    try:
        from jax import shard_map
    except ImportError:                     # JAX 0.10: the experimental one
        from jax.experimental.shard_map import shard_map
    x = _x(rng, 32, 128)
    devs = np.array(jax.devices()[:4])
    if len(devs) < 4:
        raise RuntimeError("k_shard: needs 4 CPU devices (XLA_FLAGS)")
    mesh = Mesh(devs, ("x",))
    sq = _square(interp, "k_shard")
    x64 = x.astype(np.float64)
    ref = x64 * x64 + np.sin(x64)
    if kind == "rows":
        f = shard_map(sq, mesh=mesh, in_specs=PS("x"), out_specs=PS("x"))
        return (lambda: jax.jit(f)(x)), _close(ref)
    if kind == "psum":
        f = shard_map(lambda v: jax.lax.psum(sq(v), "x"), mesh=mesh, in_specs=PS("x"),
                      out_specs=PS())
        return (lambda: jax.jit(f)(x)), _close(ref.reshape(4, 8, 128).sum(0), 1e-3)
    if kind == "replicated":
        f = shard_map(sq, mesh=mesh, in_specs=PS(), out_specs=PS())
        return (lambda: jax.jit(f)(x)), _close(ref)
    f = shard_map(sq, mesh=mesh, in_specs=PS(None, "x"), out_specs=PS(None, "x"))   # columns
    return (lambda: jax.jit(f)(x)), _close(ref)


# --- the table ---------------------------------------------------------------------------

def _on(interps, cid, fn, names=None, uses=None, **kw):
    names = names or (f"k_{cid}",)
    return [Case(f"{i}-{cid}", P(fn, interp=i), names, needs=NEEDS[i] or uses,
                 slow=i != "builtin", **kw) for i in interps]


SHARD_ENV = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}


def _cases():
    out = []
    out += _on(ALL4, "when_nested", when_nested)
    for cid, (pred, refuse) in PREDS.items():
        out += _on(ALL4 if cid in ("when_py_false", "when_vector_pred") else ALL3, cid,
                   P(when_pred, pred=pred, refuse=bool(refuse)), ("k_when_pred",),
                   expect_error=refuse is not False, either=refuse is None)
    out += _on(ALL4, "cond_data", cond_on_data)
    for lo, hi in ((2, 7), (7, 2), (-3, 3), (0, 0)):
        cid = f"fori_both_{lo}_{hi}".replace("-", "m")
        out += _on(ALL3, cid, P(fori_both_dynamic, lo=lo, hi=hi), ("k_fori_both",))
    out += _on(ALL4, "fori_unroll2", P(fori_unroll, unroll=2), ("k_fori_unroll",))
    out += _on(ALL3, "fori_unroll_true", P(fori_unroll, unroll=True), ("k_fori_unroll",))
    out += _on(ALL3, "fori_unroll_dynamic", P(fori_unroll, unroll=True, dynamic=True),
               ("k_fori_unroll",), expect_error=True, either=True)
    out += _on(ALL4, "fori_rows", fori_row_writes)
    # JAX's own interpret=True never ends on it: its own process, with a time limit
    out += _on(ALL3, "while_ref", while_reads_ref, subprocess=True, timeout=150)
    out += _on(BP, "scoped_loop", scoped_in_loop, uses="pallas_tpu")
    out += _on(BP, "scoped_tuple", scoped_tuple, uses="pallas_tpu")
    out += _on(("tpu", "mgpu"), "atomic_elsewhere", atomic_elsewhere,
               ("k_atomic_elsewhere", "atomic"), uses="pallas_triton", expect_error=True)
    out += _on(("builtin", "triton"), "atomic_dup", atomic_dup_lanes, uses="pallas_triton")
    for kind in ("1x1", "matvec", "357", "batched", "nt", "f16", "int8", "einsum", "vecvec",
                 "int8_i8out"):
        interps = ALL4 if kind in ("357", "nt") else ALL3
        # a shape a backend cannot take is a clear error naming the kernel, or JAX's result
        out += _on(interps, f"dot_{kind}", P(dot_odd, kind=kind), (f"k_dot_{kind}",),
                   expect_error=True, either=True)
    for tag, fmt, n in (("too_few", "{} {} {}", 1), ("too_many", "{}", 3),
                        ("no_braces", "value", 1), ("named", "{x}", 1)):
        out += _on(ALL3, f"print_{tag}", P(print_mismatch, fmt=fmt, nargs=n), ("k_print_fmt",),
                   expect_error=True, either=tag == "no_braces", subprocess=True)
    out += _on(BP, "print_loop", print_in_loop, ("k_print_loop",), subprocess=True)
    out += _on(ALL4, "cvjp", custom_vjp_case, ("k_cvjp_fwd",))
    out += _on(ALL3, "cvjp_remat", P(custom_vjp_case, remat=True), ("k_cvjp_fwd",))
    out += _on(ALL3, "jacfwd", jacfwd_case)
    out += _on(ALL3, "linearize", linearize_case)
    for kind in ("in_none", "out_axes1", "in_axes2", "zero_batch"):
        out += _on(ALL4 if kind == "out_axes1" else ALL3, f"vmap_{kind}",
                   P(vmap_axes, kind=kind), ("k_vmap_axes",))
    out += _on(ALL3, "lax_map", lax_map_case)
    out += _on(ALL4, "scan_zero", scan_zero)
    out += _on(ALL3, "eval_shape", eval_shape_case)
    out += _on(ALL3, "make_jaxpr", make_jaxpr_case)
    out += _on(ALL4, "aot", aot_case)
    out += _on(ALL3, "nojit", disable_jit_case)
    out += _on(ALL3, "named_scope", named_scope_case)
    for kind in ("rows", "psum", "replicated", "cols"):
        out += _on(ALL3, f"shard_{kind}", P(shard_map_case, kind=kind), ("k_shard",),
                   env=SHARD_ENV, timeout=150)
    return out


CASES = _cases()
