"""JAX's trivial-windowing rule in ours' pipelines: an operand whose block is
the whole array at every step gets one unsliced buffer of its own shape
(copied in before the loop, out after it), not a slot per buffer placed end
to end. An mHC-style kernel (maxtext's pattern: a pipeline over token blocks
beside (1,)-shaped bf16 and (streams,)-shaped whole-array parameters, forward
and gradient) compiles for v5e under ours as under JAX, and is bit-equal to
JAX's in TPU interpret mode; both are checked against NumPy in float64."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pallas_frontend as pl
import pallas_tpu as pltpu
from pallas_tpu import pipeline_schedule

TOKENS, FEATURES, STREAMS, BLOCK = 64, 256, 4, 16
EPS = 1e-5


def _coefficients(x, phi, scale, bias):
    """h = sigmoid(scale * (x @ phi) / rms(x) + bias), x and phi in bf16."""
    xf = x.astype(jnp.float32)
    projected = jnp.dot(x, phi.astype(jnp.bfloat16), preferred_element_type=jnp.float32)
    projected = projected * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + EPS)
    return jax.nn.sigmoid(scale.astype(jnp.float32) * projected + bias.astype(jnp.float32))


def _kernels(Pl, T, interpret=False):
    """(forward, gradient) as JAX's pallas_call of an emit_pipeline (maxtext's mHC form)."""
    hbm = Pl.BlockSpec(memory_space=getattr(T, "ANY", None) or Pl.ANY)

    def whole(shape):
        return Pl.BlockSpec(shape, lambda i: (0,) * len(shape))

    def tokens(shape):
        return Pl.BlockSpec((BLOCK, *shape[1:]), lambda i: (i,) + (0,) * (len(shape) - 1))

    def forward(x, phi, scale, bias):
        def body(x_ref, phi_ref, scale_ref, bias_ref, h_ref):
            h_ref[...] = _coefficients(x_ref[...], phi_ref[...], scale_ref[...], bias_ref[...])
        pipeline = T.emit_pipeline(
            body, grid=(TOKENS // BLOCK,),
            in_specs=(tokens(x.shape), whole(phi.shape), whole(scale.shape), whole(bias.shape)),
            out_specs=tokens((TOKENS, STREAMS)))
        return Pl.pallas_call(
            pipeline, out_shape=jax.ShapeDtypeStruct((TOKENS, STREAMS), jnp.float32),
            in_specs=[hbm] * 4, out_specs=hbm, interpret=interpret)(x, phi, scale, bias)

    def gradient(x, phi, scale, bias, d_h):
        def body(x_ref, phi_ref, scale_ref, bias_ref, d_h_ref,
                 d_x_ref, d_phi_ref, d_scale_ref, d_bias_ref):
            _, vjp = jax.vjp(_coefficients, x_ref[...], phi_ref[...], scale_ref[...],
                             bias_ref[...])
            d_x, d_phi, d_scale, d_bias = vjp(d_h_ref[...])
            d_x_ref[...] = d_x.astype(d_x_ref.dtype)

            @Pl.when(Pl.program_id(0) == 0)
            def _():
                d_phi_ref[...] = jnp.zeros_like(d_phi_ref)
                d_scale_ref[...] = jnp.zeros_like(d_scale_ref)
                d_bias_ref[...] = jnp.zeros_like(d_bias_ref)
            d_phi_ref[...] += d_phi.astype(jnp.float32)
            d_scale_ref[...] += d_scale.astype(jnp.float32)
            d_bias_ref[...] = (d_bias_ref[...].astype(jnp.float32)
                               + d_bias.astype(jnp.float32)).astype(d_bias_ref.dtype)
        pipeline = T.emit_pipeline(
            body, grid=(TOKENS // BLOCK,),
            in_specs=(tokens(x.shape), whole(phi.shape), whole(scale.shape), whole(bias.shape),
                      tokens(d_h.shape)),
            out_specs=(tokens(x.shape), whole(phi.shape), whole(scale.shape),
                       whole(bias.shape)))
        out_shape = (jax.ShapeDtypeStruct(x.shape, x.dtype),
                     jax.ShapeDtypeStruct(phi.shape, jnp.float32),
                     jax.ShapeDtypeStruct(scale.shape, jnp.float32),
                     jax.ShapeDtypeStruct(bias.shape, jnp.bfloat16))   # a bf16 whole output too
        return Pl.pallas_call(pipeline, out_shape=out_shape, in_specs=[hbm] * 5,
                              out_specs=[hbm] * 4, interpret=interpret)(x, phi, scale, bias, d_h)
    return forward, gradient


def _inputs():
    rng = np.random.default_rng()
    x = jnp.asarray(rng.standard_normal((TOKENS, FEATURES)), jnp.bfloat16)
    phi = jnp.asarray(rng.standard_normal((FEATURES, STREAMS)) / 16, jnp.float32)
    scale = jnp.asarray(rng.uniform(0.5, 1.5, (1,)), jnp.bfloat16)
    bias = jnp.asarray(rng.standard_normal((STREAMS,)), jnp.bfloat16)
    d_h = jnp.asarray(rng.standard_normal((TOKENS, STREAMS)), jnp.float32)
    return x, phi, scale, bias, d_h


BF16_UNIT = 2.0 ** -8        # bf16 round-to-nearest: relative error at most 2**-8
F32_MARGIN = 2.0 ** -14      # float32 sums of <= 256 terms, and float32 transcendentals


def _numpy_reference(x, phi, scale, bias, d_h):
    """Forward and gradient in float64 (from the bf16-rounded inputs the kernel sees),
    each gradient with the error bound of the kernel's bf16 roundings.

    The vjp computes in float32 and rounds to bf16 only where its results are
    bf16: d_x's two terms (the matmul's and the rms's), each rounded, then their
    bf16 sum; d_phi, d_scale and d_bias once per token block
    (the block's partial sum); d_bias again after each step of its bf16 running
    sum. So the bound is 2**-8 times the magnitudes that get rounded, plus a
    float32 margin on the sum of the terms' magnitudes."""
    f64 = lambda a: np.asarray(jnp.asarray(a, jnp.float32), np.float64)
    x, scale, bias, d_h = f64(x), f64(scale)[0], f64(bias), f64(d_h)
    phi_b = f64(jnp.asarray(phi).astype(jnp.bfloat16))
    projected = x @ phi_b
    r = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS)
    h = 1.0 / (1.0 + np.exp(-(scale * projected * r + bias)))
    d_z = d_h * h * (1.0 - h)
    d_projected = d_z * scale * r
    d_r = np.sum(d_z * scale * projected, axis=-1, keepdims=True)
    d_x = d_projected @ phi_b.T - d_r * r ** 3 * x / x.shape[-1]
    x_terms = (np.abs(d_projected) @ np.abs(phi_b.T)
               + np.sum(np.abs(d_z * scale * projected), axis=-1, keepdims=True)
               * r ** 3 * np.abs(x) / x.shape[-1])

    blocks = [slice(start, start + BLOCK) for start in range(0, TOKENS, BLOCK)]
    partials = {
        "d_phi": [x[b].T @ d_projected[b] for b in blocks],
        "d_scale": [np.array([np.sum(d_z[b] * projected[b] * r[b])]) for b in blocks],
        "d_bias": [d_z[b].sum(axis=0) for b in blocks]}
    terms = {
        "d_phi": np.abs(x).T @ np.abs(d_projected),
        "d_scale": np.array([np.sum(np.abs(d_z * projected * r))]),
        "d_bias": np.abs(d_z).sum(axis=0)}
    bounds = {name: BF16_UNIT * sum(np.abs(p) for p in parts) + F32_MARGIN * terms[name]
              for name, parts in partials.items()}
    bounds["d_bias"] += BF16_UNIT * sum(np.abs(np.sum(partials["d_bias"][:k + 1], axis=0))
                                        for k in range(len(blocks)))
    gradients = [(d_x, BF16_UNIT * (np.abs(d_x) + x_terms) + F32_MARGIN * x_terms)]
    gradients += [(sum(partials[name]), bounds[name]) for name in ("d_phi", "d_scale", "d_bias")]
    return h, gradients


