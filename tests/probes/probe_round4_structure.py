"""Probe, round 4 (issue 39 item 6): what a careless user hands ``pallas_call``
that rounds 1-3 did not: index maps returning lists, nested tuples, arrays,
None, Python floats, a raising map or a data-dependent cond; BlockSpecs with
``pipeline_mode=Buffered(n)``, memory spaces and ``block_shape=None``; grids
given as an int, list, NumPy or bool values; scalar prefetch of odd shapes and
counts; aliases given as NumPy keys, pairs naming one input twice, over dict
operands; ``program_id``/``num_programs`` called outside a kernel; ``name=``
and ``cost_estimate`` with odd values; zero-sized operands; dict and
namedtuple outputs; strided ``pl.ds`` reads and writes; Ref indexing forms.

References: JAX's Pallas ``interpret=True`` on the same kernel where it runs
it (an error there too makes the case ``either``), else NumPy float64; a case
whose input must be refused has none. Cases on a plugin's interpreter are
``slow``."""

# Counts (issue 39 round 4, 2026-12-06; seed 20261206), 379 cases over the four
# interpreters: before fixes 2 silent-wrong (name=123 and name=b"k" ran; JAX fails on
# them), 1 crash (pl.ds stride 0: ZeroDivisionError), 2 unhelpful (stride 0 under TPU
# interpret: JAX's callback error; a jnp.int32 block dim refused where JAX takes it);
# after fixes (d9e442a, 96560be): 194 correct, 184 clear errors, 1 unhelpful
# (tpu-pf_short_idx: a scalar-prefetch read past its array in an index map is JAX's
# callback IndexError, as round 3's tpu-prefetch_* cases), 0 crash, 0 hang, 0 silent-wrong.


import collections
import functools

import jax
import jax.experimental.pallas as jpl
import jax.numpy as jnp
import numpy as np
from jax import lax

import pallas_frontend as pl
from probes.common import Case
from probes.probe_round3_structure import NEEDS, _named, _sds, _x, interpret_of

F32 = jnp.float32
ALL4 = ("builtin", "triton", "tpu", "mgpu")
ALL3 = ("builtin", "triton", "tpu")
BP = ("builtin", "tpu")
B = ("builtin",)
P = functools.partial


def _jax_or_none(fn):
    """JAX's result, or None where JAX refuses the same call (then any clear
    error, or a result, is acceptable: the case is ``either``)."""
    try:
        return np.asarray(fn())
    except Exception:       # noqa: BLE001
        return None


class RefusedWhatJaxRuns(Exception):
    """Ours refused a call JAX's interpreter runs: counted ``unhelpful`` (the
    message carries no kernel name on purpose), never a clear error."""


def _declared_limit(err) -> bool:
    """A backend's stated limit (what its chip or compiler refuses), not a refusal of
    what the interface allows: TPU chip checks, Mosaic GPU's unsupported forms."""
    return "Capability" in type(err).__name__ or isinstance(err, NotImplementedError)


def _as_jax(thunk, want):
    """``thunk``, but an error where JAX gave ``want`` (not None) is ours to explain."""
    if want is None:
        return thunk

    def run():
        try:
            return thunk()
        except Exception as err:     # noqa: BLE001
            if _declared_limit(err):
                raise
            raise RefusedWhatJaxRuns(f"refused what JAX runs ({type(err).__name__}: "
                                     f"{str(err)[:200].replace('k_', 'kernel ')})") from err
    return run


def _pair(interp, kernel, out_shape, specs, **kw):
    ours = pl.pallas_call(kernel, out_shape=out_shape, interpret=interpret_of(interp),
                          **specs(pl), **kw)
    theirs = jpl.pallas_call(kernel, out_shape=out_shape, interpret=True, **specs(jpl), **kw)
    return ours, theirs


# --- index maps ------------------------------------------------------------------------------

