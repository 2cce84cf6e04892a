"""The Mosaic modules a lowered TPU program carries, as comparable text.

Each ``tpu_custom_call`` holds its Mosaic kernel as MLIR bytecode (base64, in
the ``backend_config`` JSON) beside the call's other settings. Two programs
launch the same kernels when, call by call, the bodies print the same in
generic form without locations (the source lines differ between JAX's file
and ours' copy of it) and the remaining settings are equal.

Used by tools/sc_mosaic.py (JAX's SparseCore test file, both sides) and by
plugins/pallas_tpu/tests/test_sparsecore_compile.py.
"""

from __future__ import annotations

import base64
import json
import re

_CONFIG = re.compile(r'backend_config = "(\{\\22custom_call_config.*?\})"')
# settings that name source lines, not the kernel
_LOCATION_KEYS = ("debug_locations",)


def _context():
    # JAX's own dialect set (func, arith, vector, memref, scf, math) plus Mosaic's
    from jax._src.interpreters import mlir
    from jax._src.lib import tpu
    context = mlir.make_ir_context()
    tpu.register_dialect(context)
    context.allow_unregistered_dialects = True
    return context


def _unescape(attr: str) -> str:
    """MLIR's printed string attribute -> its bytes as text (``\\22`` is ``"``)."""
    return re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)),
                  attr.replace("\\\\", "\\5C"))


def mosaic_modules(hlo_text: str) -> list[str]:
    """One text per ``tpu_custom_call`` of ``hlo_text`` (``Lowered.as_text()``),
    in program order: its settings (JSON, sorted keys, locations dropped) and
    its Mosaic module in generic form without locations."""
    from jax._src.lib.mlir import ir
    out = []
    configs = _CONFIG.findall(hlo_text)
    if not configs:
        return out
    with _context():
        for attr in configs:
            config = json.loads(_unescape(attr))
            call = config["custom_call_config"]
            body = base64.b64decode(call.pop("body"))
            for key in _LOCATION_KEYS:
                call.pop(key, None)
            module = ir.Module.parse(body)
            text = module.operation.get_asm(print_generic_op_form=True, enable_debug_info=False)
            out.append(json.dumps(config, sort_keys=True) + "\n" + text)
    return out


def first_difference(a: str, b: str, context: int = 1) -> str:
    """The first differing line of two module texts, with ``context`` lines
    before it, for a one-glance report ('' when equal)."""
    la, lb = a.splitlines(), b.splitlines()
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            lo = max(0, i - context)
            return (f"line {i + 1}: JAX: {' | '.join(la[lo:i + 1])[:300]}\n"
                    f"         ours: {' | '.join(lb[lo:i + 1])[:300]}")
    if len(la) != len(lb):
        return f"JAX has {len(la)} lines, ours {len(lb)}"
    return ""