def _v5e_abstract_mesh():
    """JAX's pipeline reads the chip's tiling from the context mesh on CPU."""
    return jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh(
        (), (), abstract_device=jax.sharding.AbstractDevice("TPU v5 lite", 1, "tpu")))


def _flat(result):
    return [np.asarray(jnp.asarray(a, jnp.float32)) for a in jax.tree.leaves(result)]


@pytest.mark.parametrize("mode", ["tpu_interpret", "builtin_interpreter"])
def test_mhc_style_pipeline_matches_numpy_and_jax(mode):
    from jax.experimental import pallas as jpl
    from jax.experimental.pallas import tpu as jpltpu
    args = _inputs()
    forward, gradient = _kernels(pl, pltpu, pltpu.InterpretParams() if mode == "tpu_interpret"
                                 else True)
    h = _flat(jax.jit(forward)(*args[:4]))[0]
    grads = _flat(jax.jit(gradient)(*args))
    want_h, want_grads = _numpy_reference(*args)
    np.testing.assert_allclose(h, want_h, rtol=2e-3, atol=2e-3)
    for got, (want, bound) in zip(grads, want_grads, strict=True):
        np.testing.assert_array_less(np.abs(got - want), bound)
    j_forward, j_gradient = _kernels(jpl, jpltpu, jpltpu.InterpretParams())
    with _v5e_abstract_mesh():
        theirs = _flat(jax.jit(j_forward)(*args[:4])) + _flat(jax.jit(j_gradient)(*args))
    for ours, jax_value in zip([h, *grads], theirs, strict=True):
        np.testing.assert_array_equal(ours, jax_value)


