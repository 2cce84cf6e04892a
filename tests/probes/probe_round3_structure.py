"""Probe, round 3 (issue 32): grids, block shapes, index maps, scalar prefetch
and aliases, on each interpreter that takes them (built-in, Triton's, TPU
interpret mode, Mosaic GPU interpret mode).

References: the same kernel under JAX's Pallas ``interpret=True`` where JAX
defines the result, else NumPy (float64) on the documented semantics; a case
whose input must be refused has no reference (an error naming the kernel is
the only good outcome). Cases on a plugin's interpreter are ``slow``."""

import dataclasses
import functools

import jax
import jax.experimental.pallas as jpl
import jax.numpy as jnp
import numpy as np

import pallas_frontend as pl
from probes.common import Case

F32 = jnp.float32
ALL4 = ("builtin", "triton", "tpu", "mgpu")
ALL3 = ("builtin", "triton", "tpu")
NEEDS = {"builtin": None, "triton": "pallas_triton", "tpu": "pallas_tpu", "mgpu": "pallas_mgpu"}


def interpret_of(name):
    if name == "builtin":
        return True
    if name == "triton":
        import pallas_triton
        return pallas_triton.InterpretParams()
    if name == "tpu":
        import pallas_tpu
        return pallas_tpu.InterpretParams()
    import pallas_mgpu
    return pallas_mgpu.InterpretParams()


def _x(rng, *shape, dtype=np.float32):
    return (rng.standard_normal(shape) * 3).astype(dtype)


def _sds(shape, dtype=F32):
    return jax.ShapeDtypeStruct(shape, dtype)


def _both(interp, kernel, out_shape, specs, name=None, **kw):
    """(ours, JAX's interpret=True) for the same kernel; ``specs(mod)`` builds
    the grid/in_specs/out_specs with ``mod.BlockSpec``."""
    ours = pl.pallas_call(kernel, out_shape=out_shape, interpret=interpret_of(interp), name=name,
                          **specs(pl), **kw)
    theirs = jpl.pallas_call(kernel, out_shape=out_shape, interpret=True, name=name,
                             **specs(jpl), **kw)
    return ours, theirs


def _named(name):
    def deco(fn):
        fn.__name__ = fn.__qualname__ = name
        return fn
    return deco


# --- grids -------------------------------------------------------------------------

