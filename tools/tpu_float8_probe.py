"""Where a bf16 x float8 dot's NaN goes on a TPU, under JAX's Pallas compiled:
the native mixed dot, and the same dot after widening the float8 operand
(to bfloat16, through float32, both operands in float32), for every float8
type. Prints, per variant, the result's NaN columns (the weights hold NaN in
columns 5 and 9) and whether its finite columns equal the native dot's bits.

Run on the chip host (python3 tools/tpu_float8_probe.py); its output of
2026-12-06 21:05 UTC (v5e, libtpu 0.0.42.1) is
benchmarks/results/tpu_native_v5e_2026-12-06s_float8_probe.txt, the evidence
for pallas_tpu/float8_dot.py."""
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax.experimental import pallas as pl

CONTRACT = (((1,), (0,)), ((), ()))
NAN_COLUMNS = [5, 9]
VARIANTS = ("native", "bf16", "f32bf16", "f32", "f32hi", "lhs8")


def variant(how):
    """A (64, 128) x (128, 128) -> f32 dot kernel; ``how`` widens the float8 weights
    (or both operands) first, or puts the float8 operand on the left."""
    def kernel(a_ref, w_ref, o_ref):
        a, w = a_ref[...], w_ref[...]
        precision = None
        if how == "bf16":
            w = w.astype(jnp.bfloat16)
        elif how == "f32bf16":
            w = w.astype(jnp.float32).astype(jnp.bfloat16)
        elif how in ("f32", "f32hi"):
            a, w = a.astype(jnp.float32), w.astype(jnp.float32)
            precision = jax.lax.Precision.HIGHEST if how == "f32hi" else None
        if how == "lhs8":
            o_ref[...] = jax.lax.dot_general(w, a, (((0,), (1,)), ((), ())),
                                             preferred_element_type=jnp.float32).T
            return
        o_ref[...] = jax.lax.dot_general(a, w, CONTRACT, precision=precision,
                                         preferred_element_type=jnp.float32)
    return jax.jit(pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((64, 128), jnp.float32)))


def widen(w_ref, o_ref):
    o_ref[...] = w_ref[...].astype(jnp.bfloat16).astype(jnp.float32)


rng = np.random.default_rng(11)
for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3b11fnuz", "float8_e4m3fnuz",
             "float8_e5m2fnuz"):
    w = (rng.standard_normal((128, 128)) * 4).astype(getattr(ml_dtypes, name))
    w[:, 5] = np.nan
    w[3, 9] = np.nan
    a = rng.standard_normal((64, 128)).astype(jnp.bfloat16)
    results = {}
    for how in VARIANTS:
        try:
            results[how] = np.asarray(variant(how)(a, w))
        except Exception as e:  # noqa: BLE001 - a type Mosaic cannot load: reported
            print(name, how, "ERROR", type(e).__name__, str(e).splitlines()[0][:200], flush=True)
    native = results.get("native")
    finite = np.ones(128, bool)
    finite[NAN_COLUMNS] = False
    for how, r in results.items():
        nan_columns = sorted(set(np.argwhere(np.isnan(r))[:, 1].tolist()))
        same = None if native is None else bool(
            (r[:, finite].view(np.uint32) == native[:, finite].view(np.uint32)).all())
        print(name, how, "NaN cols", nan_columns[:8], "finite bits == native", same,
              "r[:2,5]", r[:2, 5], flush=True)
    try:
        w32 = np.asarray(jax.jit(pl.pallas_call(
            widen, out_shape=jax.ShapeDtypeStruct((128, 128), jnp.float32)))(w))
    except Exception as e:  # noqa: BLE001
        print(name, "astype(bf16) ERROR", type(e).__name__, flush=True)
        continue
    print(name, "astype(bf16) NaN count", int(np.isnan(w32).sum()), "want",
          int(np.isnan(w.astype(np.float32)).sum()), flush=True)
