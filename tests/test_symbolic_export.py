"""``jax.export`` of kernels with static blocks over symbolic array and grid
sizes (issue 26): the built-in interpreter on CPU (serialised, deserialised and
run at several concrete sizes against NumPy), and the TPU plugin (exported for
``tpu`` as JAX exports it)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

import pallas_frontend as pl
from pallas_frontend.block_indices import BlockIndexError


def _axpb(x, y, *, block=(8, 128), grid_of=lambda n, b: pl.cdiv(n, b), interpret=None,
          call=None):
    """o = 2 x + y over (b, 128) arrays, one (8, 128) block per grid point."""
    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = 2.0 * x_ref[...] + y_ref[...]
    spec = (call or pl).BlockSpec(block, lambda i: (i, 0))
    kw = {} if interpret is None else {"interpret": interpret}
    return (call or pl).pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(grid_of(x.shape[0], block[0]),), in_specs=[spec, spec], out_specs=spec, **kw)(x, y)


def _sym(spec: str, **kw):
    return export.symbolic_shape(spec, **kw)


def _roundtrip(exp):
    return export.deserialize(exp.serialize())


def test_symbolic_batch_exports_serialises_and_runs_at_two_sizes(rng):
    (b,) = _sym("b")
    arg = jax.ShapeDtypeStruct((b, 128), jnp.float32)
    exp = _roundtrip(export.export(jax.jit(_axpb), platforms=["cpu"])(arg, arg))
    assert str(exp.in_avals[0]) == str(exp.out_avals[0]) == "float32[b,128]"
    for n in (16, 37):          # 37: the last block overhangs the array
        x, y = (rng.standard_normal((n, 128)).astype(np.float32) for _ in range(2))
        got = np.asarray(exp.call(x, y))
        np.testing.assert_allclose(got, 2 * x.astype(np.float64) + y, rtol=1e-6, atol=1e-6)


def test_floordiv_grid_with_a_divisibility_constraint(rng):
    (b,) = _sym("b", constraints=["mod(b, 8) == 0"])
    arg = jax.ShapeDtypeStruct((b, 128), jnp.float32)
    f = jax.jit(lambda x, y: _axpb(x, y, grid_of=lambda n, k: n // k))
    exp = _roundtrip(export.export(f, platforms=["cpu"])(arg, arg))
    for n in (8, 40):
        x, y = (rng.standard_normal((n, 128)).astype(np.float32) for _ in range(2))
        np.testing.assert_allclose(np.asarray(exp.call(x, y)), 2 * x.astype(np.float64) + y,
                                   rtol=1e-6, atol=1e-6)


def test_two_symbolic_dims_and_a_two_axis_grid(rng):
    def copy_scaled(x):
        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...] * 3
        spec = pl.BlockSpec((8, 128), lambda i, j: (i, j))
        grid = (pl.cdiv(x.shape[0], 8), (x.shape[1] + 127) // 128)
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct.like(x), grid=grid,
                              in_specs=[spec], out_specs=spec)(x)
    w, h = _sym("w, h")
    exp = _roundtrip(export.export(jax.jit(copy_scaled), platforms=["cpu"])(
        jax.ShapeDtypeStruct((w, h), jnp.int32)))
    for shape in ((8, 128), (21, 300)):
        x = rng.integers(-1000, 1000, shape).astype(np.int32)
        np.testing.assert_array_equal(np.asarray(exp.call(x)), x.astype(np.int64) * 3)


def test_cdiv_of_a_symbolic_dim_stays_symbolic():
    (m,) = _sym("m")
    c = pl.cdiv(m, 8)
    assert c == (m + 7) // 8
    assert not isinstance(c, jax.Array)


def test_matches_jax_interpret_export(rng):
    from jax.experimental import pallas as jpl
    (b,) = _sym("b")
    arg = jax.ShapeDtypeStruct((b, 128), jnp.float32)
    ours = _roundtrip(export.export(jax.jit(_axpb), platforms=["cpu"])(arg, arg))
    theirs = _roundtrip(export.export(
        jax.jit(lambda x, y: _axpb(x, y, interpret=True, call=jpl)), platforms=["cpu"])(arg, arg))
    assert str((ours.in_avals, ours.out_avals)) == str((theirs.in_avals, theirs.out_avals))
    for n in (24, 9):
        x, y = (rng.standard_normal((n, 128)).astype(np.float32) for _ in range(2))
        np.testing.assert_allclose(np.asarray(ours.call(x, y)), np.asarray(theirs.call(x, y)),
                                   rtol=1e-6, atol=1e-6)


def test_symbolic_block_refused_without_the_switch():
    (m,) = _sym("m")
    f = jax.jit(lambda x: pl.pallas_call(
        lambda x_ref, o_ref: o_ref.__setitem__(..., x_ref[...]),
        out_shape=jax.ShapeDtypeStruct.like(x))(x))
    with pytest.raises(ValueError, match="dynamically-shaped blocks.*pallas_export_experimental"):
        export.export(f, platforms=["cpu"])(jax.ShapeDtypeStruct((m, 128), jnp.float32))


def test_symbolic_block_with_the_switch_runs(rng):
    def f(x):
        def kernel(x_ref, o_ref):
            o_ref[...] = x_ref[...] + 1.0
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct.like(x))(x)
    (m,) = _sym("m")
    with pl.pallas_export_experimental(dynamic_shapes=True):
        exp = export.export(jax.jit(f), platforms=["cpu"])(
            jax.ShapeDtypeStruct((m, 128), jnp.float32))
    exp = _roundtrip(exp)
    for n in (3, 11):
        x = rng.standard_normal((n, 128)).astype(np.float32)
        np.testing.assert_allclose(np.asarray(exp.call(x)), x.astype(np.float64) + 1,
                                   rtol=1e-6, atol=1e-6)


def test_block_range_that_cannot_be_proven_is_refused_at_export():
    # one block too many: for some b the last block starts past the array
    (b,) = _sym("b")
    arg = jax.ShapeDtypeStruct((b, 128), jnp.float32)
    f = jax.jit(lambda x, y: _axpb(x, y, grid_of=lambda n, k: n // k + 1))
    with pytest.raises(BlockIndexError, match=r"blocks of args\[0\] cannot be proven"):
        export.export(f, platforms=["cpu"])(arg, arg)


def test_exports_for_tpu_as_jax_does():
    pytest.importorskip("pallas_tpu")
    from jax.experimental import pallas as jpl
    (b,) = _sym("b")
    arg = jax.ShapeDtypeStruct((b, 128), jnp.float32)
    ours = export.export(jax.jit(_axpb), platforms=["tpu"])(arg, arg)
    theirs = export.export(jax.jit(lambda x, y: _axpb(x, y, call=jpl)),
                           platforms=["tpu"])(arg, arg)
    assert ours.in_avals == theirs.in_avals and ours.out_avals == theirs.out_avals
    for exp in (ours, theirs):
        text = exp.mlir_module()
        assert text.count("tpu_custom_call") == 1
        assert "tensor<?x128xf32>" in text
    _roundtrip(ours)


def test_symbolic_block_width_with_pl_ds_and_num_programs(rng):
    # under the switch the grid stays symbolic: pl.num_programs is the dim itself
    def f(x):
        def kernel(x_ref, o_ref):
            n = x_ref.shape[1]
            steps = jnp.asarray(pl.num_programs(0), jnp.int32).astype(jnp.float32)
            o_ref[:, pl.ds(0, n)] = x_ref[:, pl.ds(0, n)] * 2.0 + steps
        spec = pl.BlockSpec((8, x.shape[1]), lambda i: (i, 0))
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct.like(x), in_specs=[spec],
                              out_specs=spec, grid=(pl.cdiv(x.shape[0], 8),))(x)
    b, c = _sym("b, c")
    with pl.pallas_export_experimental(dynamic_shapes=True):
        exp = export.export(jax.jit(f), platforms=["cpu"])(
            jax.ShapeDtypeStruct((b, c), jnp.float32))
    exp = _roundtrip(exp)
    for n, m in ((16, 5), (37, 130)):
        x = rng.standard_normal((n, m)).astype(np.float32)
        want = x.astype(np.float64) * 2 + -(-n // 8)
        np.testing.assert_allclose(np.asarray(exp.call(x)), want, rtol=1e-6, atol=1e-6)


def test_triton_refuses_a_symbolic_grid_in_jax_words():
    pallas_triton = pytest.importorskip("pallas_triton")
    (b,) = _sym("b")
    arg = jax.ShapeDtypeStruct((b, 128), jnp.float32)
    f = jax.jit(lambda x, y: pl.pallas_call(
        lambda x_ref, y_ref, o_ref: o_ref.__setitem__(..., x_ref[...] + y_ref[...]),
        out_shape=jax.ShapeDtypeStruct.like(x), grid=(pl.cdiv(x.shape[0], 8),),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))] * 2,
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        compiler_params=pallas_triton.CompilerParams())(x, y))
    with pytest.raises(NotImplementedError,
                       match="dynamic grid bounds not supported in the Triton backend"):
        export.export(f, platforms=["cuda"])(arg, arg)


def test_interpreter_exports_for_cpu_and_cuda_at_once(rng):
    # the built-in interpreter lowers to plain XLA ops: one export serves both platforms
    (b,) = _sym("b")
    arg = jax.ShapeDtypeStruct((b, 128), jnp.float32)
    exp = _roundtrip(export.export(jax.jit(lambda x, y: _axpb(x, y, interpret=True)),
                                   platforms=["cpu", "cuda"])(arg, arg))
    assert exp.platforms == ("cpu", "cuda")
    for n in (8, 29):
        x, y = (rng.standard_normal((n, 128)).astype(np.float32) for _ in range(2))
        np.testing.assert_allclose(np.asarray(exp.call(x, y)), 2 * x.astype(np.float64) + y,
                                   rtol=1e-6, atol=1e-6)