def map_case(rng, interp, cid, in_map, shape=(32, 128), block=(8, 128), grid=(4,),
             out_map=lambda i: (i, 0), refuse=False):
    """A copy-plus-program-id kernel whose input index map is ``in_map``;
    compared with JAX's interpreter (None: JAX refuses it too)."""
    x = _x(rng, *shape)

    @_named(f"k_{cid}")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2 + 1

    def specs(m):
        return dict(grid=grid, in_specs=[m.BlockSpec(block, in_map)],
                    out_specs=m.BlockSpec(block, out_map))
    out = _sds((grid[0] * block[0],) + tuple(shape[1:]))
    ours, theirs = _pair(interp, kernel, out, specs)
    want = None if refuse else _jax_or_none(lambda: theirs(x))
    return _as_jax(lambda: ours(x), want), want


MAPS = {   # cid: (index map, must refuse, kw)
    "map_list": (lambda i: [i, 0], False, {}),
    "map_nested_tuple": (lambda i: ((i,), 0), False, {}),
    "map_scalar_for_rank2": (lambda i: i, True, {}),
    "map_three_for_rank2": (lambda i: (i, 0, 0), True, {}),
    "map_one_for_rank2": (lambda i: (i,), True, {}),
    "map_none": (lambda i: None, True, {}),
    "map_array2": (lambda i: jnp.array([i, 0]), False, {}),
    "map_py_float": (lambda i: (0.0, 0), True, {}),
    "map_py_bool": (lambda i: (True, 0), False, {}),
    "map_np_uint8": (lambda i: (np.uint8(3), 0), False, {}),
    "map_const_neg1": (lambda i: (-1, 0), True, {}),
    "map_int32_max": (lambda i: (2 ** 31 - 1, 0), True, {}),
    "map_i_times_big": (lambda i: (i * 100000, 0), True, {}),
    "map_raises": (lambda i: (_raise(), 0), True, {}),
    "map_cond": (lambda i: (lax.cond(i % 2 == 0, lambda: 3 - i, lambda: i), 0), False, {}),
    "map_switch": (lambda i: (lax.switch(i, [lambda: 1, lambda: 0, lambda: 3, lambda: 2]), 0),
                   False, {}),
    "map_fori": (lambda i: (lax.fori_loop(0, i, lambda k, c: c + 1, 0), 0), False, {}),
    "map_div_zero": (lambda i: (i // (i - i), 0), True, {}),     # XLA: x // 0 is -1
    "map_rem_neg": (lambda i: (lax.rem(-i, 4) + 3, 0), False, {}),
    "map_clamp_clip": (lambda i: (jnp.clip(i * 3, 0, 3), 0), False, {}),
    "map_second_nonzero": (lambda i: (i, 1), True, {}),
    "map_kwonly": (lambda *a: (a[0], 0), False, {}),
    "out_map_neg": (lambda i: (i, 0), True, {"out_map": lambda i: (i - 1, 0)}),
    "out_map_past": (lambda i: (i, 0), True, {"out_map": lambda i: (i + 1, 0)}),
    "out_map_list": (lambda i: (i, 0), False, {"out_map": lambda i: [i, 0]}),
    "map_grid2_swap": (lambda i, j: (j, i), True, {"grid": (4, 1), "shape": (32, 128),
                                                    "block": (8, 128),
                                                    "out_map": lambda i, j: (i, j)}),
}


def _raise():
    raise ValueError("map bug 7")


# --- BlockSpec forms --------------------------------------------------------------------------

def spec_case(rng, interp, cid, make_spec, refuse=False, jax_spec=None):
    x = _x(rng, 32, 128)

    @_named(f"k_{cid}")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] - pl.program_id(0).astype(F32)
    spec_o = lambda m: m.BlockSpec((8, 128), lambda i: (i, 0))
    ours = pl.pallas_call(kernel, out_shape=_sds((32, 128)), grid=(4,),
                          in_specs=[make_spec(pl)], out_specs=spec_o(pl),
                          interpret=interpret_of(interp))
    want = None
    if not refuse:
        want = x - np.repeat(np.arange(4), 8)[:, None]
    return (lambda: ours(x)), want


def _buffered(n):
    return lambda m: m.BlockSpec((8, 128), lambda i: (i, 0), pipeline_mode=m.Buffered(n))


SPECS = {
    "buffered_1": (_buffered(1), False),
    "buffered_3": (_buffered(3), False),
    "buffered_0": (_buffered(0), True),
    "buffered_neg": (_buffered(-2), True),
    "buffered_str": (_buffered("2"), True),
    "buffered_float": (_buffered(2.5), True),
    "pipeline_mode_str": (lambda m: m.BlockSpec((8, 128), lambda i: (i, 0),
                                                pipeline_mode="double"), True),
    "block_list": (lambda m: m.BlockSpec([8, 128], lambda i: (i, 0)), False),
    "block_np_ints": (lambda m: m.BlockSpec((np.int64(8), np.int32(128)), lambda i: (i, 0)),
                      False),
    "block_float": (lambda m: m.BlockSpec((8.0, 128), lambda i: (i, 0)), True),
    "block_str": (lambda m: m.BlockSpec(("8", 128), lambda i: (i, 0)), True),
    "block_jnp_int": (lambda m: m.BlockSpec((jnp.int32(8), 128), lambda i: (i, 0)), False),
    "block_bool": (lambda m: m.BlockSpec((True, 128), lambda i: (i, 0)), True),
    "block_int_not_tuple": (lambda m: m.BlockSpec(8, lambda i: (i, 0)), True),
    "mem_any_block": (lambda m: m.BlockSpec((8, 128), lambda i: (i, 0), memory_space=m.ANY),
                      None),
    # JAX's interpreter ignores a memory space it does not know
    "mem_string": (lambda m: m.BlockSpec((8, 128), lambda i: (i, 0), memory_space="vmem"),
                   None),
    "mem_int": (lambda m: m.BlockSpec((8, 128), lambda i: (i, 0), memory_space=1), None),
    "index_map_not_callable": (lambda m: m.BlockSpec((8, 128), (0, 0)), True),
}


def spec_none_block(rng, interp):
    """block_shape=None with an index map: the whole array every step (JAX: the
    map must return zeros)."""
    x = _x(rng, 8, 128)

    @_named("k_block_none")
    def kernel(x_ref, o_ref):
        o_ref[...] += x_ref[...]
    specs = lambda m: dict(grid=(3,), in_specs=[m.BlockSpec(None, lambda i: (0, 0))],
                           out_specs=m.BlockSpec(None, lambda i: (0, 0)))
    ours, theirs = _pair(interp, kernel, _sds((8, 128)), specs,
                         input_output_aliases={0: 0})
    # the aliased input is the output's buffer: JAX's interpreter reads the running
    # sum through it (8x), ours the input as it came (4x); a TPU fetches it once (x)
    return (lambda: ours(x)), None


def mem_smem_input(rng, interp):
    import pallas_tpu
    x = _x(rng, 4, 8)

    @_named("k_smem_in")
    def kernel(s_ref, o_ref):
        o_ref[...] = jnp.full(o_ref.shape, s_ref[1, 3] * 2 + s_ref[0, 0])
    f = pl.pallas_call(kernel, out_shape=_sds((8, 128)),
                       in_specs=[pl.BlockSpec(memory_space=pallas_tpu.SMEM)],
                       interpret=interpret_of(interp))
    return (lambda: f(x)), np.full((8, 128), x[1, 3] * 2 + x[0, 0], np.float32)


def mem_any_whole(rng, interp):
    x = _x(rng, 16, 128)

    @_named("k_any_whole")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[pl.ds(8, 8), :] * 3
    specs = lambda m: dict(in_specs=[m.BlockSpec(memory_space=m.ANY)])
    ours, theirs = _pair(interp, kernel, _sds((8, 128)), specs)
    return (lambda: ours(x)), x[8:] * 3


# --- grids --------------------------------------------------------------------------------

def grid_form(rng, interp, cid, grid, n=4, refuse=False):
    x = _x(rng, 8 * n, 128)

    @_named(f"k_{cid}")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + pl.program_id(0).astype(F32)
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
    f = pl.pallas_call(kernel, out_shape=_sds((8 * n, 128)), grid=grid, in_specs=[spec],
                       out_specs=spec, interpret=interpret_of(interp))
    return (lambda: f(x)), None if refuse else x + np.repeat(np.arange(n), 8)[:, None]


GRIDS = {
    "grid_int": (4, False), "grid_list": ([4], False), "grid_np_int64": ((np.int64(4),), False),
    "grid_np_array": (np.array([4]), False), "grid_jnp_scalar": ((jnp.int32(4),), None),
    "grid_bool": ((True,), None), "grid_str": (("4",), True), "grid_none_entry": ((None,), True),
    "grid_float_int": ((4.0,), True), "grid_nested": (((4,),), True),
    "grid_neg_zero": ((-0,), None),
}


# --- scalar prefetch -----------------------------------------------------------------------

def prefetch_case(rng, interp, cid, idx, n_prefetch=1, refuse=None):
    import pallas_tpu
    x = _x(rng, 32, 128)

    @_named(f"k_{cid}")
    def kernel(*refs):
        idx_ref, x_ref, o_ref = refs[0], refs[n_prefetch], refs[-1]
        o_ref[...] = x_ref[...] + 1
    in_map = (lambda i, s: (s[i] % 4, 0)) if np.ndim(idx) == 1 else (lambda i, s: (0, 0))
    gs = pallas_tpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=n_prefetch, grid=(4,),
        in_specs=[pl.BlockSpec((8, 128), lambda i, *s: in_map(i, s[0]))],
        out_specs=pl.BlockSpec((8, 128), lambda i, *s: (i, 0)))
    f = pl.pallas_call(kernel, out_shape=_sds((32, 128)), grid_spec=gs,
                       interpret=interpret_of(interp))
    args = (idx, x) if n_prefetch == 1 else (idx,) * n_prefetch + (x,)
    want = None
    if refuse is False:
        rows = np.asarray(idx).astype(np.int64) % 4 if np.ndim(idx) == 1 else np.zeros(4, int)
        want = np.concatenate([x[r * 8:(r + 1) * 8] for r in rows]) + 1
    return (lambda: f(*args)), want


