"""Backend.check rejects what Mosaic cannot take, before lowering, naming the operand."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu
from pallas_frontend.backend_api import BackendCapabilityError, kernel_primitive
from pallas_tpu import aot


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def _call(block, shape=(256, 256), dtype=jnp.float32, kernel=_copy, interpret=True):
    return pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(shape, dtype),
        grid=(shape[0] // block[0], shape[1] // block[1]),
        in_specs=[pl.BlockSpec(block, lambda i, j: (i, j))],
        out_specs=pl.BlockSpec(block, lambda i, j: (i, j)),
        compiler_params=pltpu.CompilerParams(),
        interpret=pltpu.InterpretParams() if interpret else False)


def test_rejects_untiled_lane_dim_when_compiling():
    with pytest.raises(BackendCapabilityError, match=r"args\[0\].*divisible by 8 and 128"):
        aot.lower_for_tpu(_call((128, 64), interpret=False),
                          jax.ShapeDtypeStruct((256, 256), jnp.float32))


def test_rejects_untiled_sublane_dim_when_compiling():
    with pytest.raises(BackendCapabilityError, match=r"block shape \(4, 128\) of args\[0\]"):
        aot.lower_for_tpu(_call((4, 128), interpret=False),
                          jax.ShapeDtypeStruct((256, 256), jnp.float32))


def _add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def test_interpret_mode_refuses_a_block_the_chip_refuses():
    """What fails on the chip fails on CPU first: a (3, 100) float32 block in
    TPU interpret mode is refused before it runs, naming the operand, Mosaic's
    rule, the kernel's line and how to turn the check off."""
    with pytest.raises(BackendCapabilityError) as info:
        _call((3, 100), shape=(6, 200), kernel=_add_one)(jnp.zeros((6, 200), jnp.float32))
    msg = str(info.value)
    assert "block shape (3, 100) of args[0]" in msg and "float32[6, 200]" in msg
    assert "divisible by 8 and 128" in msg and "dim 0 is 3 of 6, dim 1 is 100 of 200" in msg
    assert "test_check.py:" in msg     # the kernel's line
    assert "InterpretParams(chip_checks=False)" in msg and "PALLAS_TPU_CHIP_CHECKS=0" in msg


@pytest.mark.parametrize("block, shape", [((8, 128), (16, 256)), ((16, 256), (32, 256)),
                                          ((6, 200), (6, 200)), ((8, 200), (16, 200))])
def test_interpret_mode_runs_blocks_the_chip_takes(block, shape):
    x = np.random.default_rng().standard_normal(shape).astype(np.float32)
    out = _call(block, shape=shape, kernel=_add_one)(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(out), x.astype(np.float64) + 1.0, rtol=1e-6)


@pytest.mark.parametrize("block", [(4, 128), (128, 64), (12, 40)])
def test_interpret_mode_runs_untiled_blocks_with_chip_checks_off(block, monkeypatch):
    """chip_checks=False (or PALLAS_TPU_CHIP_CHECKS=0) runs any block shape,
    as JAX's TPU interpret mode does."""
    shape = (block[0] * 2, block[1] * 3)
    x = np.random.default_rng().standard_normal(shape).astype(np.float32)
    with pytest.raises(BackendCapabilityError, match="divisible by 8 and 128"):
        _call(block, shape=shape, kernel=_add_one)(jnp.asarray(x))
    off = pl.pallas_call(
        _add_one, out_shape=jax.ShapeDtypeStruct(shape, jnp.float32), grid=(2, 3),
        in_specs=[pl.BlockSpec(block, lambda i, j: (i, j))],
        out_specs=pl.BlockSpec(block, lambda i, j: (i, j)),
        interpret=pltpu.InterpretParams(chip_checks=False))
    np.testing.assert_allclose(np.asarray(off(jnp.asarray(x))), x.astype(np.float64) + 1.0,
                               rtol=1e-6)
    monkeypatch.setenv("PALLAS_TPU_CHIP_CHECKS", "0")
    out = _call(block, shape=shape, kernel=_add_one)(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(out), x.astype(np.float64) + 1.0, rtol=1e-6)


def _vector_copy(n, block, dtype, interpret=True):
    return pl.pallas_call(
        _copy, out_shape=jax.ShapeDtypeStruct((n,), dtype), grid=(pl.cdiv(n, block),),
        in_specs=[pl.BlockSpec((block,), lambda i: (i,))],
        out_specs=pl.BlockSpec((block,), lambda i: (i,)),
        compiler_params=pltpu.CompilerParams(),
        interpret=pltpu.InterpretParams() if interpret else False)


