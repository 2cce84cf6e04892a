"""``roll`` and ``bitcast``: TPU interpret mode and the frontend's reference
interpreter against NumPy, and AOT compilation for v5e on (8, 128)-tiled shapes.

Both ops move bits without arithmetic: every comparison is exact.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu
from tpu_window import BITCAST_DIM, EINSHAPE_RULES, skip_unless

INTERPRET = pltpu.InterpretParams()
MODES = {"tpu_interpret": INTERPRET, "frontend_interpreter": True}


@pytest.fixture
def rng():
    return np.random.default_rng()


def _call(kernel, x, out_shape, *scalars, interpret=False):
    """x whole in VMEM, ``scalars`` (int32[k]) in SMEM, no grid."""
    smem = [pl.BlockSpec(memory_space=pltpu.SMEM)] * len(scalars)
    return pl.pallas_call(
        kernel, out_shape=out_shape,
        in_specs=[pl.BlockSpec(x.shape, lambda: (0,) * x.ndim), *smem],
        out_specs=pl.BlockSpec(out_shape.shape, lambda: (0,) * len(out_shape.shape)),
        # interpret=True (the frontend's interpreter) refuses TPU compiler params
        compiler_params=None if interpret is True else pltpu.CompilerParams(),
        interpret=interpret)(x, *scalars)


# --- roll ---------------------------------------------------------------------------------

def roll_kernel(x_ref, shift_ref, o_ref, *, axis, static_shift):
    shift = shift_ref[0] if static_shift is None else static_shift
    o_ref[...] = pltpu.roll(x_ref[...], shift, axis)


def rolled(x, shift, *, axis, static_shift=None, interpret=False):
    kernel = functools.partial(roll_kernel, axis=axis, static_shift=static_shift)
    return _call(kernel, x, jax.ShapeDtypeStruct(x.shape, x.dtype), shift, interpret=interpret)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("static", [True, False], ids=["static_shift", "traced_shift"])
def test_roll_matches_numpy(rng, mode, axis, static):
    x = rng.standard_normal((16, 256)).astype(np.float32)
    n = x.shape[axis]
    # Negative and beyond-n shifts are taken modulo n.
    shift = int(rng.choice([rng.integers(1, n), -int(rng.integers(1, n)), n + 3]))
    got = rolled(x, jnp.asarray([shift], jnp.int32), axis=axis,
                 static_shift=shift if static else None, interpret=MODES[mode])
    # np.roll: element i lands at (i + shift) mod n, the meaning of pltpu.roll.
    np.testing.assert_array_equal(np.asarray(got), np.roll(x, shift, axis))


def strided_roll_kernel(x_ref, o_ref):
    o_ref[...] = pltpu.roll(x_ref[...], 3, 1, stride=5, stride_axis=0)


@pytest.mark.parametrize("mode", MODES)
def test_strided_roll_matches_numpy(rng, mode):
    x = rng.standard_normal((8, 128)).astype(np.float32)
    got = np.asarray(_call(strided_roll_kernel, x, jax.ShapeDtypeStruct(x.shape, x.dtype),
                           interpret=MODES[mode]))
    want = np.stack([np.roll(x[j], 3 + 5 * j) for j in range(8)])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("static_shift", [5, None])
def test_roll_aot(aot_compile, axis, static_shift):
    fn = functools.partial(rolled, axis=axis, static_shift=static_shift)
    compiled, text = aot_compile(fn, jnp.zeros((16, 256), jnp.float32),
                                 jnp.zeros((1,), jnp.int32))
    assert compiled is not None and "tpu_custom_call" in text


def test_strided_roll_aot(aot_compile):
    fn = functools.partial(_call, strided_roll_kernel,
                           out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32))
    compiled, _ = aot_compile(fn, jnp.zeros((8, 128), jnp.float32))
    assert compiled is not None


def test_roll_rejects_bad_axes():
    x = jnp.zeros((8, 128), jnp.float32)
    with pytest.raises(ValueError, match="axis=2 is out of range"):
        pltpu.roll(x, 1, 2)
    with pytest.raises(ValueError, match="stride and stride_axis go together"):
        pltpu.roll(x, 1, 1, stride=2)


# --- bitcast -------------------------------------------------------------------------------

def _np_bitcast(x, dtype, dim):
    """NumPy's ``view`` with ``dim`` moved last: little-endian, the first of
    the packed elements in the low bits."""
    y = np.ascontiguousarray(np.moveaxis(x, dim, -1)).view(dtype)
    return np.moveaxis(y, -1, dim)


def bitcast_kernel(x_ref, o_ref, *, dim):
    o_ref[...] = pltpu.bitcast(x_ref[...], o_ref.dtype, dim)


def bitcasted(x, dtype, dim=-2, interpret=False):
    shape = list(x.shape)
    shape[dim] = shape[dim] * x.dtype.itemsize // jnp.dtype(dtype).itemsize
    return _call(functools.partial(bitcast_kernel, dim=dim), x,
                 jax.ShapeDtypeStruct(tuple(shape), dtype), interpret=interpret)


def _random_bits(rng, shape, dtype):
    """Random bit patterns of ``dtype`` (floats: finite, not NaN, so exact
    comparison is meaningful after a round trip through float ops)."""
    if jnp.issubdtype(dtype, jnp.floating):      # bfloat16 included
        return rng.standard_normal(shape).astype(np.float32).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


CASTS = [  # (source shape, source dtype, target dtype, dim)
    ((16, 128), np.float32, np.int32, -2),
    ((16, 128), np.float32, jnp.bfloat16, -2),       # unpack: 16 -> 32 rows
    ((32, 128), jnp.bfloat16, np.float32, -2),       # pack: 32 -> 16 rows
    ((32, 128), np.int8, np.int32, -2),
    ((16, 128), np.int32, np.float32, -1),           # equal widths, minormost
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", CASTS, ids=lambda c: f"{np.dtype(c[1])}_to_{np.dtype(c[2])}_dim{c[3]}")
def test_bitcast_matches_numpy(rng, mode, case):
    shape, src, dst, dim = case
    if dim == -1 and mode == "tpu_interpret":
        skip_unless(BITCAST_DIM)
    x = _random_bits(rng, shape, src)
    got = np.asarray(bitcasted(jnp.asarray(x), dst, dim, interpret=MODES[mode]))
    want = _np_bitcast(x, np.dtype(dst), dim)
    assert got.shape == want.shape and got.dtype == want.dtype
    as_bytes = lambda a: np.ascontiguousarray(a).view(np.uint8)   # noqa: E731
    np.testing.assert_array_equal(as_bytes(got), as_bytes(want))


def test_bitcast_packs_row_pairs_low_half_first(rng):
    # The documented layout: out[a, b] of the wider type packs x[2a, b] (low
    # half) and x[2a + 1, b] (high half).
    x = _random_bits(rng, (32, 128), np.uint16).view(jnp.bfloat16)
    got = np.asarray(bitcasted(jnp.asarray(x), np.uint32, interpret=INTERPRET))
    halves = x.view(np.uint16).astype(np.uint32)
    np.testing.assert_array_equal(got, halves[0::2] | (halves[1::2] << 16))


@pytest.mark.parametrize("case", CASTS, ids=lambda c: f"{np.dtype(c[1])}_to_{np.dtype(c[2])}_dim{c[3]}")
def test_bitcast_aot(aot_compile, case):
    shape, src, dst, dim = case
    if dim == -1:
        skip_unless(BITCAST_DIM)
    fn = functools.partial(bitcasted, dtype=dst, dim=dim)
    compiled, text = aot_compile(fn, jnp.zeros(shape, src))
    assert compiled is not None and "tpu_custom_call" in text


def test_bitcast_rejects_what_cannot_pack():
    with pytest.raises(ValueError, match="cannot be packed or unpacked"):
        pltpu.bitcast(jnp.zeros((3, 128), jnp.bfloat16), jnp.float32)
    with pytest.raises(ValueError, match="second minor or the minormost"):
        pltpu.bitcast(jnp.zeros((2, 8, 128), jnp.float32), jnp.int32, dim=0)


# --- einshape ------------------------------------------------------------------------------

EINSHAPES = [  # (equation, input shape, sizes, the NumPy reshape/transpose it means)
    ("ab->ba", (128, 256), {}, lambda x: x.T),
    ("(ab)c->abc", (16, 128), {"a": 2}, lambda x: x.reshape(2, 8, 128)),
    ("abc->(ab)c", (2, 8, 128), {}, lambda x: x.reshape(16, 128)),
    ("a(bc)->bac", (8, 256), {"c": 128}, lambda x: x.reshape(8, 2, 128).transpose(1, 0, 2)),
    ("abc->(ba)c", (2, 8, 128), {}, lambda x: x.transpose(1, 0, 2).reshape(16, 128)),
]


def einshape_kernel(x_ref, o_ref, *, equation, sizes):
    o_ref[...] = pltpu.einshape(equation, x_ref[...], **sizes)


def einshaped(x, equation, sizes, out_shape, interpret=False):
    kernel = functools.partial(einshape_kernel, equation=equation, sizes=sizes)
    return _call(kernel, x, jax.ShapeDtypeStruct(out_shape, x.dtype), interpret=interpret)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", EINSHAPES, ids=lambda c: c[0])
def test_einshape_matches_numpy(rng, mode, case):
    equation, shape, sizes, reference = case
    x = rng.standard_normal(shape).astype(np.float32)
    want = reference(x)
    got = np.asarray(einshaped(x, equation, sizes, want.shape, interpret=MODES[mode]))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("case", EINSHAPES, ids=lambda c: c[0])
def test_einshape_aot(aot_compile, case):
    equation, shape, sizes, reference = case
    out_shape = reference(np.zeros(shape, np.float32)).shape
    fn = functools.partial(einshaped, equation=equation, sizes=sizes, out_shape=out_shape)
    compiled, text = aot_compile(fn, jnp.zeros(shape, jnp.float32))
    assert compiled is not None and "tpu_custom_call" in text


@pytest.mark.parametrize("equation, sizes, message", [
    ("ab->a", {}, "each dimension once"),
    ("a(bc)->abc", {}, r"Ambiguous split for \['b', 'c'\] with size 128"),
    ("a(bc)->abc", {"b": 3}, "Cannot split size 128 with known sizes 3"),
    ("a(bc)->abc", {"b": 4, "c": 4}, "Size mismatch for group"),
    ("ab->a1b", {}, "names are letters"),
    ("abc->abc", {}, "has 3 input dims"),
])
def test_einshape_rejects_bad_equations(equation, sizes, message):
    with pytest.raises(ValueError, match=message):
        pltpu.einshape(equation, jnp.zeros((8, 128), jnp.float32), **sizes)


VJP_CASES = [  # JAX's einshape VJP cases, with a grouped merge on both sides
    ("ab(cd)->cabd", (2, 8, 512), {"c": 4}),
    ("a(bc)->b(ac)", (8, 256), {"c": 128}),
    ("(ab)(cd)->(ac)(bd)", (16, 256), {"a": 2, "c": 2}),
]


@EINSHAPE_RULES
@pytest.mark.parametrize("case", VJP_CASES, ids=lambda c: c[0])
def test_einshape_vjp_matches_jax(rng, case):
    """Outside a kernel and inside one (TPU interpret mode): the cotangent goes
    back through the inverse einshape, as jax.vjp of JAX's pltpu.einshape."""
    from jax.experimental.pallas import tpu as jpltpu
    equation, shape, sizes = case
    x = rng.standard_normal(shape).astype(np.float32)
    out, vjp = jax.vjp(lambda a: pltpu.einshape(equation, a, **sizes), x)
    ct = rng.standard_normal(out.shape).astype(np.float32)
    j_out, j_vjp = jax.vjp(lambda a: jpltpu.einshape(equation, a, **sizes), x)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(j_out))
    np.testing.assert_array_equal(np.asarray(vjp(ct)[0]), np.asarray(j_vjp(ct)[0]))
    np.testing.assert_array_equal(np.asarray(vjp(out)[0]), x)   # a permutation: back to x
    jvp_out = jax.jvp(lambda a: pltpu.einshape(equation, a, **sizes), (x,), (x,))[1]
    np.testing.assert_array_equal(np.asarray(jvp_out), np.asarray(j_out))

    def bwd_kernel(x_ref, g_ref, o_ref):
        _, f_vjp = jax.vjp(lambda a: pltpu.einshape(equation, a, **sizes), x_ref[...])
        o_ref[...] = f_vjp(g_ref[...])[0]
    got = pl.pallas_call(bwd_kernel, out_shape=jax.ShapeDtypeStruct(shape, x.dtype),
                         interpret=INTERPRET)(x, ct)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(j_vjp(ct)[0]))