def test_mhc_style_pipeline_compiles_for_v5e_as_jax_does(aot_compile):
    """Before the rule, ours sliced the (1,) bf16 operand's two end-to-end
    buffers at offset 1 and Mosaic refused ('Slice sizes along tiled dimensions
    must be aligned to tiles')."""
    from jax.experimental import pallas as jpl
    from jax.experimental.pallas import tpu as jpltpu
    args = [jnp.zeros(a.shape, a.dtype) for a in _inputs()]
    for Pl, T in ((pl, pltpu), (jpl, jpltpu)):
        forward, gradient = _kernels(Pl, T)
        for fn, fn_args in ((forward, args[:4]), (gradient, args)):
            _, text = aot_compile(fn, *fn_args)
            assert "tpu_custom_call" in text


@pytest.mark.skipif(jax.default_backend() != "tpu", reason="runs on a TPU chip")
def test_mhc_style_pipeline_on_tpu_matches_jax():
    """Seen on a v5e (JAX 0.10.2, libtpu 0.0.42): forward and gradient bit-equal
    to JAX's once the pipeline's buffers open one pl.run_scoped (nested one per
    buffer, Mosaic's relayout pass overflowed its stack on the gradient)."""
    from jax.experimental import pallas as jpl
    from jax.experimental.pallas import tpu as jpltpu
    args = _inputs()
    results = []
    for Pl, T in ((pl, pltpu), (jpl, jpltpu)):
        forward, gradient = _kernels(Pl, T)
        results.append(_flat(jax.jit(forward)(*args[:4])) + _flat(jax.jit(gradient)(*args)))
    for ours, theirs in zip(*results, strict=True):
        np.testing.assert_array_equal(ours, theirs)


# --- the rule itself, as JAX's make_allocations applies it ------------------------------

def _window_shapes(specs, shapes, grid, dtype=jnp.float32):
    """The window shape of each allocation make_allocations gives (or None)."""
    out = []

    def kernel(*refs):
        brefs = pipeline_schedule.make_allocations(*refs[:-1], in_specs=specs, grid=grid)
        out.extend((b.is_trivial_windowing, tuple(b.window_ref.shape)) for b in brefs)
        refs[-1][...] = jnp.zeros_like(refs[-1])
    pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                   in_specs=[pl.BlockSpec(memory_space=pltpu.ANY)] * len(shapes),
                   interpret=True)(*[jnp.zeros(s, dtype) for s in shapes])
    return out


def test_whole_array_block_gets_one_unsliced_buffer():
    grid = (4, 2)
    specs = [pl.BlockSpec((1,), lambda i, j: (0,)),                 # whole, constant map
             pl.BlockSpec((16, 128), lambda i, j: (0, 0)),          # whole, 2-D
             pl.BlockSpec(None),                                    # no block shape: whole
             pl.BlockSpec((8, 128), lambda i, j: (i, 0)),           # a real window
             pl.BlockSpec((16, 128), lambda i, j: (i * 0, 0)),      # reads i: not trivial (JAX)
             pl.BlockSpec((None, 128), lambda i, j: (0, 0)),        # squeezed: not trivial (a 1-D block: slots end to end)
             pl.BlockSpec((16, 128), lambda i, j: (0, 0),
                          pipeline_mode=pl.Buffered(3))]            # count given: still one
    shapes = [(1,), (16, 128), (16, 128), (32, 128), (16, 128), (1, 128), (16, 128)]
    got = _window_shapes(specs, shapes, grid)
    assert got == [(True, (1,)), (True, (16, 128)), (True, (16, 128)), (False, (2, 8, 128)),
                   (False, (2, 16, 128)), (False, (256,)), (True, (16, 128))]


