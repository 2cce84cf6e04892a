"""What the Triton backend does not do, each with the reason.

Plain data, read by ``TritonBackend``:
- ``CONFORMANCE_UNSUPPORTED`` / ``CONFORMANCE_XFAIL``: test-name patterns of the
  conformance suite (``pallas_frontend.testing``) -> reason; the first are
  skipped (permanent gaps), the second must fail (temporary gaps).
- ``UNSUPPORTED``: features ``check()`` refuses with a capability error.
- ``KNOWN_GAPS``: wrong or missing behaviour outside the suite, to be fixed.
- ``XLA_DIFFERENCES``: primitive -> where its results deliberately differ from the same
  jnp/lax code jitted by XLA on CPU (README "Deliberate differences from XLA"); every
  other result of the primitives in ``float_edges.py``/``xla_numerics.py`` is XLA's,
  bit for bit.

The capability tag the suite also keys on that is absent from
``TritonBackend.capabilities`` (``semaphores``) makes its tests skip by tag,
with no entry here.
"""

UNSUPPORTED = {
    "sliced_scratch": "scratch and run_scoped buffers live in registers (a loop-carried tensor per buffer); Triton "
                      "tensors cannot be sliced or updated in part, so scratch is read and "
                      "written whole only.",
    "scalar_prefetch_writes": "prefetched operands are the caller's read-only buffers (reads, "
                              "in index maps and the body, are generated: prefetch.py).",
    "semaphores": "no cross-program synchronization in Triton's model.",
    "gather_writes": "integer-array indices on Ref writes (plain Refs); reads are generated.",
    "scan_with_xs": "only fori_loop-style scans (carry only) become Python for-loops.",
    "batched_dot": "tl.dot here is 2-D only; dims must be >= 16.",
}

# Grid axes along which outputs are revisited (blocked matmul over k) run as loops
# inside each program (schedule.py), so the suite needs no skips.
CONFORMANCE_UNSUPPORTED: dict[str, str] = {}

CONFORMANCE_XFAIL: dict[str, str] = {}

KNOWN_GAPS = {
    "gpu_numerics": "launching on a real GPU is untested here (no GPU): lowering, export and "
                    "device-less XLA:GPU compiles for H100/A100 are tested.",
    "rocm": "lowering for rocm emits the same custom call with gfx942 TTIR, which Triton "
            "compiles to HSACO here (tox -e triton-amd); XLA:ROCm's compile and the launch are "
            "untested.",
}

# "ulps": finite results within that many units in the last place of XLA's, per dtype,
# on inputs that are not denormal (about twice the largest distance measured over 16k
# random values per dtype).
# The math functions are Triton's: NumPy's under the interpreter, libdevice's/ocml's on a
# GPU, not XLA's CPU approximations; where "why" says XLA's is the less accurate one, ours
# is within 3 ULP of the float64 result. Under the interpreter a denormal input reads as
# zero (XLA's CPU mode); XLA returns some of them unflushed (tanh(-7e-45) is -7e-45 there,
# -0.0 here). "nan_bits": False where only NaN-ness matches (not sign or payload): every
# math function.
# "sum_abs_eps": sums whose order differs from XLA's: within count * eps * sum(|terms|).
# "scalar_bounds": a lax.clamp with scalar bounds, where XLA's own NaN sign, sign of zero
# and denormal results depend on how it simplifies the clamp (constant bounds,
# broadcasts); with array bounds the result is XLA's bit for bit.
# "scalar_operand": {"dtypes": (...)}: with a constant operand in those dtypes only
# NaN-ness matches (not the NaN's sign).
# "denormal_ties": which of two values that compare equal (a denormal and a zero, with
# denormals treated as zero) comes out: results compare with denormals read as zero.
# "flushed_results": {dtype: why}: XLA returns +-0 where the result here is a denormal.
# Every field is read by tools/differential_corpus.py (``allowance``), which refuses a
# field it does not know.
# float64 bounds: twice what tools/differential_corpus.py measured (XLA's float64 exp2 and
# sinh/cosh are 490 ULP from ours, which match float64 references).
_TRITON_MATH = "Triton's math library, not XLA's CPU approximation"
_FLOATS = ("float32", "bfloat16", "float16", "float64")


def _math(f32, bf16=2, f16=2, why=_TRITON_MATH, f64=4, **extra):
    # the sign and payload of a NaN a math function returns are the library's, not XLA's
    # (XLA's log gives 0xFFFFFFFF, its exp keeps -NaN, NumPy's gives +NaN)
    return {"ulps": {"float32": f32, "bfloat16": bf16, "float16": f16, "float64": f64},
            "why": why, "nan_bits": False, **extra}