def test_einshape_vjp_in_a_kernel_aot(aot_compile):
    def bwd_kernel(x_ref, g_ref, o_ref):
        _, f_vjp = jax.vjp(lambda a: pltpu.einshape("a(bc)->b(ac)", a, c=128), x_ref[...])
        o_ref[...] = f_vjp(g_ref[...])[0]

    def fn(x, g):
        return pl.pallas_call(bwd_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              compiler_params=pltpu.CompilerParams())(x, g)
    compiled, text = aot_compile(fn, jnp.zeros((8, 256), jnp.float32),
                                 jnp.zeros((2, 1024), jnp.float32))
    assert compiled is not None and "tpu_custom_call" in text


FUSED_EINSHAPES = [  # (equation, input shape, sizes, output block shape, NumPy reference)
    ("a(bc)->bac", (16, 256), {"c": 128}, (1, 8, 128),
     lambda x: x.reshape(16, 2, 128).transpose(1, 0, 2)),
    ("(ab)c->abc", (32, 128), {"a": 4}, (2, 8, 128), lambda x: x.reshape(4, 8, 128)),
    ("abc->(ab)c", (4, 8, 128), {}, (16, 128), lambda x: x.reshape(32, 128)),
]


@EINSHAPE_RULES
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", FUSED_EINSHAPES, ids=lambda c: c[0])
def test_jax_fuser_pulls_block_specs_through_einshape(rng, mode, case):
    """JAX's fuser (jax.experimental.pallas.fuser) takes pallas_tpu.einshape in a
    prologue: the block spec it pulls back is the one it pulls through JAX's own
    pltpu.einshape, and the fused kernel computes the reference block by block."""
    from jax.experimental.pallas import fuser
    from jax.experimental.pallas import tpu as jpltpu
    equation, shape, sizes, block, reference = case
    x = rng.standard_normal(shape).astype(np.float32)
    want = reference(x.astype(np.float64)) * 2
    grid = tuple(s // b for s, b in zip(want.shape, block))
    out_spec = pl.BlockSpec(block, lambda *ids: ids)

    def pulled(einshape):
        fn, values, prefetch = fuser.get_fusion_values(lambda: einshape(equation, x, **sizes))
        kernel_fn, (value_specs,), _ = fuser.pull_block_spec(
            fn, out_spec, grid_len=len(grid),
            scalar_prefetch_handler=fuser.make_scalar_prefetch_handler())(values)
        return kernel_fn, values, prefetch, value_specs

    kernel_fn, values, prefetch, value_specs = pulled(pltpu.einshape)
    theirs = pulled(jpltpu.einshape)[3]
    assert [s.block_shape for s in jax.tree.leaves(value_specs)] == \
        [s.block_shape for s in jax.tree.leaves(theirs)]

    def kernel(value_refs, o_ref):
        blocks = jax.tree.map(lambda r: r[...], value_refs)
        ids = tuple(pl.program_id(a) for a in range(len(grid)))
        o_ref[...] = kernel_fn(ids, prefetch, blocks) * 2.0

    interpret = MODES[mode]
    got = pl.pallas_call(
        kernel, grid=grid, in_specs=[value_specs], out_specs=out_spec,
        out_shape=jax.ShapeDtypeStruct(want.shape, x.dtype),
        compiler_params=None if interpret is True else pltpu.CompilerParams(),
        interpret=interpret)(values)
    np.testing.assert_array_equal(np.asarray(got), want.astype(np.float32))


@pytest.mark.parametrize("spelling", ["ty", "dtype", "positional"])
def test_bitcast_takes_jax_keyword_ty(spelling):
    """JAX's signature is bitcast(x, ty, dim=-2); JAX's test_bitcast_vmap passes
    ty= (a TypeError under ours before). Same width: NumPy's view."""
    x = np.random.default_rng().standard_normal((8, 128)).astype(np.float32)
    call = {"ty": lambda v: pltpu.bitcast(v, ty=jnp.int32),
            "dtype": lambda v: pltpu.bitcast(v, dtype=jnp.int32),
            "positional": lambda v: pltpu.bitcast(v, jnp.int32)}[spelling]

    def k(x_ref, o_ref):
        o_ref[...] = call(x_ref[...])
    got = pl.pallas_call(k, out_shape=jax.ShapeDtypeStruct(x.shape, jnp.int32),
                         interpret=pltpu.InterpretParams(chip_checks=False))(x)
    np.testing.assert_array_equal(np.asarray(got), x.view(np.int32))


def test_bitcast_needs_the_dtype_once():
    x = jnp.zeros((8, 128), jnp.float32)
    with pytest.raises(TypeError, match="give the target dtype once"):
        pltpu.bitcast(x, jnp.int32, dtype=jnp.int32)
    with pytest.raises(TypeError, match="give the target dtype once"):
        pltpu.bitcast(x)