def ragged_2d(rng, interp):
    x = _x(rng, 10, 13)

    @_named("k_ragged2d")
    def kernel(x_ref, o_ref):
        o_ref[...] = (x_ref[...] * 2 + pl.program_id(0).astype(F32) * 100
                      + pl.program_id(1).astype(F32))
    spec = lambda m: dict(grid=(3, 2), in_specs=[m.BlockSpec((4, 8), lambda i, j: (i, j))],
                          out_specs=m.BlockSpec((4, 8), lambda i, j: (i, j)))
    ours, _ = _both(interp, kernel, _sds((10, 13)), spec)
    r, c = np.meshgrid(np.arange(10), np.arange(13), indexing="ij")
    return (lambda: ours(x)), x.astype(np.float64) * 2 + (r // 4) * 100 + c // 8


def grid_of_ones(rng, interp):
    x = _x(rng, 8, 128)

    @_named("k_ones5d")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1
    spec = lambda m: dict(grid=(1, 1, 1, 1, 1),
                          in_specs=[m.BlockSpec((8, 128), lambda *a: (0, 0))],
                          out_specs=m.BlockSpec((8, 128), lambda *a: (0, 0)))
    ours, _ = _both(interp, kernel, _sds((8, 128)), spec)
    return (lambda: ours(x)), x + 1


def grid_zero(rng, interp, grid=(0,)):
    x = _x(rng, 8, 128)

    @_named("k_zero_grid")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1
    spec = lambda m: dict(grid=grid, in_specs=[m.BlockSpec((8, 128), lambda *a: (0, 0))],
                          out_specs=m.BlockSpec((8, 128), lambda *a: (0, 0)))
    ours, _ = _both(interp, kernel, _sds((8, 128)), spec)
    return (lambda: ours(x)), None            # nothing runs: the output is undefined


def many_points(rng, interp, n=4096):
    x = _x(rng, n, 8)

    @_named("k_many_points")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 3 - pl.program_id(0).astype(F32)
    spec = lambda m: dict(grid=(n,), in_specs=[m.BlockSpec((1, 8), lambda i: (i, 0))],
                          out_specs=m.BlockSpec((1, 8), lambda i: (i, 0)))
    ours, _ = _both(interp, kernel, _sds((n, 8)), spec)
    return (lambda: ours(x)), x.astype(np.float64) * 3 - np.arange(n)[:, None]


def num_programs_values(rng, interp):
    @_named("k_num_programs")
    def kernel(o_ref):
        o_ref[...] = jnp.full(o_ref.shape, pl.num_programs(0) * 10 + pl.num_programs(1)
                              + pl.program_id(2) * 0, jnp.int32)
    spec = lambda m: dict(grid=(3, 1, 2), in_specs=[],
                          out_specs=m.BlockSpec((8, 128), lambda i, j, k: (0, 0)))
    ours, _ = _both(interp, kernel, _sds((8, 128), jnp.int32), spec)
    return (lambda: ours()), np.full((8, 128), 31, np.int32)


def three_d_permuted(rng, interp):
    x = _x(rng, 4, 8, 16)

    @_named("k_perm3d")
    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.transpose(x_ref[...], (2, 1, 0)) + 1
    spec = lambda m: dict(grid=(2, 2, 2),
                          in_specs=[m.BlockSpec((2, 4, 8), lambda i, j, k: (k, j, i))],
                          out_specs=m.BlockSpec((8, 4, 2), lambda i, j, k: (i, j, k)))
    ours, _ = _both(interp, kernel, _sds((16, 8, 4)), spec)
    return (lambda: ours(x)), np.transpose(x, (2, 1, 0)) + 1


def one_element(rng, interp):
    x = _x(rng, 1)

    @_named("k_one_elem")
    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.exp(x_ref[...])
    ours, _ = _both(interp, kernel, _sds((1,)), lambda m: dict(grid=(1,)))
    return (lambda: ours(x)), np.exp(x.astype(np.float64))


def long_vector(rng, interp):
    n = 1 << 18
    x = _x(rng, n)

    @_named("k_long_vec")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 0.5 + pl.program_id(0).astype(F32)
    b = 1 << 14
    spec = lambda m: dict(grid=(n // b,), in_specs=[m.BlockSpec((b,), lambda i: (i,))],
                          out_specs=m.BlockSpec((b,), lambda i: (i,)))
    ours, _ = _both(interp, kernel, _sds((n,)), spec)
    return (lambda: ours(x)), x.astype(np.float64) * 0.5 + np.arange(n) // b


def block_bigger_one_dim(rng, interp):
    x = _x(rng, 8, 100)

    @_named("k_bigger_dim")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1
    spec = lambda m: dict(grid=(2,), in_specs=[m.BlockSpec((4, 256), lambda i: (i, 0))],
                          out_specs=m.BlockSpec((4, 256), lambda i: (i, 0)))
    ours, _ = _both(interp, kernel, _sds((8, 100)), spec)
    return (lambda: ours(x)), x + 1


# --- index maps ----------------------------------------------------------------------

def _copy_kernel(name):
    @_named(name)
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 0.5
    return kernel


def index_map_case(rng, interp, name, in_map, nblocks=4, grid=4, expect="jax", ref_map=None):
    """A 1-D copy whose input index map is ``in_map``; ``expect`` "jax" compares
    with JAX's interpreter (running ``ref_map`` where JAX refuses ``in_map``
    itself), "error" wants a refusal."""
    x = _x(rng, nblocks * 8)
    kernel = _copy_kernel(name)

    def spec(m, index_map=in_map):
        return dict(grid=(grid,), in_specs=[m.BlockSpec((8,), index_map)],
                    out_specs=m.BlockSpec((8,), lambda i: (i,)))
    ours, _ = _both(interp, kernel, _sds((grid * 8,)), spec)
    _, theirs = _both(interp, kernel, _sds((grid * 8,)),
                      functools.partial(spec, index_map=ref_map or in_map))
    want = None if expect == "error" else np.asarray(theirs(x))
    return (lambda: ours(x)), want


def element_offsets(rng, interp):
    x = _x(rng, 40)

    @_named("k_elem_unaligned")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2
    spec = lambda m: dict(grid=(4,),
                          in_specs=[m.BlockSpec((m.Element(8),), lambda i: (i * 8 + 3,))],
                          out_specs=m.BlockSpec((8,), lambda i: (i,)))
    ours, _ = _both(interp, kernel, _sds((32,)), spec)
    return (lambda: ours(x)), x[3:35] * 2


def element_halo(rng, interp):
    x = _x(rng, 32)

    @_named("k_halo")
    def kernel(x_ref, o_ref):
        v = x_ref[...]
        o_ref[...] = v[1:9] * 2 + v[0:8] + v[2:10]
    spec = lambda m: dict(
        grid=(4,), in_specs=[m.BlockSpec((m.Element(10, (1, 1)),), lambda i: (i * 8,))],
        out_specs=m.BlockSpec((8,), lambda i: (i,)))
    ours, _ = _both(interp, kernel, _sds((32,)), spec)
    xp = np.concatenate([[0.0], x.astype(np.float64), [0.0]])
    want = xp[1:33] * 2 + xp[0:32] + xp[2:34]

    def interior(got):      # the two padded edge elements read undefined values
        got = np.asarray(got, np.float64)
        return np.allclose(got[1:31], want[1:31], rtol=1e-5, atol=1e-5) or (
            f"interior differs: {got[1:31][:6]} vs {want[1:31][:6]}")
    return (lambda: ours(x)), interior


def squeezed_dim(rng, interp):
    x = _x(rng, 4, 128)

    @_named("k_squeezed")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * pl.program_id(0).astype(F32)
    spec = lambda m: dict(grid=(4,), in_specs=[m.BlockSpec((None, 128), lambda i: (i, 0))],
                          out_specs=m.BlockSpec((None, 128), lambda i: (i, 0)))
    ours, _ = _both(interp, kernel, _sds((4, 128)), spec)
    return (lambda: ours(x)), x * np.arange(4)[:, None]


def all_squeezed(rng, interp):
    x = _x(rng, 4, 4)

    @_named("k_all_squeezed")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 3
    spec = lambda m: dict(grid=(4, 4),
                          in_specs=[m.BlockSpec((m.squeezed, m.squeezed), lambda i, j: (j, i))],
                          out_specs=m.BlockSpec((m.squeezed, m.squeezed), lambda i, j: (i, j)))
    ours, _ = _both(interp, kernel, _sds((4, 4)), spec)
    return (lambda: ours(x)), x.T * 3


def full_block_accumulate(rng, interp):
    x = _x(rng, 8, 128)

    @_named("k_full_acc")
    def kernel(x_ref, o_ref):
        @pl.when(pl.program_id(0) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)
        o_ref[...] += x_ref[...]
    ours, _ = _both(interp, kernel, _sds((8, 128)), lambda m: dict(grid=(3,)))
    return (lambda: ours(x)), x.astype(np.float64) * 3


def spec_without_index_map(rng, interp):
    x = _x(rng, 32)

    @_named("k_no_index_map")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2
    spec = lambda m: dict(grid=(4,), in_specs=[m.BlockSpec((8,))],
                          out_specs=m.BlockSpec((8,)))
    ours, theirs = _both(interp, kernel, _sds((8,)), spec)
    return (lambda: ours(x)), np.asarray(theirs(x))


def dict_operands(rng, interp):
    a, b = _x(rng, 16), _x(rng, 16)

    @_named("k_dict_in")
    def kernel(refs, o_ref):
        o_ref[...] = refs["a"][...] - refs["b"][...] * 2
    spec = lambda m: dict(grid=(2,),
                          in_specs=[{"a": m.BlockSpec((8,), lambda i: (i,)),
                                     "b": m.BlockSpec((8,), lambda i: (1 - i,))}],
                          out_specs=m.BlockSpec((8,), lambda i: (i,)))
    ours, _ = _both(interp, kernel, _sds((16,)), spec)
    return (lambda: ours({"a": a, "b": b})), a - np.roll(b, 8) * 2


def nested_outputs(rng, interp):
    x = _x(rng, 16)

    @_named("k_nested_out")
    def kernel(x_ref, pq, r):
        p, q = pq
        p[...] = x_ref[...] + 1
        q[...] = (x_ref[...] > 0).astype(jnp.int32)
        r[...] = x_ref[...] * x_ref[...]
    shapes = ((_sds((16,)), _sds((16,), jnp.int32)), _sds((16,)))
    ours, _ = _both(interp, kernel, shapes, lambda m: {})
    return (lambda: ours(x)), ((x + 1, (x > 0).astype(np.int32)), x.astype(np.float64) ** 2)


def revisit_nonconsecutive(rng, interp):
    x = _x(rng, 32)

    def make(m):
        @_named("k_revisit_mod")
        def kernel(x_ref, o_ref):
            @m.when(m.program_id(0) < 2)
            def _():
                o_ref[...] = jnp.zeros_like(o_ref)
            o_ref[...] += x_ref[...]
        return kernel
    spec = lambda m: dict(grid=(4,), in_specs=[m.BlockSpec((8,), lambda i: (i,))],
                          out_specs=m.BlockSpec((8,), lambda i: (i % 2,)))
    ours, _ = _both(interp, make(pl), _sds((16,)), spec)
    _, theirs = _both(interp, make(jpl), _sds((16,)), spec)
    return (lambda: ours(x)), np.asarray(theirs(x))


# --- scalar prefetch -----------------------------------------------------------------

def _prefetch_gather(rng, interp, rows, either=False):
    import jax.experimental.pallas.tpu as jtpu

    import pallas_tpu
    x = _x(rng, 32, 128)
    rows = np.asarray(rows, np.int32)

    def make(m):
        @_named("k_prefetch_rows")
        def kernel(idx_ref, x_ref, o_ref):
            o_ref[...] = x_ref[...] + idx_ref[m.program_id(0)].astype(F32)
        return kernel

    def gs(m):
        return m.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=(len(rows),),
            in_specs=[(pl if m is pallas_tpu else jpl).BlockSpec((8, 128),
                                                                  lambda i, idx: (idx[i], 0))],
            out_specs=(pl if m is pallas_tpu else jpl).BlockSpec((8, 128), lambda i, idx: (i, 0)))
    shape = _sds((8 * len(rows), 128))
    ours = pl.pallas_call(make(pl), out_shape=shape, grid_spec=gs(pallas_tpu),
                          interpret=interpret_of(interp))
    theirs = jpl.pallas_call(make(jpl), out_shape=shape, grid_spec=gs(jtpu), interpret=True)
    return (lambda: ours(rows, x)), np.asarray(theirs(rows, x))


def prefetch_edges(rng, interp):
    return _prefetch_gather(rng, interp, [3, 0, 3, 3, 1, 0])


def prefetch_out_of_range(rng, interp, value):
    return _prefetch_gather(rng, interp, [0, value, 2])


def prefetch_two_operands(rng, interp):
    import pallas_tpu
    x = _x(rng, 16, 128)
    rows = rng.permutation(2).astype(np.int32)
    scale = rng.integers(-5, 5, (2, 3)).astype(np.int32)

    @_named("k_prefetch_two")
    def kernel(r_ref, s_ref, x_ref, o_ref):
        i = pl.program_id(0)
        o_ref[...] = x_ref[...] * s_ref[i, 2].astype(F32) + r_ref[i].astype(F32)
    gs = pallas_tpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=2, grid=(2,),
        in_specs=[pl.BlockSpec((8, 128), lambda i, r, s: (r[i], 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i, r, s: (i, 0)))
    f = pl.pallas_call(kernel, out_shape=_sds((16, 128)), grid_spec=gs,
                       interpret=interpret_of(interp))
    want = np.concatenate([x[r * 8:(r + 1) * 8] * scale[i, 2] + r for i, r in enumerate(rows)])
    return (lambda: f(rows, scale, x)), want


# --- aliases ---------------------------------------------------------------------------

def _alias_call(rng, interp, aliases, name, n_in=2, dtype=np.float32, jit=True):
    xs = [_x(rng, 16, dtype=dtype) for _ in range(n_in)]

    @_named(name)
    def kernel(*refs):
        ins, outs = refs[:n_in], refs[n_in:]
        for k, o in enumerate(outs):
            o[...] = ins[k % n_in][...] * 2 + k
    f = pl.pallas_call(kernel, out_shape=[_sds((16,), dtype)] * 2,
                       input_output_aliases=aliases, interpret=interpret_of(interp))
    want = [xs[k % n_in] * 2 + k for k in range(2)]
    return (lambda: (jax.jit(f) if jit else f)(*xs)), want


def alias_partial_writes(rng, interp):
    x = _x(rng, 32)

    @_named("k_alias_skip")
    def kernel(x_ref, o_ref):
        @pl.when(pl.program_id(0) % 2 == 0)
        def _():
            o_ref[...] = x_ref[...] * -3
    spec = lambda m: dict(grid=(4,), in_specs=[m.BlockSpec((8,), lambda i: (i,))],
                          out_specs=m.BlockSpec((8,), lambda i: (i,)))
    ours, _ = _both(interp, kernel, _sds((32,)), spec, input_output_aliases={0: 0})
    want = x.copy()
    for b in (0, 2):
        want[b * 8:(b + 1) * 8] *= -3
    return (lambda: jax.jit(ours)(x)), want     # the user guide: unwritten blocks keep the input


def alias_empty_grid(rng, interp):
    x = _x(rng, 16, 128)

    @_named("k_alias_empty")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 5
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    f = pl.pallas_call(kernel, out_shape=_sds((16, 128)), grid=(0,), in_specs=[spec],
                       out_specs=spec, input_output_aliases={0: 0},
                       interpret=interpret_of(interp))
    return (lambda: jax.jit(f)(x)), x          # the user guide: untouched, as the input


def alias_same_array_twice(rng, interp):
    x = _x(rng, 32)

    @_named("k_alias_twice")
    def kernel(a_ref, b_ref, o_ref):
        o_ref[...] = a_ref[...] * 2 + b_ref[...]
    spec = pl.BlockSpec((8,), lambda i: (i,))
    f = pl.pallas_call(kernel, out_shape=_sds((32,)), grid=(4,), in_specs=[spec, spec],
                       out_specs=spec, input_output_aliases={0: 0},
                       interpret=interpret_of(interp))
    xj = jnp.asarray(x)
    return (lambda: jax.jit(f)(xj, xj)), x.astype(np.float64) * 3


def alias_with_prefetch(rng, interp):
    import pallas_tpu
    x = _x(rng, 16, 128)
    rows = np.array([1, 0], np.int32)

    @_named("k_alias_prefetch")
    def kernel(idx_ref, x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1
    gs = pallas_tpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1, grid=(2,),
        in_specs=[pl.BlockSpec((8, 128), lambda i, idx: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i, idx: (i, 0)))
    f = pl.pallas_call(kernel, out_shape=_sds((16, 128)), grid_spec=gs,
                       input_output_aliases={1: 0}, interpret=interpret_of(interp))
    return (lambda: jax.jit(f)(rows, x)), x + 1


# --- the table ---------------------------------------------------------------------------

def _on(interps, cid, fn, names, uses=None, **kw):
    """One case per interpreter; ``uses``: the plugin whose API the kernel calls."""
    return [Case(f"{i}-{cid}", functools.partial(fn, interp=i), names, needs=NEEDS[i] or uses,
                 slow=i != "builtin", **kw) for i in interps]


def _map(cid, in_map, interps=ALL3, expect="jax", either=False, **kw):
    build = functools.partial(index_map_case, name=f"k_{cid}", in_map=in_map, expect=expect, **kw)
    return _on(interps, cid, build, (f"k_{cid}",), expect_error=expect == "error" or either,
               either=either)


def _maps():
    out = []
    out += _map("map_negative", lambda i: (i - 4,), expect="error")
    out += _map("map_past_end", lambda i: (i + 1,), expect="error")
    out += _map("map_div", lambda i: (i // 2,))
    out += _map("map_minmax", lambda i: (jnp.minimum(jnp.maximum(i - 1, 0), 2),))
    out += _map("map_uint32", lambda i: (jnp.uint32(i),), interps=("builtin", "tpu"),
                ref_map=lambda i: (i,), either=True)
    out += _map("map_int8", lambda i: (jnp.int8(3 - i),), interps=("builtin", "tpu"),
                ref_map=lambda i: (3 - i,), either=True)
    out += _map("map_where", lambda i: (jnp.where(i % 2 == 0, i, 3 - i),))
    out += _map("map_const_array", lambda i: (jnp.array([2, 0, 3, 1], jnp.int32)[i],),
                interps=("builtin", "tpu"), either=True,
                ref_map=lambda i: (jnp.where(i == 0, 2, jnp.where(i == 2, 3, 1 - i // 2)),))
    out += _map("map_huge_np_int64", lambda i: (np.int64(2 ** 40),), interps=("builtin",),
                expect="error")
    out += _map("map_int32_overflow", lambda i: (i * (2 ** 30) * 4 + 1,), interps=("builtin",),
                either=True)     # int32 arithmetic wraps (i * 2^32 is 0), as in JAX
    out += _map("map_bool", lambda i: (i > 1,), interps=("builtin",), either=True,
                ref_map=lambda i: ((i > 1).astype(jnp.int32),))
    out += _map("map_shift", lambda i: (jax.lax.shift_right_logical(i * 4, 2),))
    return out


def _aliases():
    def al(cid, aliases, expect_error=False, either=False, **kw):
        b = functools.partial(_alias_call, aliases=aliases, name=f"k_{cid}", **kw)
        return _on(("builtin",), cid, b, (f"k_{cid}",), expect_error=expect_error, either=either)
    out = []
    out += al("alias_dict", {0: 0, 1: 1})
    out += al("alias_swapped", {0: 1, 1: 0}, either=True)
    out += al("alias_list_pairs", [(0, 0), (1, 1)], either=True)
    out += al("alias_tuple_pairs", ((0, 0),), either=True)
    out += al("alias_out_range", {0: 5}, expect_error=True)
    out += al("alias_in_range", {7: 0}, expect_error=True)
    out += al("alias_negative", {-1: 0}, expect_error=True)
    out += al("alias_two_to_one", {0: 0, 1: 0}, expect_error=True)
    out += al("alias_bool_key", {True: 0}, either=True)
    out += al("alias_string_key", {"0": 0}, expect_error=True)
    out += al("alias_float_key", {0.0: 1}, expect_error=True)
    out += al("alias_nojit", {0: 0}, jit=False)
    out += al("alias_one_input", {0: 1}, n_in=1)
    return out


def _alias_mismatch(rng, interp, kind):
    x = _x(rng, 16)

    @_named("k_alias_mismatch")
    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.zeros(o_ref.shape, o_ref.dtype)
    shape = _sds((16,), jnp.int32) if kind == "dtype" else _sds((8,))
    f = pl.pallas_call(kernel, out_shape=shape, input_output_aliases={0: 0},
                       interpret=interpret_of(interp))
    return (lambda: f(x)), None


CASES = [
    *_on(ALL4, "ragged_2d", ragged_2d, ("k_ragged2d",)),
    *_on(ALL4, "grid_of_ones", grid_of_ones, ("k_ones5d",)),
    *_on(ALL4, "grid_zero", grid_zero, ("k_zero_grid",), either=True),
    *_on(("builtin",), "grid_zero_2d", functools.partial(grid_zero, grid=(4, 0)),
         ("k_zero_grid",), either=True),
    *_on(("builtin", "tpu"), "many_points_4096", many_points, ("k_many_points",),
         subprocess=True, timeout=150),
    *_on(("tpu",), "many_points_16384", functools.partial(many_points, n=16384),
         ("k_many_points",), subprocess=True, timeout=200),
    *_on(("builtin",), "many_points_65536", functools.partial(many_points, n=65536),
         ("k_many_points",), subprocess=True, timeout=150),
    *_on(ALL4, "num_programs", num_programs_values, ("k_num_programs",)),
    *_on(ALL4, "three_d_permuted", three_d_permuted, ("k_perm3d",)),
    *_on(ALL4, "one_element", one_element, ("k_one_elem",), tol=1e-6),
    *_on(("builtin", "tpu"), "long_vector", long_vector, ("k_long_vec",)),
    *_on(ALL4, "block_bigger_one_dim", block_bigger_one_dim, ("k_bigger_dim",)),
    *_maps(),
    *_on(ALL3, "element_offsets", element_offsets, ("k_elem_unaligned",)),
    *_on(ALL3, "element_halo", element_halo, ("k_halo",)),
    *_on(ALL4, "squeezed_dim", squeezed_dim, ("k_squeezed",)),
    *_on(ALL3, "all_squeezed", all_squeezed, ("k_all_squeezed",)),
    *_on(ALL4, "full_block_accumulate", full_block_accumulate, ("k_full_acc",), tol=1e-5),
    *_on(ALL4, "spec_without_index_map", spec_without_index_map, ("k_no_index_map",)),
    *_on(ALL4, "dict_operands", dict_operands, ("k_dict_in",)),
    *_on(ALL4, "nested_outputs", nested_outputs, ("k_nested_out",)),
    *_on(("builtin", "tpu"), "revisit_nonconsecutive", revisit_nonconsecutive,
         ("k_revisit_mod",), either=True),
    *[Case(f"{i}-prefetch_edges", functools.partial(prefetch_edges, interp=i),
           ("k_prefetch_rows",), needs="pallas_tpu", slow=i != "builtin")
      for i in ("builtin", "tpu")],
    *[Case(f"{i}-prefetch_{tag}", functools.partial(prefetch_out_of_range, interp=i, value=v),
           ("k_prefetch_rows",), needs="pallas_tpu", slow=i != "builtin", either=True)
      for i in ("builtin", "tpu") for tag, v in (("minus1", -1), ("past_end", 4),
                                                 ("two_pow_25", 2 ** 25 + 1),
                                                 ("int32_max", 2 ** 31 - 1))],
    *[Case(f"{i}-prefetch_two", functools.partial(prefetch_two_operands, interp=i),
           ("k_prefetch_two",), needs="pallas_tpu", slow=i != "builtin")
      for i in ("builtin", "tpu")],
    *_aliases(),
    *[Case(f"builtin-alias_{k}_mismatch", functools.partial(_alias_mismatch, interp="builtin",
                                                            kind=k),
           ("k_alias_mismatch",), expect_error=True) for k in ("dtype", "shape")],
    *_on(ALL4, "alias_partial_writes", alias_partial_writes, ("k_alias_skip",)),
    *_on(ALL4, "alias_empty_grid", alias_empty_grid, ("k_alias_empty",)),
    *_on(ALL4, "alias_same_array_twice", alias_same_array_twice, ("k_alias_twice",)),
    *_on(("builtin",), "many_points_2pow20", functools.partial(many_points, n=1 << 20),
         ("k_many_points",), subprocess=True, timeout=200),
    *[Case(f"{i}-alias_with_prefetch", functools.partial(alias_with_prefetch, interp=i),
           ("k_alias_prefetch",), needs="pallas_tpu", slow=i != "builtin")
      for i in ("builtin", "tpu")],
]


# Reported defects not fixed by the end of the session (issue 32 round 3 report)
XFAIL = {
    "tpu-prefetch_minus1":
        "TPU interpret: a prefetched block index out of range is JAX's IndexError, no kernel name",
    "tpu-prefetch_past_end":
        "TPU interpret: a prefetched block index out of range is JAX's IndexError, no kernel name",
    "tpu-prefetch_two_pow_25":
        "TPU interpret: a prefetched block index out of range is JAX's IndexError, no kernel name",
    "tpu-revisit_nonconsecutive":
        "JAX's TPU interpret 'Revisited block' error does not name the kernel",
}
CASES = [dataclasses.replace(c, xfail=XFAIL.get(c.id)) for c in CASES]