def prefetch_count(rng, interp, cid, n):
    import pallas_tpu
    x = _x(rng, 8, 128)

    @_named(f"k_{cid}")
    def kernel(*refs):
        refs[-1][...] = refs[-2][...]
    gs = pallas_tpu.PrefetchScalarGridSpec(num_scalar_prefetch=n, grid=(1,))
    return (lambda: pl.pallas_call(kernel, out_shape=_sds((8, 128)), grid_spec=gs,
                                   interpret=interpret_of(interp))(
        np.zeros(4, np.int32), x)), None


PREFETCH = {
    "pf_float_idx": (np.array([1.0, 2.0, 3.0, 0.0], np.float32), 1, None),
    "pf_2d_idx": (np.array([[1, 2], [3, 0]], np.int32), 1, False),
    "pf_0d_idx": (np.array(2, np.int32), 1, False),
    "pf_bool_idx": (np.array([True, False, True, False]), 1, None),
    "pf_int8_idx": (np.array([3, 2, 1, 0], np.int8), 1, None),
    "pf_uint32_idx": (np.array([3, 2, 1, 0], np.uint32), 1, None),
    "pf_short_idx": (np.array([1, 2], np.int32), 1, None),
    "pf_python_list": ([1, 2, 3, 0], 1, None),
    "pf_two_same": (np.array([2, 0, 1, 3], np.int32), 2, False),
}