@pytest.mark.parametrize("dtype, block, ok", [
    (jnp.float32, 128, True), (jnp.float32, 64, False), (jnp.float32, 2048, True),
    (jnp.bfloat16, 128, False), (jnp.bfloat16, 256, True),
    (jnp.int8, 256, False), (jnp.int8, 512, True), (jnp.float32, 3072, True)])
def test_rank1_block_rule_depends_on_the_dtype(dtype, block, ok):
    """A rank-1 block: the array's dim, a multiple of 8 * 128, or a power of 2
    of at least 128 * (32 // bits) -- 128 float32, 256 bfloat16, 512 int8."""
    f = _vector_copy(4096, block, dtype)
    x = jnp.arange(4096).astype(dtype)
    if ok:
        np.testing.assert_array_equal(np.asarray(f(x)), np.asarray(x))
    else:
        with pytest.raises(BackendCapabilityError, match=rf"rank-1 block .* power of 2 of at "
                                                         rf"least {128 * 32 // jnp.dtype(dtype).itemsize // 8}"):
            f(x)


def test_a_vmapped_1d_kernel_is_refused_in_interpret_mode():
    """vmap makes a (128,) block (squeezed, 128) on (3, 256): the squeezed dim
    counts as 1 of 3 rows, which JAX's TPU lowering refuses."""
    f = jax.vmap(_vector_copy(256, 128, jnp.float32))
    with pytest.raises(BackendCapabilityError, match=r"block shape \(None, 128\) of args\[0\].*"
                                                     r"dim 0 is 1 of 3"):
        f(jnp.zeros((3, 256), jnp.float32))


# (array shape, block shape, dtype): our rule's verdict must be the chip's.
CHIP_CASES = [
    ((6, 256), (3, 128), jnp.float32), ((16, 256), (8, 128), jnp.float32),
    ((16, 200), (8, 200), jnp.float32), ((16, 256), (8, 64), jnp.float32),
    ((32, 128), (8, 128), jnp.bfloat16), ((24, 256), (8, 128), jnp.int8),
    ((128, 256), (32, 128), jnp.int8),
    ((3, 256), (None, 128), jnp.float32), ((1, 256), (None, 128), jnp.float32),
    ((1024,), (128,), jnp.bfloat16), ((1024,), (256,), jnp.bfloat16),
    ((2048,), (64,), jnp.float32), ((1000,), (128,), jnp.float32),
]


@pytest.mark.parametrize("shape, block, dtype", CHIP_CASES)
def test_block_rule_agrees_with_a_deviceless_v5e_compile(aot_compile, shape, block, dtype):
    """JAX's own pallas_call, compiled for v5e without a device, refuses a block
    exactly when ours refuses it in TPU interpret mode."""
    from jax.experimental import pallas as jpl
    grid = tuple(-(-s // b) for s, b in zip(shape, block) if b is not None)
    grid = grid if len(grid) == len(shape) else (shape[0],) + grid

    def imap(*g):
        return g
    spec = (jpl.BlockSpec(block, imap), pl.BlockSpec(block, imap))
    theirs = jpl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(shape, dtype), grid=grid,
                             in_specs=[spec[0]], out_specs=spec[0])
    try:
        aot_compile(theirs, jax.ShapeDtypeStruct(shape, dtype))
        chip_ok = True
    except Exception as e:            # JAX's lowering rule (a ValueError), or Mosaic's
        assert "divisible by 8 and 128" in str(e) or "rank 1 block" in str(e), e
        chip_ok = False
    ours = pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(shape, dtype), grid=grid,
                          in_specs=[spec[1]], out_specs=spec[1],
                          interpret=pltpu.InterpretParams())
    try:
        jax.jit(ours).lower(jax.ShapeDtypeStruct(shape, dtype))
        ours_ok = True
    except BackendCapabilityError:
        ours_ok = False
    assert ours_ok == chip_ok, (shape, block, jnp.dtype(dtype).name, chip_ok)


def test_accepts_full_array_dims_and_runs():
    x = np.random.default_rng().standard_normal((20, 72)).astype(np.float32)
    out = _call((20, 72), shape=(20, 72))(jnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(out), x)


def test_rejects_float64():
    with jax.enable_x64(True):
        with pytest.raises(BackendCapabilityError,
                           match=r"'tpu' lacks capability 'float64'.*args\[0\]"):
            jax.jit(_call((8, 128), dtype=jnp.float64)).trace(
                jnp.zeros((256, 256), jnp.float64)).lower()


other_p = kernel_primitive("other_backend_op", owner="triton")
other_p.def_abstract_eval(lambda x: x)


