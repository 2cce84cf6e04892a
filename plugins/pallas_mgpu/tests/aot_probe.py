"""Compiles kernels device-less for H100 in THIS process and reports what the
Mosaic GPU compiler dumped: run it in a subprocess (``python
plugins/pallas_mgpu/tests/aot_probe.py CASE... --dump DIR``), since a Mosaic GPU compile
with ptxas but no libdevice aborts the process.

Prints one JSON line per case: compiled or the error, the PTX files, whether
the PTX holds ``wgmma.mma_async``, and the ptxas report (registers, spills).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys



def _cases():
    import jax
    import jax.numpy as jnp

    import pallas_mgpu as plgpu
    from pallas_frontend.testing import kernels as K
    cp = {"compiler_params": plgpu.CompilerParams()}
    S = jax.ShapeDtypeStruct
    B = _block_shapes()
    ln_args = [S((128, 128), jnp.float32), S((128,), jnp.float32), S((128,), jnp.float32)]
    return {
        "add": (K.vector_add(1024, 128, **cp), [S((1024,), jnp.float32)] * 2),
        "ragged_add": (K.vector_add(1000, 128, **cp), [S((1000,), jnp.float32)] * 2),
        "matmul_f16": (K.blocked_matmul(256, 256, 512, 64, 128, 64, **cp),
                       [S((256, 512), jnp.float16), S((512, 256), jnp.float16)]),
        "softmax": (K.softmax(256, 128, 64, **cp), [S((256, 128), jnp.float32)]),
        # block shapes past Mosaic GPU's native tiles (issue 25; test_block_shapes.py)
        "add_block_1024": (K.vector_add(3000, 1024, **cp), [S((3000,), jnp.float32)] * 2),
        "add_8_no_grid": (B.small_add(8, **cp), [S((8,), jnp.float32)] * 2),
        "softmax_rows_8": (K.softmax(128, 64, 8, **cp), [S((128, 64), jnp.float32)]),
        "layer_norm_rows_8": (K.layer_norm(128, 128, 8, 1e-5, **cp), ln_args),
        "layer_norm_rows_64": (K.layer_norm(128, 128, 64, 1e-5, **cp), ln_args),
        "matmul_rows_32_f16": (K.blocked_matmul(256, 256, 512, 32, 128, 128, **cp),
                               [S((256, 512), jnp.float16), S((512, 256), jnp.float16)]),
        "flash_attention_portable_f16": (B.flash_attention(256, 64, 64, 64, jnp.float16, **cp),
                                         [S((256, 64), jnp.float16)] * 3),
        "flash_attention_portable_f32": (B.flash_attention(256, 64, 64, 64, jnp.float32, **cp),
                                         [S((256, 64), jnp.float32)] * 3),
        "matmul_rows_32_rhs_nk_f16": (B.matmul_rhs_nk(64, 128, 128, 32, **cp),
                                      [S((64, 128), jnp.float16), S((128, 128), jnp.float16)]),
        "matmul_rows_128_f16": (K.blocked_matmul(256, 256, 512, 128, 128, 128, **cp),
                                [S((256, 512), jnp.float16), S((512, 256), jnp.float16)]),
        "matmul_rows_128_f32": (K.blocked_matmul(256, 256, 512, 128, 128, 128, **cp),
                                [S((256, 512), jnp.float32), S((512, 256), jnp.float32)]),
        "matmul_rows_32_f32": (K.blocked_matmul(256, 256, 512, 32, 128, 128, **cp),
                               [S((256, 512), jnp.float32), S((512, 256), jnp.float32)]),
        "hopper_matmul": ("examples:hopper_matmul:matmul", [S((256, 256), jnp.float16)] * 2),
        "flash_attention": ("examples:flash_attention:attention",
                            [S((2, 256, 64), jnp.float16)] * 3),
    }


def _block_shapes():
    """The kernels of test_block_shapes.py (next to this file)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import test_block_shapes
    return test_block_shapes


def _ptxas_report(text: str) -> dict:
    regs = [int(r) for r in re.findall(r"Used (\d+) registers", text)]
    spills = [int(a) + int(b) for a, b in re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", text)]
    return {"registers": regs, "spill_bytes": spills}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--dump", required=True)
    ap.add_argument("--examples", default="")
    a = ap.parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from pallas_mgpu import aot
    cases = _cases()
    for name in a.cases:
        dump = os.path.join(a.dump, name)
        os.makedirs(dump, exist_ok=True)
        os.environ.update(MOSAIC_GPU_DUMP_TO=dump, MOSAIC_GPU_DUMP_PTX="1", MOSAIC_GPU_DUMP_PTXAS="1")
        fn, args = cases[name]
        if isinstance(fn, str):               # a function of examples/mgpu
            import importlib
            _, module, attr = fn.split(":")
            sys.path.insert(0, a.examples)
            fn = getattr(importlib.import_module(module), attr)
        result = {"case": name}
        try:
            aot.compile_for_cuda(fn, *args)
            result["compiled"] = True
        except Exception as e:  # reported, the caller asserts
            result.update(compiled=False, error=f"{type(e).__name__}: {str(e)[:800]}")
        ptx = [f for f in os.listdir(dump) if f.endswith(".ptx")]
        texts = {f: open(os.path.join(dump, f), errors="replace").read() for f in os.listdir(dump)}
        result["ptx_files"] = ptx
        result["wgmma_in_ptx"] = any("wgmma.mma_async" in texts[f] for f in ptx)
        result["mma_sync_in_ptx"] = any("mma.sync" in texts[f] for f in ptx)
        result["sm90a"] = any(".target sm_90a" in texts[f] for f in ptx)
        result["ptxas"] = _ptxas_report("\n".join(texts.values()))
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