# --- aliases -------------------------------------------------------------------------------

def alias_case(rng, interp, cid, aliases, refuse=False, n_out=1, dict_in=False):
    a, b = _x(rng, 16, 128), _x(rng, 16, 128)

    @_named(f"k_{cid}")
    def kernel(*refs):
        if dict_in:
            d, outs = refs[0], refs[1:]
            ins = [d["a"], d["b"]]
        else:
            ins, outs = refs[:2], refs[2:]
        for k, o in enumerate(outs):
            o[...] = ins[0][...] * (k + 2) - ins[1][...]
    shapes = [_sds((16, 128))] * n_out
    f = pl.pallas_call(kernel, out_shape=shapes, input_output_aliases=aliases,
                       interpret=interpret_of(interp))
    args = ({"a": a, "b": b},) if dict_in else (a, b)
    want = None if refuse else [a * (k + 2) - b for k in range(n_out)]
    return (lambda: jax.jit(f)(*args)), want


ALIASES = {
    "alias_np_key": ({np.int64(1): np.int32(0)}, False, {}),
    "alias_pairs_same_input": ([(0, 0), (0, 1)], True, {"n_out": 2}),
    "alias_dict_operand": ({1: 0}, False, {"dict_in": True}),
    "alias_dict_operand_oob": ({2: 0}, True, {"dict_in": True}),
    "alias_none": (None, False, {}),
    "alias_empty_list": ([], False, {}),
    "alias_set": ({(0, 0)}, True, {}),
    "alias_value_float": ({0: 0.0}, True, {}),
    "alias_both_to_two": ({0: 1, 1: 0}, False, {"n_out": 2}),
}