def test_rejects_other_backends_primitive():
    def kernel(x_ref, o_ref):
        o_ref[...] = other_p.bind(x_ref[...])
    with pytest.raises(BackendCapabilityError, match="other_backend_op.*'triton'"):
        jax.jit(_call((8, 128), kernel=kernel)).trace(jnp.zeros((256, 256))).lower()


def test_interpreter_refuses_tpu_primitives_without_a_rule():
    # (local DMAs have one: tests/test_dma_interpret.py)
    def kernel(x_ref, o_ref):
        pltpu.prng_seed(1)
        o_ref[...] = x_ref[...]
    f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                       interpret=True)
    with pytest.raises(BackendCapabilityError, match="tpu_prng_seed.*'tpu'"):
        f(jnp.zeros((8, 128)))


def test_compiler_params_validate():
    with pytest.raises(ValueError, match="dimension_semantics"):
        pltpu.CompilerParams(dimension_semantics=("sideways",))
    with pytest.raises(TypeError):
        pltpu.InterpretParams(no_such_option=True)
    with pytest.raises(ValueError, match="dma_execution_mode"):
        pltpu.InterpretParams(dma_execution_mode="lazy")


def test_interpret_params_mirror_jax():
    """Same fields and defaults as JAX's TPU InterpretParams (fails on a JAX
    upgrade that adds or changes one)."""
    import dataclasses
    from jax.experimental.pallas import tpu as jax_tpu
    from pallas_tpu import _jax_private
    ours = {f.name: f.default for f in dataclasses.fields(pltpu.InterpretParams)
            if f.name not in pltpu.InterpretParams.OWN_FIELDS}      # chip_checks: ours only
    theirs = {f.name: f.default for f in dataclasses.fields(jax_tpu.InterpretParams)}
    # an older JAX of the window lacks the fields JAX 0.12 added, and only those
    newer = {name for name in ours if _jax_private.missing_interpret_field(name)}
    assert {k: v for k, v in ours.items() if k not in newer} == theirs
    params = pltpu.InterpretParams(detect_races=True, uninitialized_memory="zero")
    assert params.to_jax() == jax_tpu.InterpretParams(detect_races=True, uninitialized_memory="zero")


def test_cpu_without_interpret_is_refused():
    f = pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                       compiler_params=pltpu.CompilerParams())
    with pytest.raises(Exception, match="tpu"):
        f(jnp.zeros((8, 128)))


def test_bounded_slice_block_dims_are_refused_by_name():
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]
    f = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32), grid=(2,),
        in_specs=[pl.BlockSpec((pl.BoundedSlice(8), 128), lambda i: (pl.ds(i * 4, 8), 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
        compiler_params=pltpu.CompilerParams(), interpret=pltpu.InterpretParams())
    with pytest.raises(BackendCapabilityError, match=r"BoundedSlice block dim 0 of args\[0\]"):
        f(jnp.zeros((16, 128)))


@pytest.mark.parametrize("dtype, tile", [(jnp.int8, 32), (jnp.float8_e4m3fn, 32),
                                         (jnp.int4, 64)])
def test_narrow_types_need_their_row_tile_in_interpret_mode(aot_compile, dtype, tile):
    """An int8 (8, 128) block of a (128, 256) array: libtpu 0.0.42.1 (JAX 0.10's,
    what the v5e ran) tiles the rows by 32 and refuses it; newer libtpu compiles
    it. TPU interpret mode refuses it on every JAX of the window, naming the
    tile; a block of `tile` rows, or an array whose rows are no multiple of it,
    is taken."""
    from jax.experimental import pallas as jpl
    shape = (128, 256)
    with pytest.raises(BackendCapabilityError, match=rf"multiple of {tile} rows there.*it has 8"):
        jax.jit(_call((8, 128), shape=shape, dtype=dtype)).lower(
            jax.ShapeDtypeStruct(shape, dtype))
    jax.jit(_call((tile, 128), shape=shape, dtype=dtype)).lower(jax.ShapeDtypeStruct(shape, dtype))
    jax.jit(_call((8, 128), shape=(40, 256), dtype=dtype)).lower(
        jax.ShapeDtypeStruct((40, 256), dtype))
    if jax.__version_info__ < (0, 11):    # libtpu 0.0.42: the chip's own refusal
        spec = jpl.BlockSpec((8, 128), lambda i, j: (i, j))
        theirs = jpl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(shape, dtype),
                                 grid=(16, 2), in_specs=[spec], out_specs=spec)
        with pytest.raises(Exception, match="not divisible by tiling evenly"):
            aot_compile(theirs, jax.ShapeDtypeStruct(shape, dtype))
