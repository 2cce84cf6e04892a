"""Conformance manifests of backend ``mgpu``: permanent gaps (skipped) and
known failures (strict xfail), each with its reason.

Execution, interpret-parity and negative layers all run (interpret mode on
CPU). The gaps are in the compile-only layer, where Mosaic GPU's compiler
(JAX 0.12) cannot take the suite's block shapes; ``check_compiled`` refuses
them with these reasons before lowering.
"""

UNSUPPORTED: dict[str, str] = {
    "test_lowers_and_compiles[transpose_2d]": "JAX 0.12's Mosaic GPU has no in-register transpose",
    "test_capability_tag_is_checked[semaphores]":
        "the suite's portable semaphore is an int32 buffer it writes; Mosaic GPU signals only "
        "plgpu.SemaphoreType scratch, and check() refuses the rest (tests/test_semaphores.py "
        "covers the tag)",
}

XFAIL: dict[str, str] = {}

# Under an older JAX of the window (0.10-0.12), keyed by what that JAX lacks.
from pallas_mgpu import _jax_private  # noqa: E402

if since := _jax_private.plgpu_lacks("mma"):
    UNSUPPORTED["test_lowers_and_compiles[blocked_matmul]"] = _jax_private.needs_newer_jax(
        "a float32 matmul with a (k, n) right operand (the warp-level MMA, plgpu.mma)", since)
if not _jax_private.warpgroup_semantics_is_jax_default():
    UNSUPPORTED["test_lowers_and_compiles[layer_norm]"] = (
        "JAX 0.10's Mosaic GPU layout inference (warpgroup semantics, not yet its default) "
        "finds no layout for the suite's layer_norm after minutes of search, and lane "
        "semantics no bank-conflict-free transfer; JAX 0.11 or newer lowers it")