def alias_donated(rng, interp):
    """An aliased input donated by jit: the result, and the caller's other
    arrays untouched."""
    x = _x(rng, 8, 128)
    keep = jnp.asarray(x) + 0

    @_named("k_alias_donate")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 4
    f = pl.pallas_call(kernel, out_shape=_sds((8, 128)), input_output_aliases={0: 0},
                       interpret=interpret_of(interp))
    g = jax.jit(f, donate_argnums=0)

    def run():
        out = g(jnp.asarray(x))
        return out, keep
    return run, (x * 4, x)


def alias_vmap(rng, interp):
    x = _x(rng, 3, 8, 128)

    @_named("k_alias_vmap")
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 10
    f = pl.pallas_call(kernel, out_shape=_sds((8, 128)), input_output_aliases={0: 0},
                       interpret=interpret_of(interp))
    return (lambda: jax.jit(jax.vmap(f))(x)), x + 10


# --- calls outside a kernel ----------------------------------------------------------------

def outside(rng, interp, what):
    def run():
        if what == "program_id":
            return pl.program_id(0)
        if what == "num_programs":
            return pl.num_programs(0)
        if what == "program_id_jit":
            return jax.jit(lambda: pl.program_id(0))()
        if what == "when":
            hits = []
            pl.when(True)(lambda: hits.append(1))
            return jnp.asarray(len(hits))
        if what == "debug_check":
            return pl.debug_check(False, "outside")     # JAX ignores it too
        if what == "semaphore_read":
            return pl.semaphore_read(jnp.zeros(()))
        raise AssertionError(what)
    return run, None


# --- name= and cost_estimate ---------------------------------------------------------------

def named_call(rng, interp, name, refuse=False):
    x = _x(rng, 8, 128)

    def k_named(x_ref, o_ref):
        o_ref[...] = x_ref[...] * -1
    f = pl.pallas_call(k_named, out_shape=_sds((8, 128)), name=name,
                       interpret=interpret_of(interp))
    return (lambda: jax.jit(f)(x)), None if refuse else -x


NAMES = {
    "name_empty": ("", None), "name_unicode": ("k_ünï_cödé_λ", False),
    "name_spaces": ("my kernel (v2)", False), "name_int": (123, True),
    "name_newline": ("a\nb", None), "name_dots": ("a.b.c", False),
    "name_slash": ("a/b", None), "name_bytes": (b"k", True),
}