XLA_DIFFERENCES = {
    "exp": _math(4), "log": _math(4), "log2": _math(4, 3, 3), "rsqrt": _math(4),
    "exp2": _math(128, 192, 32, f64=1024, why="XLA's CPU exp2 is the less accurate (exp(x * ln 2))"),
    "tanh": _math(8, f64=16), "sin": _math(4), "cos": _math(4), "tan": _math(6), "erf": _math(8),
    "logistic": _math(8, 3, 3, flushed_results={
        "float16": "XLA flushes float16 results below 6.1e-5 to zero; kept here"}),
    "atan": _math(4), "asin": _math(6), "acos": _math(4), "asinh": _math(4),
    "acosh": _math(6, 3, 3), "atanh": _math(6), "cbrt": _math(4),
    "erf_inv": _math(128, why="XLA's CPU erf_inv is the less accurate near +-1 (50 ULP at "
                              "|x| = 0.9999, growing toward 1); bound for |x| <= 0.9999"),
    "sinh": _math(48, f64=1024, why="XLA's CPU sinh/cosh are the less accurate above |x| ~ 10 "
                          "(exp(|x| - ln 2))"),
    "cosh": _math(48, f64=1024, why="XLA's CPU sinh/cosh are the less accurate above |x| ~ 10"),
    "log1p": _math(8, why=f"{_TRITON_MATH}; XLA's NaN from log1p has all bits set"),
    "expm1": _math(8),
    "pow": _math(2, why="libdevice's/NumPy's pow; under the interpreter a denormal exponent "
                        "counts as zero (XLA's pow keeps it: pow(-2.5, 1e-45) is NaN there, "
                        "1 here)"),
    **{name: {"nan_bits": False, "ulps": dict.fromkeys(_FLOATS, 0), "denormal_ties": True,
              "why": "which NaN a reduction returns when it meets several (sign, payload), "
                     "and which of a denormal and a zero that compare equal (XLA on CPU "
                     "compares with denormals treated as zero), follows the reduction "
                     "order; NaN-ness and every other result are XLA's"}
       for name in ("reduce_max", "reduce_min", "cummax", "cummin")},
    **{name: {"sum_abs_eps": True,
              "why": "the summation order is Triton's (a tree on a GPU, NumPy's under the "
                     "interpreter, where 16-bit floats also accumulate in float32 and round "
                     "once); results differ from XLA's by rounding: within count * eps(dtype) "
                     "* sum(|terms|)"}
       for name in ("reduce_sum", "cumsum")},
    **{name: {"scalar_operand": {"dtypes": ("bfloat16",)},
              "why": "XLA gives 0x7FC0 for a NaN from two bfloat16 arrays on a host with "
                     "AVX512-BF16 (as here there, host_floats.py) but keeps the NaN's sign when "
                     "the other operand is a constant"}
       for name in ("max", "min")},
    # two-operand library functions: which NaN comes out of two NaN operands is the
    # library's; float16 add/mul of two NaNs: NumPy's float16 returns the second's sign
    "atan2": _math(4, why=f"{_TRITON_MATH}; which NaN of two NaN operands comes out is "
                          f"the library's"),
    "nextafter": {"nan_bits": False, "ulps": dict.fromkeys(_FLOATS, 0),
                  "why": "which NaN of two NaN operands comes out is the library's"},
    **{name: {"nan_bits": False, "ulps": {"float16": 0},
              "why": "under the interpreter float16 arithmetic is NumPy's: of two NaN operands "
                     "it returns the second's sign, XLA the first's"}
       for name in ("add", "mul")},
    "clamp": {"scalar_bounds": True,
              "why": "XLA's result depends on its simplification of the clamp"},
}

# Differences that hold for every float primitive, as in XLA_DIFFERENCES.
# "inputs_read_as_zero": results may be XLA's on inputs with denormals read as zero;
# "nan_bits": False with "except": NaN sign and payload free but for those primitives.
XLA_DIFFERENCES_EVERY_PRIMITIVE = {
    "denormal_inputs": {"inputs_read_as_zero": True, "why": "under the interpreter a denormal input follows the processor's "
                       "denormals-are-zero mode that XLA on CPU also runs in, not XLA's choice "
                       "per operation (XLA keeps some: tanh(-7e-45) and sin(-7e-45) are "
                       "-7e-45 there, -0.0 here); compare results on denormal inputs with "
                       "denormals read as zero. A GPU keeps float32 denormals."},
    "nan_from_nan_operands": {"nan_bits": False, "except": (
        "sign", "neg", "abs", "round", "max", "min", "clamp", "convert_element_type",
        "bitcast_convert_type", "select_n", "copy", "reduce_precision"), "why": "the sign and payload of a NaN that arithmetic or a math function "
                             "computes from NaN operands (float16 add/mul, 16-bit exp/log/"
                             "tanh/sin) can differ; NaN-ness is XLA's. sign, neg, abs, round, "
                             "max/min with array operands, conversions and selects keep XLA's "
                             "NaN bits."},
}