def test_grid_of_ones_is_trivial_whatever_the_map_reads():
    got = _window_shapes([pl.BlockSpec((16, 128), lambda i: (i, 0))], [(16, 128)], (1,))
    assert got == [(True, (16, 128))]


def test_index_map_reading_a_ref_is_not_trivial():
    """A Ref may change while the pipeline runs (JAX's rule)."""
    out = []

    def kernel(idx_ref, x_hbm, o_ref):
        spec = pl.BlockSpec((16, 128), lambda i: (idx_ref[0], 0))
        (b,) = pipeline_schedule.make_allocations(x_hbm, in_specs=[spec], grid=(4,))
        out.append(b.is_trivial_windowing)
        o_ref[...] = jnp.zeros_like(o_ref)
    pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                   in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM),
                             pl.BlockSpec(memory_space=pltpu.ANY)],
                   interpret=True)(jnp.zeros((1,), jnp.int32), jnp.zeros((16, 128)))
    assert out == [False]


@pytest.mark.parametrize("mode", ["tpu_interpret", "builtin_interpreter"])
def test_with_allocations_whole_operand_input_and_output(mode):
    """emit_pipeline_with_allocations: a whole-array input read at every step and a
    whole-array output accumulated over the steps, beside a windowed operand."""
    rng = np.random.default_rng()
    x = rng.standard_normal((64, 128)).astype(np.float32)
    w = rng.standard_normal((1, 128)).astype(np.float32)

    def kernel(x_hbm, w_hbm, y_hbm, total_hbm):
        def body(x_ref, w_ref, y_ref, total_ref):
            @pl.when(pl.program_id(0) == 0)
            def _():
                total_ref[...] = jnp.zeros_like(total_ref)
            y_ref[...] = x_ref[...] * w_ref[...]
            total_ref[...] += jnp.sum(y_ref[...], axis=0, keepdims=True)
        pipeline, make = pltpu.emit_pipeline_with_allocations(
            body, grid=(8,),
            in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0)),
                      pl.BlockSpec((1, 128), lambda i: (0, 0))],
            out_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0)),
                       pl.BlockSpec((1, 128), lambda i: (0, 0))])
        allocations = make(x_hbm, w_hbm, y_hbm, total_hbm)
        assert [b.is_trivial_windowing for b in allocations] == [False, True, False, True]
        pl.run_scoped(lambda a: pipeline(x_hbm, w_hbm, y_hbm, total_hbm, allocations=a),
                      allocations)

    hbm = pl.BlockSpec(memory_space=pltpu.ANY)
    y, total = pl.pallas_call(
        kernel, out_shape=(jax.ShapeDtypeStruct(x.shape, jnp.float32),
                           jax.ShapeDtypeStruct(w.shape, jnp.float32)),
        in_specs=[hbm, hbm], out_specs=[hbm, hbm],
        interpret=pltpu.InterpretParams() if mode == "tpu_interpret" else True)(x, w)
    want = x.astype(np.float64) * w
    np.testing.assert_allclose(np.asarray(y), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(total), want.sum(axis=0, keepdims=True),
                               rtol=1e-5, atol=1e-5)


def test_with_allocations_whole_operand_aot(aot_compile):
    hbm = pl.BlockSpec(memory_space=pltpu.ANY)

    def call(x, scale):
        def kernel(x_hbm, s_hbm, o_hbm):
            pipeline, make = pltpu.emit_pipeline_with_allocations(
                lambda x_ref, s_ref, o_ref: o_ref.__setitem__(
                    ..., x_ref[...] * s_ref[...].astype(jnp.float32)),
                grid=(4,), in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0)),
                                     pl.BlockSpec((1,), lambda i: (0,))],
                out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)))
            pl.run_scoped(lambda a: pipeline(x_hbm, s_hbm, o_hbm, allocations=a),
                          make(x_hbm, s_hbm, o_hbm))
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              in_specs=[hbm, hbm], out_specs=hbm)(x, scale)
    _, text = aot_compile(functools.partial(call), jnp.zeros((32, 128), jnp.float32),
                          jnp.zeros((1,), jnp.bfloat16))
    assert "tpu_custom_call" in text