def cost_case(rng, interp, make, refuse=False):
    x = _x(rng, 8, 128)

    def k_cost(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 2
    f = lambda: pl.pallas_call(k_cost, out_shape=_sds((8, 128)), cost_estimate=make(),
                               interpret=interpret_of(interp))(x)
    return f, None if refuse else x + 2


COSTS = {
    "cost_float": (lambda: pl.CostEstimate(flops=1.5, transcendentals=0, bytes_accessed=0),
                   None),
    "cost_huge": (lambda: pl.CostEstimate(flops=2 ** 70, transcendentals=0,
                                          bytes_accessed=2 ** 65), None),
    "cost_neg_bytes": (lambda: pl.CostEstimate(flops=0, transcendentals=0, bytes_accessed=-5),
                       None),
    "cost_tuple": (lambda: (1, 2, 3), True),
    "cost_none_field": (lambda: pl.CostEstimate(flops=None, transcendentals=0,
                                                bytes_accessed=0), None),
    "cost_zero": (lambda: pl.CostEstimate(flops=0, transcendentals=0, bytes_accessed=0), False),
    "cost_np": (lambda: pl.CostEstimate(flops=np.int64(10), transcendentals=np.int32(1),
                                        bytes_accessed=np.uint64(8)), False),
}


# --- zero-sized operands and output pytrees ----------------------------------------------------

def zero_size(rng, interp, kind):
    x = _x(rng, 8, 128)
    e = np.zeros((0, 128), np.float32)

    def k_zero_size(*refs):
        if kind == "unused_input":
            refs[-1][...] = refs[0][...] + 1
        elif kind == "empty_out":
            refs[1][...] = refs[0][...] + 1
        elif kind == "only_empty":
            refs[-1][...] = refs[0][...] * 2
        elif kind == "grid_empty_block":
            refs[-1][...] = refs[0][...] * 2
    if kind == "unused_input":
        f = pl.pallas_call(k_zero_size, out_shape=_sds((8, 128)),
                           interpret=interpret_of(interp))
        return (lambda: f(x, e)), x + 1
    if kind == "empty_out":
        f = pl.pallas_call(k_zero_size, out_shape=(_sds((8, 128)), _sds((0, 4))),
                           interpret=interpret_of(interp))
        return (lambda: f(x)), (x + 1, np.zeros((0, 4), np.float32))
    if kind == "only_empty":
        f = pl.pallas_call(k_zero_size, out_shape=_sds((0, 128)), interpret=interpret_of(interp))
        return (lambda: f(e)), np.zeros((0, 128), np.float32)
    spec = pl.BlockSpec((0, 128), lambda i: (i, 0))
    f = pl.pallas_call(k_zero_size, out_shape=_sds((0, 128)), grid=(3,), in_specs=[spec],
                       out_specs=spec, interpret=interpret_of(interp))
    return (lambda: f(e)), None


Pair = collections.namedtuple("Pair", "lo hi")


def out_tree(rng, interp, kind):
    x = _x(rng, 8, 128)

    @_named(f"k_tree_{kind}")
    def kernel(x_ref, *outs):
        flat = jax.tree_util.tree_leaves(outs)
        for k, o in enumerate(flat):
            o[...] = x_ref[...] * (k + 1)
    s = _sds((8, 128))
    tree = {"dict": {"b": s, "a": s}, "namedtuple": Pair(s, s), "list1": [s],
            "deep": ((s,), [{"z": s}]), "empty": (), "none_leaf": (s, None)}[kind]
    f = pl.pallas_call(kernel, out_shape=tree, interpret=interpret_of(interp))
    try:
        theirs = jpl.pallas_call(kernel, out_shape=tree, interpret=True)(x)
    except Exception:     # noqa: BLE001 -- JAX refuses it: any clear outcome will do
        return (lambda: f(x)), None

    def check(got):
        if jax.tree_util.tree_structure(got) != jax.tree_util.tree_structure(theirs):
            return (f"structure {jax.tree_util.tree_structure(got)}, JAX's "
                    f"{jax.tree_util.tree_structure(theirs)}")
        leaves = jax.tree_util.tree_leaves(got)
        for k, leaf in enumerate(leaves):
            if not np.allclose(np.asarray(leaf), x * (k + 1)):
                return f"leaf {k} differs"
        return True
    return (lambda: f(x)), check


# --- strided pl.ds and Ref index forms ----------------------------------------------------------

def strided(rng, interp, cid, read, write=None, rows=4, refuse=False):
    """Reads ``x_ref[read]`` (rows x 128) into ``o_ref[write]`` of a zeroed output;
    compared with JAX's interpreter."""
    x = _x(rng, 16, 128)

    def make(m):
        @_named(f"k_{cid}")
        def kernel(x_ref, o_ref):
            o_ref[...] = jnp.zeros_like(o_ref)
            v = x_ref[read(m)] * 2
            if write is None:
                o_ref[pl.ds(0, rows) if m is pl else jpl.ds(0, rows), :] = v
            else:
                o_ref[write(m)] = v
        return kernel
    ours = pl.pallas_call(make(pl), out_shape=_sds((16, 128)), interpret=interpret_of(interp))
    theirs = jpl.pallas_call(make(jpl), out_shape=_sds((16, 128)), interpret=True)
    want = None if refuse else _jax_or_none(lambda: theirs(x))
    return _as_jax(lambda: ours(x), want), want


STRIDES = {
    "ds_stride3": (lambda m: (m.ds(1, 4, 3), slice(None)), None, 4, False),
    "ds_stride_cols": (lambda m: (slice(None), m.ds(0, 32, 4)), lambda m: (slice(None),
                                                                           m.ds(0, 32)), 16,
                       False),
    "ds_store_stride2": (lambda m: (m.ds(0, 8), slice(None)),
                         lambda m: (m.ds(1, 8, 2), slice(None)), 8, False),
    "ds_stride_zero": (lambda m: (m.ds(0, 4, 0), slice(None)), None, 4, True),
    "ds_stride_neg": (lambda m: (m.ds(15, 4, -2), slice(None)), None, 4, True),
    "ds_stride_past_end": (lambda m: (m.ds(4, 4, 5), slice(None)), None, 4, True),
    "ds_stride_last_exact": (lambda m: (m.ds(3, 4, 4), slice(None)), None, 4, False),
    "slice_step2": (lambda m: (slice(0, 8, 2), slice(None)), None, 4, False),
    "slice_neg_step": (lambda m: (slice(None, None, -4), slice(None)), None, 4, True),
    "index_int_row": (lambda m: (3,), lambda m: (0,), 1, False),
    "index_neg_int": (lambda m: (-1, slice(None)), lambda m: (0, slice(None)), 1, False),
    "index_np_int": (lambda m: (np.int32(5),), lambda m: (np.int64(2),), 1, False),
    "index_ellipsis_col": (lambda m: (..., m.ds(0, 128)), lambda m: (...,), 16, False),
    "ds_size_over": (lambda m: (m.ds(0, 17), slice(None)), None, 17, True),
    "ds_traced_stride": (lambda m: (m.ds(pl.program_id(0) if m is pl else jpl.program_id(0),
                                         4, 2), slice(None)), None, 4, False),
}


# --- the table -------------------------------------------------------------------------------

def _on(interps, cid, fn, names=None, uses=None, **kw):
    names = names or (f"k_{cid}",)
    return [Case(f"{i}-{cid}", P(fn, interp=i), names, needs=NEEDS[i] or uses,
                 slow=i != "builtin", **kw) for i in interps]


def _ref(refuse):
    """expect_error / either from a must-refuse flag (None: either is fine)."""
    return dict(expect_error=refuse is not False, either=refuse is None)


def _cases():
    out = []
    for cid, (m, refuse, kw) in MAPS.items():
        interps = ALL4 if cid in ("map_list", "map_const_neg1", "map_cond", "map_scalar_for_rank2",
                                  "out_map_past") else ALL3
        out += _on(interps, cid, P(map_case, cid=cid, in_map=m, refuse=refuse, **kw),
                   **_ref(refuse if refuse else None))
    for cid, (make, refuse) in SPECS.items():
        # a bad Buffered/BlockSpec argument fails where it is built, before any kernel
        field = {"buffered": "buffer_count", "pipeline": "pipeline_mode",
                 "block": "block", "mem": "memory_space", "index": "index_map"}
        names = (field[cid.split("_")[0]],) if refuse else None
        out += _on(ALL4 if cid.startswith("buffered") else ALL3, cid,
                   P(spec_case, cid=cid, make_spec=make, refuse=bool(refuse)), names,
                   **_ref(refuse))
    out += _on(ALL3, "block_none", spec_none_block, either=True, expect_error=True)
    out += _on(BP, "smem_input", mem_smem_input, uses="pallas_tpu")
    out += _on(ALL3, "any_whole", mem_any_whole)
    for cid, (grid, refuse) in GRIDS.items():
        kw = {"n": 1} if cid == "grid_bool" else {}
        if cid == "grid_neg_zero":
            kw = {"n": 0}
        out += _on(ALL4 if cid in ("grid_int", "grid_str") else ALL3, cid,
                   P(grid_form, cid=cid, grid=grid, refuse=bool(refuse), **kw), **_ref(refuse))
    for cid, (idx, n, refuse) in PREFETCH.items():
        out += _on(BP, cid, P(prefetch_case, cid=cid, idx=idx, n_prefetch=n, refuse=refuse),
                   uses="pallas_tpu", **_ref(refuse))
    for n in (-1, 3, 2.0):
        cid = f"pf_count_{n}".replace("-", "m").replace(".", "_")
        out += _on(BP, cid, P(prefetch_count, cid=cid, n=n), ("num_scalar_prefetch",),
                   uses="pallas_tpu", expect_error=True)
    for cid, (al, refuse, kw) in ALIASES.items():
        out += _on(ALL3, cid, P(alias_case, cid=cid, aliases=al, refuse=refuse, **kw),
                   **_ref(refuse))
    out += _on(ALL4, "alias_donated", alias_donated)
    out += _on(ALL3, "alias_vmap", alias_vmap)
    for what in ("program_id", "num_programs", "program_id_jit", "semaphore_read"):
        out += _on(B, f"outside_{what}", P(outside, what=what), (what.split("_jit")[0],),
                   expect_error=True)
    for what in ("when", "debug_check"):       # JAX runs both outside a kernel
        out += _on(B, f"outside_{what}", P(outside, what=what), (what,), expect_error=True,
                   either=True)
    for cid, (name, refuse) in NAMES.items():
        out += _on(ALL4 if cid == "name_unicode" else ALL3, cid,
                   P(named_call, name=name, refuse=bool(refuse)),
                   ("name",) if refuse else ("k_named",), **_ref(refuse))
    for cid, (make, refuse) in COSTS.items():
        out += _on(ALL3, cid, P(cost_case, make=make, refuse=bool(refuse)),
                   ("cost_estimate",) if refuse else ("flops",), **_ref(refuse))
    for kind in ("unused_input", "empty_out", "only_empty", "grid_empty_block"):
        out += _on(ALL4 if kind != "grid_empty_block" else ALL3, f"zero_{kind}",
                   P(zero_size, kind=kind), ("k_zero_size",),
                   **_ref(None if kind == "grid_empty_block" else False))
    for kind in ("dict", "namedtuple", "list1", "deep", "empty", "none_leaf"):
        out += _on(ALL4 if kind in ("dict", "deep") else ALL3, f"tree_{kind}",
                   P(out_tree, kind=kind), **_ref(None if kind in ("empty", "none_leaf")
                                                    else False))
    for cid, (read, write, rows, refuse) in STRIDES.items():
        out += _on(ALL4 if cid in ("ds_stride3", "ds_stride_zero", "index_int_row") else ALL3,
                   cid, P(strided, cid=cid, read=read, write=write, rows=rows, refuse=refuse),
                   **_ref(refuse if refuse else None))
    return out


CASES = _cases()
