"""What the conformance suite should skip or expect to fail on backend ``tpu``.

Plain data (feature -> reason) until the suite's manifest format settles;
``UNSUPPORTED`` features are skipped, ``XFAIL`` ones are expected to fail.
"""

UNSUPPORTED: dict[str, str] = {
    "float64": "Mosaic TPU has no 64-bit vector types; check() rejects float64/int64 operands.",
    "complex": "Mosaic TPU has no complex vector types.",
    "untiled_blocks": "VMEM blocks whose last two dims neither tile (8, 128) nor equal the "
                      "array dims do not lower (JAX's TPU lowering and Mosaic reject them); "
                      "check() raises before lowering.",
    "execution_without_interpret_on_cpu": "Mosaic kernels run on TPUs only; on CPU the suite "
                                          "runs them with interpret=pallas_tpu.InterpretParams().",
    "frontend_interpreter_with_tpu_primitives": "interpret=True is the frontend's interpreter, "
                                                "which refuses TPU-owned primitives (DMAs, PRNG).",
    "get_global": "pl.get_global is not mapped to Mosaic yet.",
    "core_map": "pl.kernel/core_map over a TensorCoreMesh is not mapped yet (needs pltpu.TensorCoreMesh).",
}

XFAIL: dict[str, str] = {
    "shard_map_check_vma_interpret": "JAX 0.12's TPU interpreter re-evaluates axis_index "
                                     "without varying-axes types; in TPU interpret mode use "
                                     "shard_map(check_vma=False). AOT compilation is unaffected.",
    "element_padding_nonzero": "pl.Element with non-zero padding is passed through to JAX; "
                               "untested on Mosaic here.",
}
