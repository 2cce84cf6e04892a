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

# "ulps": finite results within that many units in the last place, per dtype (Triton's
# exp/log are NumPy's under the interpreter and libdevice's/ocml's on a GPU, not XLA's CPU
# polynomials). "nan_bits": False where only NaN-ness matches (not sign or payload).
# "scalar_bounds": a lax.clamp with scalar bounds, where XLA's own NaN sign, sign of zero
# and denormal results depend on how it simplifies the clamp (constant bounds, broadcasts);
# with array bounds the result is XLA's bit for bit.
XLA_DIFFERENCES = {
    "log1p": {"ulps": {"float32": 4, "bfloat16": 1, "float16": 1}, "nan_bits": False,
              "why": "Triton's log; XLA's NaN from log1p has all bits set"},
    "expm1": {"ulps": {"float32": 4, "bfloat16": 1, "float16": 1},
              "why": "Triton's exp and log"},
    "pow": {"ulps": {"float32": 1, "bfloat16": 1, "float16": 1},
            "why": "libdevice's/NumPy's pow; under the interpreter a denormal exponent "
                   "counts as zero (XLA's pow keeps it: pow(-2.5, 1e-45) is NaN there, 1 here)"},
    "clamp": {"scalar_bounds": "NaN-ness and values match; denormals compare as zero",
              "why": "XLA's result depends on its simplification of the clamp"},
}
